"""The op registry: one ``OpDef`` per IR op ties shape inference, constant folding and C emission.

Adding an op is one converter in ``frontend/onnx/`` plus one ``OpDef`` here (and its kernel family
template when it needs new C code).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..ir.graph import Node, TensorType

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

InferFn = Callable[[Node], Sequence[TensorType]]
FoldFn = Callable[[Node, Sequence[np.ndarray]], Sequence[np.ndarray]]
EmitFn = Callable[[Node, "EmitContext"], str]
ScratchFn = Callable[[Node], int]


@dataclass(frozen=True)
class OpDef:
    """What the compiler knows about one IR op.

    infer:   output types from input types and attrs (all shapes static).
    fold:    numpy reference used for constant folding (and as a readable spec); None = never folded.
    emit:    C statement(s) that run the op, given an ``EmitContext`` that resolves addresses.
    kernels: kernel families (template names) the emitted code calls.
    alias:   output is a view of input 0 (reshape family): no code, no memory.
    inplace: output may reuse input 0's buffer when that input dies here.
    scratch: bytes of per-node scratch memory (e.g. im2col panels).
    dtypes:  the element types its kernels take for input 0 and every output (``F32``: the float
             kernels); None where the op's ``infer`` checks its types itself (movement and logic ops
             take any, the integer kernels check theirs). Checked at import (``UnsupportedOperator``
             naming the ONNX op, node and dtype) and by the verifier after every pass: a dtype no kernel
             takes never reaches the C compiler.
    """

    name: str
    infer: InferFn
    fold: FoldFn | None = None
    emit: EmitFn | None = None
    kernels: tuple[str, ...] = ()
    alias: bool = False
    inplace: bool = False
    scratch: ScratchFn | None = None
    dtypes: frozenset[str] | None = None

    def dtype_problem(self, node: Node) -> str | None:
        """Why ``node``'s types are outside ``dtypes`` (None when they are within, or unchecked)."""
        if self.dtypes is None:
            return None
        data = node.inputs[:1] + node.outputs
        bad = sorted({v.type.dtype for v in data} - self.dtypes)
        if not bad:
            return None
        return f"{self.name} runs on {', '.join(sorted(self.dtypes))} only, not {', '.join(bad)}"


#: the float kernels' element type
F32 = frozenset({"float32"})
_OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in _OPS:
        raise ValueError(f"op {op.name!r} registered twice")
    _OPS[op.name] = op
    return op


def get(name: str) -> OpDef:
    from . import _load_all  # noqa: F401  (registers the built-in families on first use)

    try:
        return _OPS[name]
    except KeyError:
        raise KeyError(f"no IR op {name!r} is registered") from None


def registered() -> dict[str, OpDef]:
    from . import _load_all  # noqa: F401

    return dict(_OPS)


def node_code(n: Node, ctx: EmitContext) -> str | None:
    """One node's C code with ``ctx.node`` set to it (None: a view, an elided concat or a node whose
    outputs are all empty tensors needs none); the emitter lowers every node through it, the
    ``loop``/``if`` emitters their bodies' nodes."""
    op = get(n.op)
    if op.alias or id(n) in ctx.plan.elided or (n.outputs and all(o.type.size == 0 for o in n.outputs)):
        return None
    if op.emit is None:
        raise NotImplementedError(f"op {n.op!r} has no code generator (node {n.name!r})")
    ctx.node = n
    return op.emit(n, ctx)
