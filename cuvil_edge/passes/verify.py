"""The IR verifier: run after import and after every pass; names the pass and node that broke it."""

from __future__ import annotations

from ..errors import GraphVerificationError
from ..ir.graph import Graph
from ..ops import get as get_op


def verify(graph: Graph, after: str = "import") -> None:
    def fail(msg: str) -> GraphVerificationError:
        return GraphVerificationError(f"after {after}: {msg}")

    defined: set[int] = {id(v) for v in graph.inputs}
    produced: set[int] = set()
    for v in graph.inputs:
        if v.is_const:
            raise fail(f"graph input {v.name!r} is a constant")
    for n in graph.nodes:
        try:
            opdef = get_op(n.op)
        except KeyError as exc:
            raise fail(f"node {n.name!r} has unknown op {n.op!r}") from exc
        for v in n.inputs:
            if not v.is_const and id(v) not in defined:
                raise fail(f"node {n.name!r} reads {v.name!r} before it is defined")
        for o in n.outputs:
            if id(o) in produced or id(o) in {id(i) for i in graph.inputs}:
                raise fail(f"value {o.name!r} is defined twice (again by {n.name!r})")
            if o.is_const:
                raise fail(f"node {n.name!r} writes the constant {o.name!r}")
            produced.add(id(o))
            defined.add(id(o))
        try:
            types = list(opdef.infer(n))
        except Exception as exc:
            raise fail(f"node {n.name!r} ({n.op}) fails shape inference: {exc}") from exc
        if [t.shape for t in types] != [o.type.shape for o in n.outputs] or \
                [t.dtype for t in types] != [o.type.dtype for o in n.outputs]:
            raise fail(f"node {n.name!r} ({n.op}) outputs {[str(o.type) for o in n.outputs]} but its "
                       f"inputs imply {[str(t) for t in types]}")
        for sub in n.subgraphs:  # a body sees outer values only through its inputs (explicit captures)
            verify(sub, f"{after} (in {n.op} {n.name!r})")
    for v in graph.outputs:
        if not v.is_const and id(v) not in defined:
            raise fail(f"graph output {v.name!r} is never defined")
