"""Sampling and vision ops: ``grid_sample`` (GridSample), ``affine_grid`` (AffineGrid), ``roi_align``
(RoiAlign) and ``deform_conv`` (DeformConv), which read a tensor at computed float coordinates;
``grid_sample`` and ``deform_conv`` share the interpolation taps (``_axis_taps``, ``_blend``). The
index-driven rearrangements (Col2Im, MaxUnpool, ReverseSequence) are in ``rearrange``, which uses this
module's checks of run-time inputs (``require_floats``, ``require_int64_vector``, ``const_ints``,
``trap_unless_equal``).

Each is a C loop written inline for the node's element type (every shape a build-time constant), with
the interpolation mode, padding mode and filter geometry specialised away at build time. The ONNX
reference (``onnx.reference.ops``, which the node cases come from) is the spec they follow, the nested
order of its interpolations included; where onnxruntime differs (noted at the op) it does. Values read
at run time that pick memory (batch indices, a shape input the model also declares statically) are
checked in the module: one that does not fit traps, never reads or writes outside a tensor. Float
coordinates become indices through ``_index``, so a NaN or huge coordinate (a garbage grid) samples the
padding instead of trapping on the conversion.

``grid_sample``, ``roi_align`` and ``deform_conv`` have no numpy fold: their inputs are activations,
constant ones are not worth a second implementation.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType, Value
from ..ir.limits import check_shape
from .common import CTYPES, cfloat, split_rows
from .movement import strides_of
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

#: the float element types the sampling kernels are written for (float16 tensors run as float32)
FLOATS = frozenset({"float32", "float64"})
#: taps per axis and the first tap's offset from floor(x) for each GridSample mode
TAPS = {"nearest": (1, 0), "linear": (2, 0), "cubic": (4, -1)}
PADDINGS = ("zeros", "border", "reflection")
#: Keys' cubic convolution coefficient, as ONNX GridSample (and PyTorch's bicubic grid_sample) use it
CUBIC_A = -0.75
#: most sampling points per bin side RoiAlign's adaptive grid (sampling_ratio 0) takes: a bound on the
#: loop for a garbage ROI, far past any real one (a bin 65536 pixels tall)
ROI_MAX_SAMPLES = 65536


def _lit(x: float, ct: str) -> str:
    """A C literal of float type ``ct``."""
    return cfloat(x) if ct == "float" else repr(float(x))


def _fn(name: str, ct: str) -> str:
    """The clang builtin ``name`` (floor, rint, ceil) for float type ``ct``: one wasm instruction each."""
    return f"__builtin_{name}{'f' if ct == 'float' else ''}"


def _index(v: str, ct: str) -> str:
    """C int64 of float variable ``v`` truncated, with NaN and magnitudes past 1e9 (past any dimension)
    mapped to -1e9: the conversion is defined for every input, and such an index is outside every
    tensor."""
    big = _lit(1e9, ct)
    return f"({v} >= -{big} && {v} <= {big} ? (int64_t){v} : (int64_t)-1000000000)"


def trap_unless_equal(ctx: EmitContext, v: Value, expected: Sequence[int | None]) -> str:
    """C that traps unless the int64 vector ``v`` holds ``expected`` (None: any value there): a shape
    input read at run time must be the static shape the module was built for."""
    conds = [f"{ctx.ptr(v)}[{i}] != {e}" for i, e in enumerate(expected) if e is not None]
    return f"if ({' || '.join(conds)}) __builtin_trap();" if conds else ""


def require_floats(node: Node, *values: Value) -> None:
    """The float kernels' inputs beyond input 0 (which ``OpDef.dtypes`` checks): grid, rois, weights."""
    bad = sorted({v.type.dtype for v in values} - FLOATS)
    if bad:
        raise ShapeError(f"{node.name}: {node.op} runs on float32 and float64 tensors, not {', '.join(bad)}")


def require_int64_vector(node: Node, v: Value, n: int, what: str) -> None:
    """A shape, index or length input the C reads as ``int64_t[n]``."""
    if v.type.dtype != "int64" or v.type.shape != (n,):
        raise ShapeError(f"{node.name}: {what} must be int64[{n}], got {v.type}")


def const_ints(v: Value) -> list[int] | None:
    """A shape input's values when known at build time (checked then, not only by the module)."""
    return None if not v.is_const else [int(i) for i in v.const.reshape(-1)]


