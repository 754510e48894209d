"""Index-driven rearrangements: ``col2im`` (Col2Im), ``max_unpool`` (MaxUnpool) and
``reverse_sequence`` (ReverseSequence).

Each puts elements where an index or a length read at run time says (a block shape, a flat position, a
sequence's length), with no interpolation: they share none of ``sampling``'s taps, only its checks of
inputs (``require_floats``, ``require_int64_vector``, ``const_ints``, ``trap_unless_equal``), so they
live apart from the vision ops that sample. Each is a C loop written inline for the node's element
type (every shape a build-time constant), following the ONNX reference; a value read at run time that
picks memory is checked in the module: one that does not fit traps, never reads or writes outside a
tensor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from ..ir.limits import check_shape
from .common import CTYPES, cint_list
from .movement import strides_of
from .registry import OpDef, register
from .sampling import FLOATS, const_ints, require_floats, require_int64_vector, trap_unless_equal

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

#: what Col2Im sums: the types C adds natively
NUMBERS = FLOATS | {f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64)}


# -- col2im --------------------------------------------------------------------------------------------
# attrs: ``image`` (the spatial shape), ``channels`` (C), ``strides``, ``dilations``, ``pads`` (begins,
# then ends). Inputs data (N, C * prod(block), L), image_shape and block_shape (int64[r]); both may be
# run-time values: the image shape must then be ``image`` and the block shape is read by the module,
# which traps unless prod(block) and the number of blocks it makes fit the data.
def _col2im_blocks(node: Node, block: Sequence[int]) -> list[int]:
    """Sliding blocks along each axis for ``block``, as ONNX defines them (may be below 1)."""
    a = node.attrs
    r = len(a["image"])
    return [(a["image"][d] + a["pads"][d] + a["pads"][d + r] - a["dilations"][d] * (block[d] - 1) - 1)
            // a["strides"][d] + 1 for d in range(r)]


def _col2im_infer(node: Node) -> list[TensorType]:
    data, image, block = node.inputs
    a = node.attrs
    r, c = len(a["image"]), a["channels"]
    for v, what in ((image, "image_shape"), (block, "block_shape")):
        require_int64_vector(node, v, r, what)
    if (r < 1 or len(data.type.shape) != 3 or c < 0 or data.type.shape[1] % max(c, 1)
            or [len(a["strides"]), len(a["dilations"]), len(a["pads"])] != [r, r, 2 * r] or min(a["pads"]) < 0
            or min(a["strides"] + a["dilations"]) < 1):
        raise ShapeError(f"{node.name}: col2im of {data.type} into {c} channels of {a['image']}")
    k = data.type.shape[1] // max(c, 1)
    given, blocks = const_ints(image), const_ints(block)
    if given is not None and given != list(a["image"]):
        raise ShapeError(f"{node.name}: image_shape {given} is not {a['image']}")
    if blocks is not None and (math.prod(blocks) != k or min(blocks) < 1
                               or math.prod(_col2im_blocks(node, blocks)) != data.type.shape[2]
                               or min(_col2im_blocks(node, blocks)) < 1):
        raise ShapeError(f"{node.name}: block_shape {blocks} does not fit {data.type} for image {a['image']}")
    return [TensorType((data.type.shape[0], c, *a["image"]), data.type.dtype)]


def _col2im_fold(node: Node, args) -> list[np.ndarray]:
    """Per block offset, its columns added at their image positions (``np.add.at``: overlaps sum)."""
    data, _, block = args
    a = node.attrs
    image, r = list(a["image"]), len(a["image"])
    n = data.shape[0]
    out = np.zeros((n, a["channels"], *image), data.dtype)
    cols = data.reshape(n, a["channels"], -1, data.shape[2])
    blocks = _col2im_blocks(node, block)
    pos = np.indices(blocks).reshape(r, -1)  # each block's position along every axis
    for k, off in enumerate(np.ndindex(*[int(b) for b in block])):
        at = [pos[d] * a["strides"][d] - a["pads"][d] + off[d] * a["dilations"][d] for d in range(r)]
        inside = np.all([(p >= 0) & (p < s) for p, s in zip(at, image)], axis=0)
        where = tuple(p[inside] for p in at)
        for i in range(n):
            for ch in range(a["channels"]):
                np.add.at(out[i, ch], where, cols[i, ch, k][inside])
    return [out]


def _col2im_emit(node: Node, ctx: EmitContext) -> str:
    """The block shape checked, then every column element added at its image position (inside ones)."""
    data, image, block = node.inputs
    y = node.outputs[0]
    a = node.attrs
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-col2im")
    ct, img, r = CTYPES[y.type.dtype], list(a["image"]), len(a["image"])
    (n, ck, length), c = data.type.shape, a["channels"]
    k, size = ck // c, math.prod(img)
    arrays = {"img": img, "st": a["strides"], "dl": a["dilations"], "pb": a["pads"][:r],
              "pe": a["pads"][r:], "ys": strides_of(img)}
    return "\n".join([
        "{",
        trap_unless_equal(ctx, image, img),
        *(f"static const int64_t {name}[{r}] = {{{cint_list(v)}}};" for name, v in arrays.items()),
        f"int64_t b[{r}], nb[{r}], kp = 1, lp = 1;",
        f"for (int d = 0; d < {r}; d++) {{",
        f"  b[d] = {ctx.ptr(block)}[d];",
        f"  if (b[d] < 1 || b[d] > {k}) __builtin_trap();",
        f"  kp *= b[d]; if (kp > {k}) __builtin_trap();",
        "  const int64_t span = img[d] + pb[d] + pe[d] - dl[d] * (b[d] - 1) - 1;",
        "  if (span < 0) __builtin_trap();",
        f"  nb[d] = span / st[d] + 1; lp *= nb[d]; if (lp > {length}) __builtin_trap();",
        "}",
        f"if (kp != {k} || lp != {length}) __builtin_trap();",
        f"memset({ctx.ptr(y, 'unsigned char')}, 0, {y.type.nbytes});",
        f"for (size_t nc = 0; nc < {n * c}; nc++) for (int64_t k = 0; k < {k}; k++) {{",
        f"  const {ct} *xc = {ctx.ptr(data)} + (nc * {k} + k) * {length};",
        f"  {ct} *yc = {ctx.ptr(y)} + nc * {size};",
        f"  int64_t off[{r}];",
        f"  for (int64_t d = {r - 1}, rest = k; d >= 0; rest /= b[d], d--) off[d] = rest % b[d];",
        f"  for (int64_t l = 0; l < {length}; l++) {{",
        "    int64_t at = 0, inside = 1;",
        f"    for (int64_t d = {r - 1}, rest = l; d >= 0; rest /= nb[d], d--) {{",
        "      const int64_t p = rest % nb[d] * st[d] - pb[d] + off[d] * dl[d];",
        "      inside &= p >= 0 && p < img[d]; at += p * ys[d];",
        "    }",
        "    if (inside) yc[at] += xc[l];",
        "  }",
        "}",
        "}"])


register(OpDef("col2im", _col2im_infer, _col2im_fold, _col2im_emit, dtypes=NUMBERS))


# -- max_unpool ----------------------------------------------------------------------------------------
# attrs: ``shape`` (the output's), ``inferred`` (the shape the pooling geometry gives, which the indices
# address: flat positions in an (N, C, *inferred) tensor). Inputs X, I (int64, X's shape) and, when the
# model gives one, output_shape (int64; checked against ``shape`` when read at run time). As the ONNX
# reference: each value lands at its index's position in the inferred shape, which sits at the start of
# each axis of a larger ``shape``.
def _mu_infer(node: Node) -> list[TensorType]:
    x, ind = node.inputs[:2]
    require_floats(node, x)
    shape, inferred = tuple(node.attrs["shape"]), tuple(node.attrs["inferred"])
    if (ind.type.dtype != "int64" or ind.type.shape != x.type.shape or len(shape) != len(x.type.shape)
            or len(inferred) != len(shape) or shape[:2] != x.type.shape[:2] or inferred[:2] != shape[:2]
            or any(s < i for s, i in zip(shape, inferred)) or min(inferred) < 0):
        raise ShapeError(f"{node.name}: max_unpool of {x.type} at {ind.type} into {list(shape)} "
                         f"(indices address {list(inferred)})")
    if len(node.inputs) > 2:
        require_int64_vector(node, node.inputs[2], len(shape), "output_shape")
        given = const_ints(node.inputs[2])
        if given is not None and tuple(given) != shape:
            raise ShapeError(f"{node.name}: output_shape {given} is not {list(shape)}")
    check_shape(inferred, f"{node.name}: the unpooled shape")
    return [TensorType(shape, x.type.dtype)]


def _mu_fold(node: Node, args) -> list[np.ndarray]:
    x, ind = args[:2]
    inferred = tuple(node.attrs["inferred"])
    flat = np.zeros(math.prod(inferred), x.dtype)
    idx = ind.reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
        raise ShapeError(f"{node.name}: max_unpool index outside the {list(inferred)} tensor")
    for i, v in zip(idx, x.reshape(-1)):  # in order: a repeated index keeps the last value
        flat[i] = v
    out = np.zeros(node.attrs["shape"], x.dtype)
    out[tuple(slice(0, s) for s in inferred)] = flat.reshape(inferred)
    return [out]


def _mu_emit(node: Node, ctx: EmitContext) -> str:
    """Zeros, then each value written at its index in order (a repeated index keeps the last); an index
    outside the unpooled tensor traps."""
    x, ind = node.inputs[:2]
    y = node.outputs[0]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-maxunpool")
    shape, inferred = list(node.attrs["shape"]), list(node.attrs["inferred"])
    at = "i"
    if shape != inferred:  # the index's coordinates in the inferred shape, placed in the output's
        ys = strides_of(shape)
        at = " + ".join(f"(i / {math.prod(inferred[d + 1:])} % {inferred[d]}) * {ys[d]}"
                        for d in range(len(shape)) if inferred[d] > 1)
    return "\n".join([
        "{",
        trap_unless_equal(ctx, node.inputs[2], shape) if len(node.inputs) > 2 else "",
        f"memset({ctx.ptr(y, 'unsigned char')}, 0, {y.type.nbytes});",
        f"for (size_t e = 0; e < {x.type.size}; e++) {{",
        f"  const int64_t i = {ctx.ptr(ind)}[e];",
        f"  if (i < 0 || i >= {math.prod(inferred)}) __builtin_trap();",
        f"  {ctx.ptr(y)}[{at or '0'}] = {ctx.ptr(x)}[e];",
        "}",
        "}"])


register(OpDef("max_unpool", _mu_infer, _mu_fold, _mu_emit, dtypes=FLOATS))


# -- reverse_sequence ----------------------------------------------------------------------------------
# attrs: ``batch_axis``, ``time_axis`` (0 and 1, either way). Inputs x (any element type, rank >= 2) and
# sequence_lens (int64[batch]); a length outside [0, time] traps (onnxruntime rejects it too).
def _rs_infer(node: Node) -> list[TensorType]:
    x, lens = node.inputs
    b, t = node.attrs["batch_axis"], node.attrs["time_axis"]
    if x.type.dtype not in CTYPES or len(x.type.shape) < 2 or {b, t} != {0, 1}:
        raise ShapeError(f"{node.name}: reverse_sequence of {x.type} (batch axis {b}, time axis {t})")
    require_int64_vector(node, lens, x.type.shape[b], "sequence_lens")
    return [x.type]


def _rs_fold(node: Node, args) -> list[np.ndarray]:
    x, lens = args
    b, t = node.attrs["batch_axis"], node.attrs["time_axis"]
    out = x.copy()
    if lens.size and (lens.min() < 0 or lens.max() > x.shape[t]):
        raise ShapeError(f"{node.name}: sequence_lens {lens.tolist()} outside [0, {x.shape[t]}]")
    for i, n in enumerate(lens.tolist()):
        src, dst = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        src[b] = dst[b] = i
        dst[t], src[t] = slice(0, n), slice(n - 1, None, -1) if n else slice(0, 0)
        out[tuple(dst)] = x[tuple(src)]
    return [out]


def _rs_emit(node: Node, ctx: EmitContext) -> str:
    """Per batch entry and time step one row of the inner axes copied (from the mirrored step within the
    sequence's length)."""
    x, lens = node.inputs
    y = node.outputs[0]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-reversesequence")
    b, t = node.attrs["batch_axis"], node.attrs["time_axis"]
    shape = x.type.shape
    inner = math.prod(shape[2:])
    bs, ts = (shape[1], 1) if b == 0 else (1, shape[1])  # rows between batch entries, between steps
    row = f"{inner} * sizeof(*{ctx.ptr(x)})"
    return "\n".join([
        f"for (size_t b = 0; b < {shape[b]}; b++) {{",
        f"  const int64_t n = {ctx.ptr(lens)}[b];",
        f"  if (n < 0 || n > {shape[t]}) __builtin_trap();",
        f"  for (int64_t t = 0; t < {shape[t]}; t++) {{",
        "    const int64_t s = t < n ? n - 1 - t : t;",
        f"    memcpy({ctx.ptr(y)} + (b * {bs} + t * {ts}) * {inner}, "
        f"{ctx.ptr(x)} + (b * {bs} + s * {ts}) * {inner}, {row});",
        "  }",
        "}"])


register(OpDef("reverse_sequence", _rs_infer, _rs_fold, _rs_emit))
