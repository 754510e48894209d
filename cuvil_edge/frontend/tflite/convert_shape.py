"""Converters for shapes and what is made from them: SHAPE, RANK and BROADCAST_ARGS fold to constants
(every shape is static once the inputs' are fixed), FILL / ZEROS_LIKE / BROADCAST_TO / TILE / RANGE, and
SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND (the reshape-transpose pairs older converters wrap dilated
convolutions in), in TFLite order."""

from __future__ import annotations

import math

import numpy as np

from ...ops.common import broadcast_shape
from .convert_tensor import int_values
from .registry import TflContext, converter


@converter("SHAPE")
def shape(ctx: TflContext) -> None:
    """The input's TFLite shape, a constant: nothing runs, and what reads it (a RESHAPE's target, a FILL's
    dims, a STRIDED_SLICE of it) folds too."""
    dims = ctx.held(0, flat_ok=True).shape
    ctx.set_output(ctx.constant(np.asarray(dims, ctx.output_dtype()), "shape"))


@converter("RANK")
def rank(ctx: TflContext) -> None:
    ctx.set_output(ctx.constant(np.asarray(len(ctx.held(0, flat_ok=True).perm), ctx.output_dtype()), "rank"))


@converter("BROADCAST_ARGS")
def broadcast_args(ctx: TflContext) -> None:
    """The shape two shapes broadcast to (both known at build time)."""
    a, b = ctx.const(0), ctx.const(1)
    out = broadcast_shape([tuple(int_values(a)), tuple(int_values(b))], ctx.name)
    ctx.set_output(ctx.constant(np.asarray(out, a.dtype), "shape"))


@converter("FILL")
def fill(ctx: TflContext) -> None:
    """``value`` (a scalar, constant or not) expanded to ``dims``."""
    dims = int_values(ctx.const(0))
    value = ctx.input(1)
    if value.type.size != 1:
        raise ctx.unsupported(f"the value must be a scalar, got shape {value.type.shape}")
    scalar = ctx.emit1("reshape", [value], {"shape": []}, f"{ctx.name}/scalar")
    ctx.set_output(ctx.emit1("expand", [scalar], {"shape": dims}))


@converter("ZEROS_LIKE")
def zeros_like(ctx: TflContext) -> None:
    x = ctx.laid(0)
    ctx.set_output(ctx.constant(np.zeros(x.value.type.shape, x.value.type.dtype), "zeros"), x.perm)


@converter("BROADCAST_TO")
def broadcast_to(ctx: TflContext) -> None:
    """In the input's layout when the rank stays, else in TFLite order."""
    dims = int_values(ctx.const(1))
    x = ctx.laid(0)
    if len(x.perm) == len(dims):
        ctx.set_output(ctx.emit1("expand", [x.value], {"shape": [dims[p] for p in x.perm]}), x.perm)
        return
    ctx.set_output(ctx.emit1("expand", [ctx.input(0)], {"shape": dims}))


@converter("TILE")
def tile(ctx: TflContext) -> None:
    x = ctx.laid(0)
    reps = int_values(ctx.const(1))
    if len(reps) != len(x.perm):
        raise ctx.unsupported(f"{len(reps)} multiples for a rank-{len(x.perm)} input")
    ctx.set_output(ctx.emit1("tile", [x.value], {"repeats": [reps[p] for p in x.perm]}), x.perm)


@converter("RANGE")
def range_(ctx: TflContext) -> None:
    """start, limit and delta known at build time: the ramp is a constant."""
    for i in range(3):
        ctx.const(i)  # refuses a run-time bound by name
    ctx.set_output(ctx.emit1("range", [ctx.input(i) for i in range(3)]))


def _block(ctx: TflContext, rank: int) -> tuple[list[int], np.ndarray]:
    """The block shape (M sizes, each at least 1) and the [M, 2] paddings or crops of a rank-``rank``
    input [batch, M spatial dims, the rest]."""
    block, widths = int_values(ctx.const(1)), ctx.const(2).astype(np.int64)
    m = len(block)
    if not 1 <= m < rank or min(block) < 1 or widths.shape != (m, 2) or (widths < 0).any():
        raise ctx.unsupported(f"block shape {block} with paddings/crops {widths.tolist()} for a rank-{rank} "
                              "input")
    return block, widths


@converter("SPACE_TO_BATCH_ND")
def space_to_batch_nd(ctx: TflContext) -> None:
    """Pad, split each spatial dim into (dim / block, block), move the block dims in front of the batch."""
    x = ctx.input(0)
    s = list(x.type.shape)
    block, pads = _block(ctx, len(s))
    m, rest = len(block), len(s) - 1 - len(block)
    pads_ir = [0, *pads[:, 0].tolist(), *[0] * rest] + [0, *pads[:, 1].tolist(), *[0] * rest]
    padded = ctx.emit1("pad", [x], {"pads": pads_ir, "mode": "constant", "value": 0.0}, f"{ctx.name}/pad")
    p = padded.type.shape
    if any(p[1 + i] % b for i, b in enumerate(block)):
        raise ctx.unsupported(f"padded spatial dims {p[1:1 + m]} are not multiples of the block {block}")
    split = [p[0], *[d for i, b in enumerate(block) for d in (p[1 + i] // b, b)], *p[1 + m:]]
    v = ctx.emit1("reshape", [padded], {"shape": split}, f"{ctx.name}/split")
    perm = [*(2 + 2 * i for i in range(m)), 0, *(1 + 2 * i for i in range(m)), *range(1 + 2 * m, len(split))]
    v = ctx.emit1("transpose", [v], {"perm": perm}, f"{ctx.name}/blocks_first")
    out = [p[0] * math.prod(block), *(p[1 + i] // b for i, b in enumerate(block)), *p[1 + m:]]
    ctx.set_output(ctx.emit1("reshape", [v], {"shape": out}))


@converter("BATCH_TO_SPACE_ND")
def batch_to_space_nd(ctx: TflContext) -> None:
    """The inverse: block dims out of the batch, each next to its spatial dim, merged, then cropped."""
    x = ctx.input(0)
    s = list(x.type.shape)
    block, crops = _block(ctx, len(s))
    m, n = len(block), math.prod(block)
    if s[0] % n:
        raise ctx.unsupported(f"batch {s[0]} is not a multiple of the block {block}")
    v = ctx.emit1("reshape", [x], {"shape": [*block, s[0] // n, *s[1:]]}, f"{ctx.name}/split")
    perm = [m, *(d for i in range(m) for d in (m + 1 + i, i)), *range(2 * m + 1, len(s) + m)]
    v = ctx.emit1("transpose", [v], {"perm": perm}, f"{ctx.name}/blocks_inside")
    full = [s[0] // n, *(s[1 + i] * b for i, b in enumerate(block)), *s[1 + m:]]
    v = ctx.emit1("reshape", [v], {"shape": full}, f"{ctx.name}/merged")
    ends = [full[0], *(full[1 + i] - int(crops[i, 1]) for i in range(m)), *full[1 + m:]]
    starts = [0, *(int(c) for c in crops[:, 0]), *[0] * (len(s) - 1 - m)]
    if any(e < b for b, e in zip(starts, ends)):
        raise ctx.unsupported(f"crops {crops.tolist()} remove more than the {full} there are")
    ctx.set_output(ctx.emit1("slice", [v], {"starts": starts, "ends": ends, "steps": [1] * len(s)}))