# -- interpolation taps shared by grid_sample and deform_conv -----------------------------------------
def _reflect(v: str, lo: float, hi: float, ct: str) -> str:
    """C statement reflecting float variable ``v`` off the borders ``lo``/``hi`` until it is inside (ONNX
    GridSample's reflection); a zero-width range (one pixel with aligned corners) maps everything to lo."""
    if hi <= lo:
        return f"if ({v} != {_lit(lo, ct)}) {v} = {_lit(lo, ct)};"
    lo_c, hi_c, span = _lit(lo, ct), _lit(hi, ct), _lit(hi - lo, ct)
    floor = _fn("floor", ct)
    return (f"if ({v} < {lo_c} || {v} > {hi_c}) {{ int below = {v} < {lo_c}; "
            f"{ct} dx = below ? {lo_c} - {v} : {v} - {hi_c}; {ct} m = {floor}(dx / {span}); "
            f"{ct} rem = dx - m * {span}; "
            f"{v} = below != ({floor}(m / 2) * 2 != m) ? {lo_c} + rem : {hi_c} - rem; }}")


def _axis_taps(d: int, coord: str, size: int, stride: int, ct: str, mode: str, padding: str,
               align: bool) -> list[str]:
    """C statements that sample axis ``d`` (``size`` elements ``stride`` apart) at ``coord`` (a C
    expression in pixel units): ``i<d>[k]`` the element offset of tap k, ``w<d>[k]`` its weight (not for
    nearest) and, with zeros padding, ``ok<d>[k]`` whether it is inside. As ONNX GridSample: the
    coordinate is rounded (nearest, half to even), then moved in by the padding mode when outside the
    borders, then each tap index is padded again (onnxruntime pads the taps only, so its cubic samples
    with border padding differ less than two pixels outside the image)."""
    k, first = TAPS[mode]
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    x, t = f"x{d}", f"t{d}"
    out = [f"{ct} {x} = {coord};"]
    if mode == "nearest":
        out.append(f"{x} = {_fn('rint', ct)}({x});")
    if padding == "border":
        out.append(f"if ({x} < {_lit(lo, ct)} || {x} > {_lit(hi, ct)}) "
                   f"{x} = {x} < 0 ? 0 : {x} > {size - 1} ? {size - 1} : {x};")
    elif padding == "reflection":
        out.append(_reflect(x, lo, hi, ct))
    if mode == "nearest":
        out.append(f"int64_t {t} = {_index(x, ct)};")
    else:
        out += [f"{ct} f{d} = {_fn('floor', ct)}({x}), a{d} = {x} - f{d};",
                f"int64_t {t} = {_index(f'f{d}', ct)};"]
        a = f"a{d}"
        if mode == "linear":
            weights = [f"1 - {a}", a]
        else:
            c = _lit(CUBIC_A, ct)
            weights = [f"(({c} * ({a} + 1) - 5 * {c}) * ({a} + 1) + 8 * {c}) * ({a} + 1) - 4 * {c}",
                       f"(({c} + 2) * {a} - ({c} + 3)) * {a} * {a} + 1",
                       f"(({c} + 2) * (1 - {a}) - ({c} + 3)) * (1 - {a}) * (1 - {a}) + 1",
                       f"(({c} * (2 - {a}) - 5 * {c}) * (2 - {a}) + 8 * {c}) * (2 - {a}) - 4 * {c}"]
        out.append(f"{ct} w{d}[{k}] = {{{', '.join(weights)}}};")
    out.append(f"int64_t i{d}[{k}];" + (f" int ok{d}[{k}];" if padding == "zeros" else ""))
    body = [f"int64_t j = {t} + k + {first};"]
    if padding == "zeros":
        body.append(f"ok{d}[k] = j >= 0 && j < {size}; if (!ok{d}[k]) j = 0;")
    elif padding == "reflection":
        body.append(f"{{ {ct} v = ({ct})j; {_reflect('v', lo, hi, ct)} j = {_index('v', ct)}; }}")
    if padding != "zeros":  # reflection lands inside up to rounding: clamped all the same
        body.append(f"j = j < 0 ? 0 : j > {size - 1} ? {size - 1} : j;")
    body.append(f"i{d}[k] = j * {stride};")
    out.append(f"for (int k = 0; k < {k}; k++) {{ {' '.join(body)} }}")
    return out


