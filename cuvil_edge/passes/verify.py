"""The IR verifier: run after import and after every pass; names the pass and node that broke it.

Besides the graph's shape (definitions before uses, one writer per value, types as inference gives them)
it checks each node's attrs against its op's schema (``ops/attrs.py``) and each value's quantization
record (``Value.quant``) against the value it describes.
"""

from __future__ import annotations

from ..errors import GraphVerificationError
from ..ir.graph import Graph, Value
from ..ops import get as get_op
from ..ops.attrs import attr_problems


def quant_problem(v: Value) -> str | None:
    """What is wrong with ``v``'s quantization record (None: nothing, or it has none): a constant holds
    the real (float32) values, a run-time value its integers as uint8; per-channel scales match the axis."""
    q = v.quant
    if q is None:
        return None
    held = "float32" if v.is_const else "uint8"
    if v.type.dtype != held:
        return f"is {v.type.dtype} but a quantized {'constant' if v.is_const else 'run-time value'} is {held}"
    if q.axis is not None and (q.axis >= len(v.type.shape) or v.type.shape[q.axis] != q.scale.size):
        return f"has {q.scale.size} scales along axis {q.axis} of {v.type}"
    return None


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
        if (wrong := opdef.dtype_problem(n)) is not None:
            raise fail(f"node {n.name!r}: {wrong}")
        problems = attr_problems(n)
        if problems:
            raise fail(f"node {n.name!r} ({n.op}): {'; '.join(problems)}")
        for v in (*n.inputs, *n.outputs):
            if (what := quant_problem(v)) is not None:
                raise fail(f"value {v.name!r} of node {n.name!r} ({n.op}) {what}")
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
