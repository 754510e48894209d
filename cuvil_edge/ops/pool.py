"""Pooling (NCHW; 1D, 2D and 3D): ``pool`` (max/avg/sum windows) and ``global_pool`` (one value per
plane).

``pool`` attrs are normalised at import: kind, kernel, strides, dilations, explicit pads
[begins..., ends...], ceil_mode, count_include_pad. A window is a box clipped to a box, so both the
max and the average (sum and divisor) separate by axis: average divisors are build-time reciprocal
tables, one per axis (a sum pool, LpPool's, is the average kernel with tables of ones), and a 3D pool
is two passes of the 2D kernel (H x W per depth slice, then depth over rows of OH*OW pixels) through a
scratch buffer. A max pool also runs on uint8 (a quantized tensor as held: the max of the bytes is the
byte of the max). ``max_pool_argmax`` is MaxPool with its Indices output (the argmax's flat position).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError, UnsupportedOperator
from ..ir.graph import Node, TensorType
from ..ir.limits import charge
from .common import CTYPES, split_rows
from .movement import strides_of
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

KINDS = ("max", "avg")
#: ``pool`` kind -> the 2D kernel that runs it
POOL_KERNELS = {"max": "max", "avg": "avg", "sum": "avg"}
#: input dtype -> the 2D kernel's label and C prefix, and its columns per vector step
_KERNEL_TYPES = {"float32": ("f32", 4), "uint8": ("u8", 16)}

#: the largest kernel, stride, dilation or pad a pool takes (the kernels index in 32 bits)
MAX_WINDOW = (1 << 31) - 1
#: one spatial axis: (size, kernel, stride, dilation, pad begin, pad end)
Axis = tuple[int, int, int, int, int, int]


def out_size(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool) -> int:
    """Output length along one axis; in ceil mode a last window starting past the input is dropped."""
    span = size + pb + pe - ((k - 1) * d + 1)
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + pb:
        out -= 1
    return out


def _pass(planes: int, h: Axis, w: Axis, ceil: bool) -> dict[str, int]:
    """One run of the 2D kernel over ``planes`` planes of [H, W]."""
    g = dict(zip(("H", "kh", "sh", "dh", "pt", "pb"), h)) | dict(zip(("W", "kw", "sw", "dw", "pl", "pr"), w))
    return g | dict(planes=planes, OH=out_size(*h, ceil), OW=out_size(*w, ceil))


def pool_geometry(node: Node) -> list[dict[str, int]]:
    """The 2D kernel passes of a pool: one for 1D (H = 1) and 2D, two for 3D."""
    x = node.inputs[0].type.shape
    a = node.attrs
    n = len(x) - 2
    if n not in (1, 2, 3) or len(a["kernel"]) != n:
        raise ShapeError(f"{node.name}: pool needs NCL, NCHW or NCDHW input and a matching kernel, got {x}")
    if len(a["strides"]) != n or len(a["dilations"]) != n or len(a["pads"]) != 2 * n or \
            min(*a["kernel"], *a["strides"], *a["dilations"]) < 1 or min(a["pads"]) < 0 or \
            max(*a["kernel"], *a["strides"], *a["dilations"], *a["pads"]) > MAX_WINDOW:
        raise ShapeError(f"{node.name}: pool kernel {a['kernel']}, strides {a['strides']}, dilations "
                         f"{a['dilations']} (each at least 1), pads {a['pads']} (at least 0; all at most "
                         f"{MAX_WINDOW}) for {n} spatial axes")
    axes: list[Axis] = [(x[2 + i], a["kernel"][i], a["strides"][i], a["dilations"][i], a["pads"][i],
                         a["pads"][n + i]) for i in range(n)]
    ceil = bool(a.get("ceil_mode", 0))
    one: Axis = (1, 1, 1, 1, 0, 0)
    if n < 3:
        return [_pass(x[0] * x[1], *([one] * (2 - n) + axes), ceil)]
    hw = _pass(x[0] * x[1] * x[2], axes[1], axes[2], ceil)
    rows = hw["OH"] * hw["OW"]
    return [hw, _pass(x[0] * x[1], axes[0], (rows, 1, 1, 1, 0, 0), ceil)]


def _out_spatial(node: Node) -> tuple[int, ...]:
    passes = pool_geometry(node)
    n = len(node.inputs[0].type.shape) - 2
    oh, ow = passes[0]["OH"], passes[0]["OW"]
    return (ow,) if n == 1 else (oh, ow) if n == 2 else (passes[1]["OH"], oh, ow)


def _out_shape(node: Node) -> tuple[int, ...]:
    """The pooled shape: N, C and the spatial lengths, none of them empty."""
    spatial = _out_spatial(node)
    if min(spatial) <= 0:
        raise ShapeError(f"{node.name}: pool output would be empty")
    return node.inputs[0].type.shape[:2] + spatial


def _infer(node: Node) -> list[TensorType]:
    if node.attrs["kind"] not in POOL_KERNELS:
        raise ShapeError(f"{node.name}: pool kind {node.attrs['kind']!r} is not one of {list(POOL_KERNELS)}")
    x = node.inputs[0].type
    if x.dtype != "float32" and (x.dtype, node.attrs["kind"]) != ("uint8", "max"):
        raise UnsupportedOperator("pool", node.name, None, f"{node.attrs['kind']} pool of {x.dtype}")
    return [TensorType(_out_shape(node), x.dtype)]


def _inv_counts(n_out: int, size: int, k: int, s: int, d: int, pb: int, pe: int,
                include_pad: bool) -> np.ndarray:
    """1 / (taps of each window inside the input, or inside the padded input with count_include_pad),
    counted per window from where it starts (no array of every tap: a kernel may be long)."""
    lo, hi = (-pb, size + pe) if include_pad else (0, size)
    start = np.minimum(np.arange(n_out, dtype=np.int64) * s, hi + pb) - pb
    # taps i in [0, k) with lo <= start + i * d < hi: from ceil((lo - start) / d) to ceil((hi - start) / d)
    count = np.clip(-((start - hi) // d), 0, k) - np.clip(-((start - lo) // d), 0, k)
    return (1.0 / np.maximum(count, 1)).astype(np.float32)


def _avg_tables(node: Node, g: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    if node.attrs["kind"] == "sum":
        return np.ones(g["OH"], np.float32), np.ones(g["OW"], np.float32)
    inc = bool(node.attrs.get("count_include_pad", 0))
    return (_inv_counts(g["OH"], g["H"], g["kh"], g["sh"], g["dh"], g["pt"], g["pb"], inc),
            _inv_counts(g["OW"], g["W"], g["kw"], g["sw"], g["dw"], g["pl"], g["pr"], inc))


def _tap_index(n_out: int, size: int, k: int, s: int, d: int, pb: int) -> np.ndarray:
    """[k, n_out]: the input position each tap of each window reads, ``size`` (the appended pad) where it
    falls outside the input. The two products are clamped where they alone pass the input's end, so no
    stride, dilation or pad overflows int64 or sizes anything."""
    end = size + pb
    pos = (np.minimum(np.arange(k, dtype=np.int64)[:, None] * d, end)
           + np.minimum(np.arange(n_out, dtype=np.int64)[None, :] * s, end) - pb)
    return np.where((pos >= 0) & (pos < size), pos, size)


def _fold_pass(node: Node, g: dict[str, int], x: np.ndarray) -> np.ndarray:
    """numpy reference of one kernel pass: [planes, H, W] -> [planes, OH, OW]. Every tap is gathered by
    index from the input with one pad row and column appended, so the work and memory are the taps'
    (charged to the import's budget first), never the padded extent a model's strides could make huge."""
    is_max = node.attrs["kind"] == "max"
    taps = g["planes"] * g["OH"] * g["OW"] * g["kh"] * g["kw"]
    charge(4 * taps, f"node {node.name!r} (pool folded at build time)")
    x = x.reshape(g["planes"], g["H"], g["W"]).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 1), (0, 1)), constant_values=-np.inf if is_max else 0.0)
    rows = _tap_index(g["OH"], g["H"], g["kh"], g["sh"], g["dh"], g["pt"])
    cols = _tap_index(g["OW"], g["W"], g["kw"], g["sw"], g["dw"], g["pl"])
    windows = xp[:, rows[:, None, :, None], cols[None, :, None, :]]  # planes, kh, kw, OH, OW
    if is_max:
        return windows.max(axis=(1, 2))
    inv_h, inv_w = _avg_tables(node, g)
    return windows.sum(axis=(1, 2), dtype=np.float32) * inv_h[:, None] * inv_w[None, :]


def _fold(node: Node, args) -> list[np.ndarray]:
    y = args[0]
    for g in pool_geometry(node):
        y = _fold_pass(node, g, y)
    return [y.reshape(_infer(node)[0].shape).astype(args[0].dtype)]


def _scratch(node: Node) -> int:
    """3D: the H x W pass's output, which the depth pass reads."""
    passes = pool_geometry(node)
    return 0 if len(passes) == 1 else \
        passes[0]["planes"] * passes[0]["OH"] * passes[0]["OW"] * node.inputs[0].type.itemsize


def _emit_pass(node: Node, ctx: EmitContext, g: dict[str, int], x: str, y: str, work: int, unit: int) -> str:
    """One pass over every plane; threads split the planes (a two-pass pool's middle buffer is shared:
    each thread reads back only the planes it wrote, as the first pass splits its D planes per channel
    in ``unit``s of D)."""
    kind = POOL_KERNELS[node.attrs["kind"]]
    # output columns whose every tap is inside the row: ow * sw - pl >= 0, ... + (kw-1)*dw <= W-1
    ow0 = min(-(-g["pl"] // g["sw"]), g["OW"])
    ow1 = min(max((g["W"] - 1 - (g["kw"] - 1) * g["dw"] + g["pl"]) // g["sw"] + 1, ow0), g["OW"])
    tables = "0, 0"
    if kind == "avg":
        inv_h, inv_w = _avg_tables(node, g)
        tables = f"{ctx.weight(inv_h)}, {ctx.weight(inv_w)}"
    fn = f"{_KERNEL_TYPES[node.inputs[0].type.dtype][0]}_{kind}pool2d"
    return split_rows(ctx, g["planes"], work, lambda c, i: (
        f"{fn}({x} + (size_t){i} * {g['H'] * g['W']}, {y} + (size_t){i} * {g['OH'] * g['OW']}, "
        f"{c}, {g['H']}, {g['W']}, {g['OH']}, {g['OW']}, {g['kh']}, {g['kw']}, {g['sh']}, {g['sw']}, "
        f"{g['dh']}, {g['dw']}, {g['pt']}, {g['pl']}, {ow0}, {ow1}, {tables});"), unit=unit,
        by_row=(node.inputs[0], node.outputs[0]))  # planes of the input and the output


def _emit(node: Node, ctx: EmitContext) -> str:
    passes = pool_geometry(node)
    sw = passes[0]["sw"]
    code, lanes = _KERNEL_TYPES[node.inputs[0].type.dtype]
    kind = POOL_KERNELS[node.attrs["kind"]]
    ctx.use_kernel(f"{code}-{kind}pool-{'s' + str(sw) if sw <= 2 else 'scalar'}-{lanes}")
    x, y = ctx.ptr(node.inputs[0]), ctx.ptr(node.outputs[0])
    mid = [ctx.scratch(CTYPES[node.inputs[0].type.dtype], shared=True)] if len(passes) > 1 else []
    ins, outs = [x, *mid], [*mid, y]
    g0 = passes[0]  # the taps read; every pass splits alike, or none
    work = g0["planes"] * g0["OH"] * g0["OW"] * g0["kh"] * g0["kw"]
    return "\n".join(_emit_pass(node, ctx, g, i, o, work, g["planes"] // passes[-1]["planes"])
                     for g, i, o in zip(passes, ins, outs))


register(OpDef("pool", _infer, _fold, _emit, kernels=("f32-pool",), scratch=_scratch))


# -- max_pool_argmax: MaxPool with its Indices output ------------------------------------------------------
# attrs: the ``pool`` window (kernel, strides, dilations, pads, ceil_mode) and ``storage_order`` (0: an
# index counts row-major through the spatial axes, 1: column-major). Outputs the max and its flat index
# into the whole input (N and C included, as ONNX defines): the first tap holding the max in row-major
# window order, as the ONNX reference and onnxruntime pick. One scalar pass per plane writes both (the
# argmax visits every tap anyway).
def _argmax_infer(node: Node) -> list[TensorType]:
    """float32 only: the op's types are checked here, not by ``OpDef.dtypes`` (its second output is int64)."""
    x = node.inputs[0].type
    if node.attrs["storage_order"] not in (0, 1):
        raise ShapeError(f"{node.name}: storage_order {node.attrs['storage_order']!r} is not 0 or 1")
    if x.dtype != "float32":
        raise UnsupportedOperator("max_pool_argmax", node.name, None, f"max pool indices of {x.dtype}")
    shape = _out_shape(node)
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


def _window_axes(node: Node) -> list[tuple[int, int, int, int, int, int]]:
    """Each spatial axis as (size, kernel, stride, dilation, pad begin, output length)."""
    a, x = node.attrs, node.inputs[0].type.shape
    return [(x[2 + i], a["kernel"][i], a["strides"][i], a["dilations"][i], a["pads"][i], o)
            for i, o in enumerate(_out_spatial(node))]


def _plane_index(node: Node) -> np.ndarray:
    """Each input position's index within its plane, in the node's storage order."""
    sizes = node.inputs[0].type.shape[2:]
    flat = np.arange(int(np.prod(sizes)), dtype=np.int64)
    return flat.reshape(sizes) if node.attrs["storage_order"] == 0 else flat.reshape(sizes[::-1]).T


def _argmax_fold(node: Node, args) -> list[np.ndarray]:
    """numpy reference: each window's taps in row-major order, a tap replacing the max only when greater."""
    x = args[0]
    axes, index = _window_axes(node), _plane_index(node)
    planes = x.reshape(-1, *x.shape[2:])
    out = tuple(o for *_, o in axes)
    best, at = np.zeros((len(planes), *out), x.dtype), np.full((len(planes), *out), -1, np.int64)
    for tap in np.ndindex(*(k for _, k, *_ in axes)):
        pos = [np.arange(o) * s - pb + t * d for t, (_, _, s, d, pb, o) in zip(tap, axes)]
        ok = np.ones(out, bool)
        for i, (p, (size, *_)) in enumerate(zip(pos, axes)):
            ok &= ((p >= 0) & (p < size)).reshape([-1 if j == i else 1 for j in range(len(out))])
        where = np.ix_(*(np.clip(p, 0, size - 1) for p, (size, *_) in zip(pos, axes)))
        v = planes[(slice(None), *where)]
        take = ok & ((at < 0) | (v > best))  # the first tap of the max; NaN never replaces
        best, at = np.where(take, v, best), np.where(take, index[where], at)
    at += np.arange(len(planes), dtype=np.int64).reshape(-1, *[1] * len(out)) * index.size
    shape = x.shape[:2] + out
    return [best.reshape(shape), at.reshape(shape)]


def _argmax_emit(node: Node, ctx: EmitContext) -> str:
    """Scalar C, nested loops per spatial axis (taps outside the input skipped); threads split planes."""
    x, (y, ind) = node.inputs[0], node.outputs
    ctx.use_kernel("f32-maxpool-indices")
    axes = _window_axes(node)
    n, planes = len(axes), x.type.shape[0] * x.type.shape[1]
    plane, out_plane = x.type.size // planes, y.type.size // planes
    xs, ys = strides_of(x.type.shape[2:]), strides_of(y.type.shape[2:])
    read = " + ".join(f"i{i} * {xs[i]}" for i in range(n))
    cols = [int(np.prod([a[0] for a in axes[:i]], dtype=np.int64)) for i in range(n)]  # column-major
    at = read if node.attrs["storage_order"] == 0 else " + ".join(f"i{i} * {cols[i]}" for i in range(n))
    outs = " ".join(f"for (int o{i} = 0; o{i} < {o}; o{i}++)" for i, (*_, o) in enumerate(axes))
    taps = " ".join(f"for (int k{i} = 0; k{i} < {k}; k{i}++) {{ const int i{i} = o{i} * {s} - {pb} + k{i} * "
                    f"{d}; if (i{i} < 0 || i{i} >= {size}) continue;"
                    for i, (size, k, s, d, pb, _) in enumerate(axes))
    o_at = "p * {} + {}".format(out_plane, " + ".join(f"o{i} * {ys[i]}" for i in range(n)))

    def call(count: str, first: str) -> str:
        return "\n".join([
            f"for (size_t p = {first}; p < (size_t){first} + {count}; p++) {{",
            f"  const float *xp = {ctx.ptr(x)} + p * {plane};",
            f"  {outs} {{",
            "    float best = 0.0f; int64_t at = -1;",
            f"    {taps}",
            f"      const float v = xp[{read}];",
            f"      if (at < 0 || v > best) {{ best = v; at = {at}; }}",
            f"    {'}' * n}",
            f"    {ctx.ptr(y)}[{o_at}] = best;",
            f"    {ctx.ptr(ind)}[{o_at}] = (int64_t)p * {plane} + at;",
            "  }",
            "}"])
    return split_rows(ctx, planes, y.type.size * int(np.prod(node.attrs["kernel"])), call, by_row=(x, y, ind))


register(OpDef("max_pool_argmax", _argmax_infer, _argmax_fold, _argmax_emit))


# -- global_pool: reduce every plane (all dims after N, C) to one value -------------------------------
def _global_infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    if len(x.shape) < 3 or node.attrs["kind"] not in KINDS:
        raise ShapeError(f"{node.name}: global pool needs rank >= 3 and kind in {KINDS}, got {x}")
    return [TensorType(x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype)]


def _global_fold(node: Node, args) -> list[np.ndarray]:
    axes = tuple(range(2, args[0].ndim))
    reduce = np.max if node.attrs["kind"] == "max" else np.mean
    return [reduce(args[0], axis=axes, keepdims=True)]


def _global_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    kind = node.attrs["kind"]
    s = x.type.shape
    ctx.use_kernel(f"f32-global{kind}pool-4")
    plane = int(np.prod(s[2:]))
    return split_rows(ctx, s[0] * s[1], x.type.size, lambda c, i: (
        f"f32_global_{kind}pool({ctx.ptr(x)} + (size_t){i} * {plane}, {ctx.ptr(y)} + {i}, {c}, {plane});"),
        by_row=(x, y))


register(OpDef("global_pool", _global_infer, _global_fold, _global_emit, kernels=("f32-pool",)))