def _blend(rank: int, mode: str, padding: str, base: str) -> str:
    """C expression of the sample at the taps of axes 0..rank-1 (``_axis_taps``) in the tensor at
    ``base``: the innermost axis interpolated first, each outer axis then over those results, as ONNX's
    nested 1-D interpolation; a tap outside (zeros padding) reads 0."""
    k = TAPS[mode][0]

    def term(d: int, off: str) -> str:
        if d == rank:
            return f"{base}[{off}]"
        parts = []
        for j in range(k):
            inner = term(d + 1, f"{off} + i{d}[{j}]" if off else f"i{d}[{j}]")
            if padding == "zeros":
                inner = f"(ok{d}[{j}] ? {inner} : 0)"
            parts.append(inner if mode == "nearest" else f"w{d}[{j}] * {inner}")
        return parts[0] if k == 1 else f"({' + '.join(parts)})"

    return term(0, "")


# -- grid_sample ---------------------------------------------------------------------------------------
# attrs: ``mode`` (a key of TAPS), ``padding`` (one of PADDINGS), ``align_corners`` (bool). Inputs X
# (N, C, *in) and grid (N, *out, r) with r = len(in); output (N, C, *out).
def _gs_infer(node: Node) -> list[TensorType]:
    x, grid = (v.type for v in node.inputs)
    require_floats(node, *node.inputs)
    r = len(x.shape) - 2
    if (r < 1 or len(grid.shape) != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r
            or node.attrs["mode"] not in TAPS or node.attrs["padding"] not in PADDINGS):
        raise ShapeError(f"{node.name}: grid_sample of {x} at {grid} ({node.attrs['mode']}, "
                         f"{node.attrs['padding']})")
    out = TensorType(x.shape[:2] + grid.shape[1:-1], x.dtype)
    if out.size and 0 in x.shape[2:]:
        raise ShapeError(f"{node.name}: grid_sample from an empty image {x} into {out}")
    return [out]


def _gs_emit(node: Node, ctx: EmitContext) -> str:
    """Per grid point the taps of every axis once (denormalised, padded), then each channel's sample;
    threads split the grid points."""
    x, grid = node.inputs
    y = node.outputs[0]
    mode, padding, align = node.attrs["mode"], node.attrs["padding"], node.attrs["align_corners"]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-gridsample-{mode}")
    (n, c), spatial = x.type.shape[:2], x.type.shape[2:]
    r, points, plane = len(spatial), int(np.prod(grid.type.shape[1:-1])), int(np.prod(spatial))
    gt, xt = CTYPES[grid.type.dtype], CTYPES[x.type.dtype]
    taps = []
    for d, (size, stride) in enumerate(zip(spatial, strides_of(spatial))):
        g = f"gp[{r - 1 - d}]"  # the grid lists x (the last axis) first
        coord = (f"({g} + 1) / 2 * {_lit(size - 1, gt)}" if align else
                 f"(({g} + 1) * {_lit(size, gt)} - 1) / 2")
        taps += _axis_taps(d, coord, size, stride, gt, mode, padding, align)
    return split_rows(ctx, n * points, y.type.size * TAPS[mode][0] ** r, lambda count, first: "\n".join([
        f"for (size_t k = {first}; k < (size_t){first} + {count}; k++) {{",
        f"  const size_t n = k / {points}, o = k % {points};",
        f"  const {gt} *gp = {ctx.ptr(grid)} + k * {r};",
        *(f"  {line}" for line in taps),
        f"  const {xt} *xp = {ctx.ptr(x)} + n * {c * plane};",
        f"  {xt} *yp = {ctx.ptr(y)} + n * {c * points} + o;",
        f"  for (size_t c = 0; c < {c}; c++, xp += {plane}, yp += {points}) "
        f"*yp = {_blend(r, mode, padding, 'xp')};",
        "}"]))


register(OpDef("grid_sample", _gs_infer, None, _gs_emit, dtypes=FLOATS))


