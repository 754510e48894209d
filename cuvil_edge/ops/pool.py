"""Pooling (NCHW, 1D and 2D): ``pool`` (max/avg windows) and ``global_pool`` (one value per plane).

``pool`` attrs are normalised at import: kind, kernel, strides, dilations, explicit pads
[begins..., ends...], ceil_mode, count_include_pad. Average divisors are separable (a window is a
rectangle clipped to a rectangle), so they are two build-time reciprocal tables, one per axis.
"""

from __future__ import annotations

import numpy as np

from ..codegen.emit import EmitContext
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .registry import OpDef, register

KINDS = ("max", "avg")


def out_size(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool) -> int:
    """Output length along one axis; in ceil mode a last window starting past the input is dropped."""
    span = size + pb + pe - ((k - 1) * d + 1)
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + pb:
        out -= 1
    return out


def pool_geometry(node: Node) -> dict[str, int]:
    """Normalise 1D/2D pool attrs to 2D numbers (1D runs with H = 1)."""
    x = node.inputs[0].type.shape
    a = node.attrs
    if len(x) not in (3, 4) or len(a["kernel"]) != len(x) - 2:
        raise ShapeError(f"{node.name}: pool needs NCL or NCHW input and a matching kernel, got {x}")
    two_d = len(x) == 4

    def pick(v: list[int], one: int) -> tuple[int, int]:
        return (v[0], v[1]) if two_d else (one, v[0])

    H, W = pick(list(x[2:]), 1)
    kh, kw = pick(a["kernel"], 1)
    sh, sw = pick(a["strides"], 1)
    dh, dw = pick(a["dilations"], 1)
    p = a["pads"]
    pt, pb = (p[0], p[2]) if two_d else (0, 0)
    pl, pr = (p[1], p[3]) if two_d else (p[0], p[1])
    ceil = bool(a.get("ceil_mode", 0))
    OH, OW = out_size(H, kh, sh, dh, pt, pb, ceil), out_size(W, kw, sw, dw, pl, pr, ceil)
    return dict(N=x[0], C=x[1], H=H, W=W, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pb=pb, pl=pl,
                pr=pr, OH=OH, OW=OW)


def _infer(node: Node) -> list[TensorType]:
    if node.attrs["kind"] not in KINDS:
        raise ShapeError(f"{node.name}: pool kind {node.attrs['kind']!r} is not one of {KINDS}")
    g = pool_geometry(node)
    if g["OH"] <= 0 or g["OW"] <= 0:
        raise ShapeError(f"{node.name}: pool output would be empty")
    x = node.inputs[0].type
    return [TensorType(x.shape[:2] + ((g["OH"], g["OW"]) if len(x.shape) == 4 else (g["OW"],)), x.dtype)]


def _inv_counts(n_out: int, size: int, k: int, s: int, d: int, pb: int, pe: int,
                include_pad: bool) -> np.ndarray:
    """1 / (taps of each window inside the input, or inside the padded input with count_include_pad)."""
    pos = np.arange(n_out)[:, None] * s - pb + np.arange(k)[None, :] * d
    lo, hi = (-pb, size + pe) if include_pad else (0, size)
    count = ((pos >= lo) & (pos < hi)).sum(axis=1)
    return (1.0 / np.maximum(count, 1)).astype(np.float32)


def _avg_tables(node: Node, g: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    inc = bool(node.attrs.get("count_include_pad", 0))
    return (_inv_counts(g["OH"], g["H"], g["kh"], g["sh"], g["dh"], g["pt"], g["pb"], inc),
            _inv_counts(g["OW"], g["W"], g["kw"], g["sw"], g["dw"], g["pl"], g["pr"], inc))


def _fold(node: Node, args) -> list[np.ndarray]:
    g = pool_geometry(node)
    is_max = node.attrs["kind"] == "max"
    x = args[0].reshape(g["N"], g["C"], g["H"], g["W"]).astype(np.float32)
    ext_h = (g["OH"] - 1) * g["sh"] + (g["kh"] - 1) * g["dh"] + 1
    ext_w = (g["OW"] - 1) * g["sw"] + (g["kw"] - 1) * g["dw"] + 1
    widths = ((0, 0), (0, 0), (g["pt"], max(ext_h - g["H"] - g["pt"], 0)),
              (g["pl"], max(ext_w - g["W"] - g["pl"], 0)))
    xp = np.pad(x, widths, constant_values=-np.inf if is_max else 0.0)
    acc = None
    for i in range(g["kh"]):
        for j in range(g["kw"]):
            tap = xp[:, :, i * g["dh"]:i * g["dh"] + ext_h - (g["kh"] - 1) * g["dh"]:g["sh"],
                     j * g["dw"]:j * g["dw"] + ext_w - (g["kw"] - 1) * g["dw"]:g["sw"]]
            acc = tap if acc is None else (np.maximum(acc, tap) if is_max else acc + tap)
    if not is_max:
        inv_h, inv_w = _avg_tables(node, g)
        acc = acc * inv_h[:, None] * inv_w[None, :]
    return [acc.reshape(_infer(node)[0].shape)]


def _emit(node: Node, ctx: EmitContext) -> str:
    g = pool_geometry(node)
    kind = node.attrs["kind"]
    # output columns whose every tap is inside the row: ow * sw - pl >= 0, ... + (kw-1)*dw <= W-1
    ow0 = min(-(-g["pl"] // g["sw"]), g["OW"])
    ow1 = min(max((g["W"] - 1 - (g["kw"] - 1) * g["dw"] + g["pl"]) // g["sw"] + 1, ow0), g["OW"])
    tables = "0, 0"
    if kind == "avg":
        inv_h, inv_w = _avg_tables(node, g)
        tables = f"{ctx.weight(inv_h)}, {ctx.weight(inv_w)}"
    ctx.use_kernel(f"f32-{kind}pool-{'s' + str(g['sw']) if g['sw'] <= 2 else 'scalar'}-4")
    x, y = node.inputs[0], node.outputs[0]
    return (f"f32_{kind}pool2d({ctx.ptr(x)}, {ctx.ptr(y)}, {g['N'] * g['C']}, {g['H']}, {g['W']}, {g['OH']}, "
            f"{g['OW']}, {g['kh']}, {g['kw']}, {g['sh']}, {g['sw']}, {g['dh']}, {g['dw']}, {g['pt']}, "
            f"{g['pl']}, {ow0}, {ow1}, {tables});")


register(OpDef("pool", _infer, _fold, _emit, kernels=("f32-pool",)))


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
    return f"f32_global_{kind}pool({ctx.ptr(x)}, {ctx.ptr(y)}, {s[0] * s[1]}, {int(np.prod(s[2:]))});"


register(OpDef("global_pool", _global_infer, _global_fold, _global_emit, kernels=("f32-pool",)))