# -- affine_grid ---------------------------------------------------------------------------------------
# attrs: ``size`` (the output's spatial shape), ``align_corners``. Inputs theta (N, r, r+1) and size
# (int64[r + 2]: N, C, *spatial; read at run time when not a constant, and checked against the attrs);
# output (N, *spatial, r).
def _base_coords(n: int, align: bool) -> np.ndarray:
    """The normalised coordinate of each of ``n`` positions along one axis (AffineGrid's evenly spaced
    grid in [-1, 1]: at pixel centres, or at the corner pixels' centres with align_corners, where a single
    position is at -1 as in the ONNX reference and PyTorch; onnxruntime puts it at +1)."""
    i = np.arange(n, dtype=np.float64)
    if align:
        return -1 + 2 * i / (n - 1) if n > 1 else np.full(n, -1.0)
    return (2 * i + 1) / n - 1


def _ag_infer(node: Node) -> list[TensorType]:
    theta, size = node.inputs
    require_floats(node, theta)
    spatial = tuple(node.attrs["size"])
    r = len(spatial)
    require_int64_vector(node, size, r + 2, "size")
    if r not in (2, 3) or len(theta.type.shape) != 3 or theta.type.shape[1:] != (r, r + 1):
        raise ShapeError(f"{node.name}: affine_grid of theta {theta.type} for a {r}-D grid")
    given = const_ints(size)
    if given is not None and (given[0] != theta.type.shape[0] or tuple(given[2:]) != spatial):
        raise ShapeError(f"{node.name}: size {given} for theta {theta.type} and grid {list(spatial)}")
    return [TensorType((theta.type.shape[0], *spatial, r), theta.type.dtype)]


def _ag_grid(node: Node) -> list[np.ndarray]:
    """Per axis, in the grid's component order (x, y[, z]), the base coordinates."""
    return [_base_coords(s, node.attrs["align_corners"]) for s in reversed(node.attrs["size"])]


def _ag_fold(node: Node, args) -> list[np.ndarray]:
    """Each theta times the homogeneous base grid (x, y[, z], 1), in float64 as the reference."""
    theta = args[0]
    axes = _ag_grid(node)
    mesh = np.meshgrid(*axes[::-1], indexing="ij")[::-1]  # (x, y[, z]) over the (D,) H, W positions
    homo = np.stack([*mesh, np.ones_like(mesh[0])], axis=-1)
    return [np.einsum("...j,nkj->n...k", homo, theta.astype(np.float64)).astype(theta.dtype)]


def _ag_emit(node: Node, ctx: EmitContext) -> str:
    """The base coordinates are a table in the weights; each grid point is one row of theta times them."""
    theta, size = node.inputs
    y = node.outputs[0]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-affinegrid")
    ct, spatial = CTYPES[y.type.dtype], node.attrs["size"]
    r, n, points = len(spatial), theta.type.shape[0], math.prod(spatial)
    axes = _ag_grid(node)
    starts = np.cumsum([0] + [len(a) for a in axes])
    base = ctx.weight(np.concatenate(axes).astype(y.type.dtype), ct)
    inner = [1, spatial[-1], spatial[-1] * spatial[-2]]  # positions per step of x, y, z
    coords = [f"{base}[{starts[j]} + p / {inner[j]} % {len(axes[j])}]" for j in range(r)]
    row = r + 1
    sums = " + ".join([*(f"t[k * {row} + {j}] * b{j}" for j in range(r)), f"t[k * {row} + {r}]"])
    return "\n".join([
        "{",
        trap_unless_equal(ctx, size, [n, None, *spatial]),
        f"for (size_t n = 0; n < {n}; n++) for (size_t p = 0; p < {points}; p++) {{",
        f"  const {ct} *t = {ctx.ptr(theta)} + n * {r * row};",
        *(f"  const {ct} b{j} = {coords[j]};" for j in range(r)),
        f"  for (int k = 0; k < {r}; k++) {ctx.ptr(y)}[(n * {points} + p) * {r} + k] = {sums};",
        "}",
        "}"])


register(OpDef("affine_grid", _ag_infer, _ag_fold, _ag_emit, dtypes=FLOATS))


# -- roi_align -----------------------------------------------------------------------------------------
# attrs: ``mode`` (avg | max), ``half_pixel`` (bool: coordinate_transformation_mode half_pixel),
# ``height``/``width`` (the pooled output), ``sampling_ratio`` (0: adaptive), ``spatial_scale``. Inputs X
# (N, C, H, W), rois (R, 4) as [x1, y1, x2, y2], batch_indices (int64[R]); output (R, C, height, width).
def _roi_infer(node: Node) -> list[TensorType]:
    x, rois, idx = node.inputs
    require_floats(node, x, rois)
    a = node.attrs
    if (len(x.type.shape) != 4 or len(rois.type.shape) != 2 or rois.type.shape[1] != 4
            or a["mode"] not in ("avg", "max") or a["height"] < 1 or a["width"] < 1):
        raise ShapeError(f"{node.name}: roi_align of {x.type} at rois {rois.type} ({a['mode']})")
    require_int64_vector(node, idx, rois.type.shape[0], "batch_indices")
    out = TensorType((rois.type.shape[0], x.type.shape[1], a["height"], a["width"]), x.type.dtype)
    if out.size and 0 in x.type.shape[2:]:
        raise ShapeError(f"{node.name}: roi_align from an empty feature map {x.type}")
    return [out]


def _roi_emit(node: Node, ctx: EmitContext) -> str:
    """Per ROI and bin, each sampling point's 4 bilinear corners and weights once, then every channel's
    sum (avg) or max of the weighted corners (max), as ONNX's RoiAlign (and onnxruntime's) compute them;
    threads split the (ROI, bin) pairs."""
    x, rois, idx = node.inputs
    y = node.outputs[0]
    a = node.attrs
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-roialign-{a['mode']}")
    ct = CTYPES[y.type.dtype]
    (n, c, h, w), (oh, ow) = x.type.shape, (a["height"], a["width"])
    plane, bins = h * w, oh * ow
    L = lambda v: _lit(v, ct)  # noqa: E731
    off, scale = L(0.5 if a["half_pixel"] else 0.0), L(a["spatial_scale"])
    ends = [f"q[{i}] * {scale} - {off}" for i in range(4)]
    floor1 = [] if a["half_pixel"] else ["  rw = 1 > rw ? 1 : rw; rh = 1 > rh ? 1 : rh;"]
    cap = ROI_MAX_SAMPLES

    def grid(extent: str, bins_: int) -> str:
        if a["sampling_ratio"] > 0:
            return str(a["sampling_ratio"])
        return f"({ct})({_fn('ceil', ct)}({extent} / {bins_}))"

    def samples(v: str) -> str:  # a sample count from a float: bounded, NaN none
        return f"({v} >= {cap} ? {cap} : {v} > -{cap} ? (int64_t){v} : 0)"

    if a["mode"] == "avg":
        per_channel = "*o += w1 * xc[p1] + w2 * xc[p2] + w3 * xc[p3] + w4 * xc[p4];"
        finish = [f"    for (size_t c = 0; c < {c}; c++) yo[c * {bins}] /= cnt;"]
    else:
        per_channel = (f"{ct} v = w1 * xc[p1], u = w2 * xc[p2]; v = u > v ? u : v; "
                       "u = w3 * xc[p3]; v = u > v ? u : v; u = w4 * xc[p4]; v = u > v ? u : v; "
                       "*o = first || v > *o ? v : *o;")
        finish = []
    corner = [
        f"{ct} y = yy > 0 ? yy : 0, x = xx > 0 ? xx : 0;",
        "int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;",
        f"if (yl >= {h - 1}) {{ yh = yl = {h - 1}; y = ({ct})yl; }} else yh = yl + 1;",
        f"if (xl >= {w - 1}) {{ xh = xl = {w - 1}; x = ({ct})xl; }} else xh = xl + 1;",
        f"{ct} ly = y - yl, lx = x - xl, hy = 1 - ly, hx = 1 - lx;",
        "w1 = hy * hx; w2 = hy * lx; w3 = ly * hx; w4 = ly * lx;",
        f"p1 = yl * {w} + xl; p2 = yl * {w} + xh; p3 = yh * {w} + xl; p4 = yh * {w} + xh;"]
    return split_rows(ctx, rois.type.shape[0] * bins, y.type.size * 16, lambda count, first: "\n".join([
        f"for (size_t k = {first}; k < (size_t){first} + {count}; k++) {{",
        f"  const size_t r = k / {bins}, ph = k % {bins} / {ow}, pw = k % {ow};",
        f"  const int64_t b = {ctx.ptr(idx)}[r];",
        f"  if (b < 0 || b >= {n}) __builtin_trap();",
        f"  const {ct} *q = {ctx.ptr(rois)} + r * 4;",
        f"  const {ct} sw = {ends[0]}, sh = {ends[1]};",
        f"  {ct} rw = {ends[2]} - sw, rh = {ends[3]} - sh;",
        *floor1,
        f"  const {ct} bh = rh / {oh}, bw = rw / {ow};",
        f"  const {ct} gfh = {grid('rh', oh)}, gfw = {grid('rw', ow)};",
        f"  const int64_t gh = {samples('gfh')}, gw = {samples('gfw')};",
        f"  const {ct} cnt = gh * gw > 1 ? ({ct})(gh * gw) : 1; (void)cnt;",
        f"  const {ct} *xb = {ctx.ptr(x)} + b * {c * plane};",
        "  {",
        f"    {ct} *yo = {ctx.ptr(y)} + r * {c * bins} + ph * {ow} + pw;",
        f"    for (size_t c = 0; c < {c}; c++) yo[c * {bins}] = 0;",
        "    int first = 1;",
        "    for (int64_t iy = 0; iy < gh; iy++) for (int64_t ix = 0; ix < gw; ix++, first = 0) {",
        f"      const {ct} yy = sh + ph * bh + (iy + {L(0.5)}) * bh / gh;",
        f"      const {ct} xx = sw + pw * bw + (ix + {L(0.5)}) * bw / gw;",
        f"      int64_t p1 = 0, p2 = 0, p3 = 0, p4 = 0; {ct} w1 = 0, w2 = 0, w3 = 0, w4 = 0;",
        f"      if (yy >= -1 && yy <= {h} && xx >= -1 && xx <= {w}) {{",
        *(f"        {line}" for line in corner),
        "      }",
        f"      for (size_t c = 0; c < {c}; c++) {{",
        f"        const {ct} *xc = xb + c * {plane}; {ct} *o = yo + c * {bins};",
        f"        {per_channel}",
        "      }",
        "    }",
        *finish,
        "  }",
        "}"]))


register(OpDef("roi_align", _roi_infer, None, _roi_emit, dtypes=FLOATS))


# -- deform_conv ---------------------------------------------------------------------------------------
# attrs: ``strides``, ``dilations``, ``pads`` (begins, then ends), ``group``, ``offset_group``, ``bias``
# and ``mask`` (whether those inputs follow). Inputs X (N, C, H, W), W (OC, C / group, kh, kw), offset
# (N, offset_group * kh * kw * 2, OH, OW) as (dy, dx) pairs, then B (OC) and mask (N, offset_group * kh *
# kw, OH, OW) when present. 2-D only (as the ONNX reference and onnxruntime).
def _dc_geometry(node: Node) -> tuple[int, int, int, int]:
    """(kh, kw, OH, OW)."""
    x, w = node.inputs[0].type.shape, node.inputs[1].type.shape
    a = node.attrs
    kh, kw = w[2:]
    spans = [x[2 + d] + a["pads"][d] + a["pads"][d + 2] - (w[2 + d] - 1) * a["dilations"][d] - 1
             for d in range(2)]
    if min(spans) < 0:
        raise ShapeError(f"{node.name}: a {kh}x{kw} filter does not fit the padded input {x}")
    return kh, kw, spans[0] // a["strides"][0] + 1, spans[1] // a["strides"][1] + 1


def _dc_infer(node: Node) -> list[TensorType]:
    a = node.attrs
    x, w = (v.type for v in node.inputs[:2])
    require_floats(node, *node.inputs)
    if (len(x.shape) != 4 or len(w.shape) != 4 or len(set(v.type.dtype for v in node.inputs)) != 1
            or a["group"] < 1 or a["offset_group"] < 1 or x.shape[1] != w.shape[1] * a["group"]
            or w.shape[0] % a["group"] or x.shape[1] % a["offset_group"] or len(a["pads"]) != 4
            or min(a["pads"]) < 0 or min(a["strides"] + a["dilations"]) < 1
            or len(node.inputs) != 3 + a["bias"] + a["mask"]):
        raise ShapeError(f"{node.name}: deform_conv of {x} by {w} (group {a['group']}, offset_group "
                         f"{a['offset_group']})")
    kh, kw, oh, ow = _dc_geometry(node)
    n, og = x.shape[0], a["offset_group"]
    want = ([(n, og * kh * kw * 2, oh, ow)] + [(w.shape[0],)] * a["bias"]
            + [(n, og * kh * kw, oh, ow)] * a["mask"])
    got = [v.type.shape for v in node.inputs[2:]]
    if got != want:
        raise ShapeError(f"{node.name}: deform_conv offset/bias/mask shapes {got} for a {oh}x{ow} output, "
                         f"not {want}")
    check_shape((x.shape[1] * kh * kw, oh * ow), f"{node.name}: the sampled columns")
    return [TensorType((n, w.shape[0], oh, ow), x.dtype)]


def _dc_scratch(node: Node) -> int:
    """One image's sampled columns: (C * kh * kw) x (OH * OW)."""
    kh, kw, oh, ow = _dc_geometry(node)
    return node.inputs[0].type.shape[1] * kh * kw * oh * ow * node.inputs[0].type.itemsize


def _dc_emit(node: Node, ctx: EmitContext) -> str:
    """Per image: the bilinear samples at each offset tap into columns (deformable im2col: the taps of
    one offset group and tap position computed once for all its channels), then the grouped product with
    the weights."""
    x, w, off = node.inputs[:3]
    y = node.outputs[0]
    a = node.attrs
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-deformconv")
    ct = CTYPES[y.type.dtype]
    (n, c, h, wd), oc = x.type.shape, w.type.shape[0]
    kh, kw, oh, ow = _dc_geometry(node)
    kk, pts, og, g = kh * kw, oh * ow, a["offset_group"], a["group"]
    cpo, cg = c // og, c // g  # channels per offset group, input channels per group
    (sh, sw), (dh, dw), (ph, pw) = a["strides"], a["dilations"], a["pads"][:2]
    cols = ctx.scratch(ct)
    coords = [f"({ct})(p / {ow} * {sh} + ki * {dh}) - {ph} + fh[p]",
              f"({ct})(p % {ow} * {sw} + kj * {dw}) - {pw} + fw[p]"]
    taps = [line for d, (size, stride) in enumerate(((h, wd), (wd, 1)))
            for line in _axis_taps(d, coords[d], size, stride, ct, "linear", "zeros", True)]
    mask = f" * {ctx.ptr(node.inputs[-1])}[((n * {og} + g) * {kk} + k) * {pts} + p]" if a["mask"] else ""
    bias = f"{ctx.ptr(node.inputs[3])}[o]" if a["bias"] else "0"
    return "\n".join([
        "{",
        f"for (size_t n = 0; n < {n}; n++) {{",
        f"  for (size_t g = 0; g < {og}; g++) for (size_t k = 0; k < {kk}; k++) {{",
        f"    const size_t ki = k / {kw}, kj = k % {kw};",
        f"    const {ct} *fh = {ctx.ptr(off)} + ((n * {og} + g) * {kk} + k) * {2 * pts}, *fw = fh + {pts};",
        f"    for (size_t p = 0; p < {pts}; p++) {{",
        *(f"      {line}" for line in taps),
        f"      for (size_t c = g * {cpo}; c < (g + 1) * {cpo}; c++) {{",
        f"        const {ct} *xc = {ctx.ptr(x)} + (n * {c} + c) * {h * wd};",
        f"        {cols}[(c * {kk} + k) * {pts} + p] = {_blend(2, 'linear', 'zeros', 'xc')}{mask};",
        "      }",
        "    }",
        "  }",
        f"  for (size_t o = 0; o < {oc}; o++) {{",
        f"    {ct} *yo = {ctx.ptr(y)} + (n * {oc} + o) * {pts};",
        f"    const {ct} *wo = {ctx.ptr(w)} + o * {cg * kk}, *cc = {cols} + o / {oc // g} * {cg * kk * pts};",
        f"    for (size_t p = 0; p < {pts}; p++) yo[p] = {bias};",
        f"    for (size_t q = 0; q < {cg * kk}; q++) {{",
        f"      const {ct} wq = wo[q], *cq = cc + q * {pts};",
        f"      for (size_t p = 0; p < {pts}; p++) yo[p] += wq * cq[p];",
        "    }",
        "  }",
        "}",
        "}"])


register(OpDef("deform_conv", _dc_infer, None, _dc_emit, scratch=_dc_scratch, dtypes=FLOATS))
