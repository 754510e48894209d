"""Convolution family (NCHW, fused act): ``conv`` (1D/2D/3D) and ``conv_transpose`` (1D/2D/3D).

Kernel choice is made here, once per node, from its shape: im2col-in-panels + GEMM in general,
the direct depthwise kernel when every group has one input and one output channel, the input read
in place for 1x1 stride-1 convs (strided unpadded 1x1 convs with enough output pixels: subsampled once
into scratch, then the same, ``uses_subsample_1x1``), Winograd F(2x2, 3x3) for 3x3 stride-1 convs with
enough channels (``uses_winograd``), Winograd F(2x2, 2x2) over the polyphase components for 3x3 stride-2 ones
(``uses_winograd_s2``), and GEMM panels read straight from the (padded) input for width stride 1 with
few outputs per group (``uses_direct``) (1D/2D; 3D always takes im2col over D*H*W voxels + GEMM,
packed without the 2D row fast path). ConvTranspose is a GEMM (weights^T x input
pixels) into a column buffer, scatter-added into the output (col2im).

Weights that are run-time tensors (ONNX graph inputs, a dequantized run-time tensor) cannot be packed or
transformed at build time: those convs and transposed convs run the direct kernels of ``f32-conv-rt``,
which read the weights in place (``runtime_call``); constant weights keep the packed paths above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import act_c
from .gemm import pack_a_panels
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

SCRATCH_FLOATS = 131072  # 512 KiB of packed im2col panels per chunk of output pixels
SUBSAMPLE_MIN_PIXELS = 400  # fp32 strided 1x1 convs subsample from this many output pixels
WINOGRAD_FLOATS = 2 * SCRATCH_FLOATS  # 1 MiB of transformed inputs and products per chunk of tile rows
#: F(2x2, 3x3) weight transform G (the filter's 3 taps -> 4 transform positions per axis)
WINOGRAD_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
#: F(4x4, 3x3) weight transform (Lavin & Gray, points 0, +-1, +-2, infinity): every fraction of the
#: algorithm lies here, so the kernel's input and output transforms multiply by 2, 4 and 8 only (exact)
WINOGRAD4_G = np.array([[1 / 4, 0.0, 0.0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                        [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0.0, 0.0, 1.0]])
#: F(2, 2) weight transform (2 taps -> 3 positions), applied per polyphase component of a stride-2 3x3
WINOGRAD_S2_G = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
#: polyphase components (even/odd rows, then columns) summed at each F(2, 2) position xi = 3i + j, in the
#: order the kernel stacks them along K: a one-tap (odd) axis has nothing at position 2
WINOGRAD_S2_SLOTS = [[p for p in ("ee", "eo", "oe", "oo") if (p[0] == "e" or i < 2) and
                      (p[1] == "e" or j < 2)] for i in range(3) for j in range(3)]


def _spatial(node: Node) -> dict[str, int]:
    """Attrs shared by conv and conv_transpose, normalised to 3D numbers (missing leading spatial axes
    have size 1: 1D runs with D = H = 1, 2D with D = 1)."""
    x, w = node.inputs[0].type.shape, node.inputs[1].type.shape
    a = node.attrs
    n = len(x) - 2
    if len(a["strides"]) != n or len(a["dilations"]) != n or len(a["pads"]) != 2 * n or \
            min(*a["strides"], *a["dilations"], a.get("group", 1)) < 1:
        raise ShapeError(f"{node.name}: strides {a['strides']}, dilations {a['dilations']} and group "
                         f"{a.get('group', 1)} (each at least 1), pads {a['pads']} for {n} spatial axes")
    lead = [1] * (3 - n)
    (D, H, W), (kd, kh, kw) = lead + list(x[2:]), lead + list(w[2:])
    (sd, sh, sw), (dd, dh, dw) = lead + list(a["strides"]), lead + list(a["dilations"])
    pads = a["pads"]  # ONNX order: begins then ends
    (pd, pt, pl), (pdb, pb, pr) = [0] * (3 - n) + pads[:n], [0] * (3 - n) + pads[n:]
    return dict(N=x[0], C=x[1], D=D, H=H, W=W, G=a.get("group", 1), kd=kd, kh=kh, kw=kw, sd=sd, sh=sh, sw=sw,
                dd=dd, dh=dh, dw=dw, pd=pd, pt=pt, pl=pl, pdb=pdb, pb=pb, pr=pr)


def conv_geometry(node: Node) -> dict[str, int]:
    g = _spatial(node)
    g["M"] = node.inputs[1].type.shape[0]
    g["OD"] = (g["D"] + g["pd"] + g["pdb"] - g["dd"] * (g["kd"] - 1) - 1) // g["sd"] + 1
    g["OH"] = (g["H"] + g["pt"] + g["pb"] - g["dh"] * (g["kh"] - 1) - 1) // g["sh"] + 1
    g["OW"] = (g["W"] + g["pl"] + g["pr"] - g["dw"] * (g["kw"] - 1) - 1) // g["sw"] + 1
    return g


def conv_infer(node: Node) -> list[TensorType]:
    """Output type of a conv (shared with the integer ``qconv``, whose geometry is the same)."""
    x, w = node.inputs[0].type, node.inputs[1].type
    if len(x.shape) not in (3, 4, 5) or len(w.shape) != len(x.shape):
        raise ShapeError(f"{node.name}: conv needs NCL, NCHW or NCDHW input, got {x.shape} "
                         f"with weights {w.shape}")
    g = conv_geometry(node)
    if g["C"] != w.shape[1] * g["G"] or g["M"] % g["G"]:
        raise ShapeError(f"{node.name}: conv channels {x.shape[1]} / weights {w.shape} / group {g['G']}")
    if g["OD"] <= 0 or g["OH"] <= 0 or g["OW"] <= 0:
        raise ShapeError(f"{node.name}: conv output would be empty")
    shape = (g["N"], g["M"]) + (g["OD"], g["OH"], g["OW"])[5 - len(x.shape):]
    return [TensorType(shape, "float32")]


def is_depthwise(g: dict[str, int]) -> bool:
    """Every group has one input and one output channel, over planes (no depth taps or padding): the
    direct kernel, no im2col."""
    return g["G"] == g["C"] == g["M"] and (g["D"], g["kd"], g["pd"], g["OD"]) == (1, 1, 0, 1)


def is_pointwise(g: dict[str, int]) -> bool:
    """1x1 taps, stride 1, no padding: the input is already the GEMM's B operand, read in place."""
    return all(g[k] == 1 for k in ("kd", "kh", "kw", "sd", "sh", "sw")) and \
        not any(g[k] for k in ("pd", "pt", "pl", "pdb", "pb", "pr"))


def is_pointwise_strided(g: dict[str, int]) -> bool:
    """1x1 taps, no padding, a stride above 1 (1D/2D): the input planes are subsampled once into
    scratch (every sw-th pixel of every sh-th row), then read in place as for ``is_pointwise``."""
    return all(g[k] == 1 for k in ("kd", "kh", "kw", "sd", "D")) and (g["sh"], g["sw"]) != (1, 1) and \
        not any(g[k] for k in ("pd", "pt", "pl", "pdb", "pb", "pr"))


def uses_subsample_1x1(g: dict[str, int]) -> bool:
    """fp32 strided 1x1 convs with at least 400 output pixels subsample, then read in place; smaller ones
    keep im2col (for a 1x1 conv it packs the same subsampled values, but into GEMM panels, which the GEMM
    prefers over a short row stride). Measured on ResNet-50-like shapes against im2col: 1.06-1.09x at
    28x28 outputs, 1.03x at 20x20, 0.99x at 16x16, 0.95-0.97x at 14x14, 0.88-0.91x at 7x7; the same bits
    either way. (int8 subsamples at every size: 1.01-1.05x.)"""
    return is_pointwise_strided(g) and g["OH"] * g["OW"] >= SUBSAMPLE_MIN_PIXELS


def kernel_tile(g: dict[str, int]) -> str:
    """Grammar tile of the direct kernels: ``<kh>x<kw>s<stride>`` (``s<sh>x<sw>`` when they differ)."""
    return f"{g['kh']}x{g['kw']}s{g['sh']}" + (f"x{g['sw']}" if g["sw"] != g["sh"] else "")


def dwconv_variant(g: dict[str, int]) -> str:
    """C function suffix of the depthwise kernel: 3x3 taps in registers, stride 1/2 fast paths."""
    taps = "3x3" if (g["kh"], g["kw"]) == (3, 3) else "kxk"
    return taps + (f"s{g['sw']}" if g["sw"] in (1, 2) else "sN")


def dw_padded_plane(g: dict[str, int]) -> tuple[int, int] | None:
    """Hp, Wp of the zero-bordered plane the padded 3x3 depthwise kernels read (stride 1/2 across,
    dilation 1), or None when another depthwise kernel runs. Big enough for every vector load the
    output rows make, including the discarded lanes of the last group."""
    if (g["kh"], g["kw"], g["dh"], g["dw"]) != (3, 3, 1, 1) or g["sw"] not in (1, 2):
        return None
    hp = max(g["pt"] + g["H"] + g["pb"], (g["OH"] - 1) * g["sh"] + 3)
    wp = max(g["pl"] + g["W"] + g["pr"], ((g["OW"] + 3) // 4 * 4) * g["sw"] + 8)
    return hp, -(-wp // 4) * 4


def padded_plane(g: dict[str, int]) -> tuple[int, int]:
    """Hp, Wp of the zero-bordered input copy the direct kernel reads (H, W when unpadded)."""
    return g["pt"] + g["H"] + g["pb"], g["pl"] + g["W"] + g["pr"]


def uses_direct(g: dict[str, int]) -> bool:
    """Width stride 1 (1D/2D, not depthwise or pointwise) with few output channels per group: GEMM panels
    read from the (padded) input in place instead of im2col. im2col's cost is shared by the Mg/4 row
    panels that reuse each packed panel, and the direct loop re-reads scattered input lines per row
    panel: measured, direct gains 12-30% at Mg = 8-16 (K = 27-288) and loses 15% at Mg = 64, K = 288
    and at K = 1152. K <= 576 keeps a panel's input lines (about Cg*kh rows) near L1. One group's
    padded input must fit the im2col scratch budget."""
    hp, wp = padded_plane(g)
    cg = g["C"] // g["G"]
    return (g["sw"] == 1 and g["D"] == 1 and g["kd"] == 1 and not is_depthwise(g) and not is_pointwise(g)
            and g["M"] // g["G"] <= 16 and cg * g["kh"] * g["kw"] <= 576 and cg * hp * wp <= SCRATCH_FLOATS)


def uses_winograd(g: dict[str, int]) -> bool:
    """3x3, stride 1, dilation 1, one group, 2D, at least 16 input and 16 output channels: Winograd
    F(2x2, 3x3) does 16 multiplies per channel pair and 2x2 output pixels instead of 36. The GEMMs
    are 80-90% of its time; the transforms cost per channel and pixel, so narrow layers gain little:
    measured against im2col/direct, 1.7-2.3x at C = M = 64-512 (14-56 pixels wide), 1.1-1.3x at
    C, M = 16-32, a 3-10% loss at 8 channels. Outputs stay within 5e-6 of a float64 reference
    (im2col: 1e-5), the weights being transformed in float64 at build time."""
    return ((g["kh"], g["kw"], g["sh"], g["sw"], g["dh"], g["dw"], g["G"]) == (3, 3, 1, 1, 1, 1, 1)
            and (g["D"], g["kd"], g["pd"], g["OD"]) == (1, 1, 0, 1) and g["C"] >= 16 and g["M"] >= 16)


def uses_winograd_f4(g: dict[str, int]) -> bool:
    """F(4x4, 3x3) instead of F(2x2, 3x3) (36 multiplies per 4x4 outputs instead of 64) where it pays: at
    most 128 x 128 channels, as its transformed weights (36 C M floats, 2.25 MiB there) stream again for
    every chunk of tile rows, and outputs at least 28 pixels each way, as a quad of 4x4 tiles spans 16
    columns (20 output columns compute 32) and its transforms cost per computed tile. Measured, 1 thread,
    per layer against F(2x2): 1.2-1.35x at 16-64 channels on 40x40-80x80, 1.6x at 128 on 28x28; 0.97-1.1x
    on 20x20, 0.67-0.8x on 10x10; 0.74x at 256 x 256 (14x14), 0.42x at 512 x 512 (7x7)."""
    return (uses_winograd(g) and g["C"] * g["M"] <= 128 * 128 and min(g["OH"], g["OW"]) >= 28)


def uses_winograd_s2(g: dict[str, int]) -> bool:
    """3x3, stride 2, dilation 1, one group, 2D, at least 16 input and 16 output channels and 144 output
    pixels: the four polyphase stride-1 sub-convolutions (2x2, 2x1, 1x2, 1x1 taps) as F(2x2, 2x2) take 25
    multiplies per channel pair and 2x2 output tile instead of 36 (im2col's GEMM already runs near the
    GEMM ceiling and its packing is a few % of these layers: fewer FLOPs is what is left). Measured
    against im2col: 1.17-1.27x from 14x14 outputs up (C = 16-256); 0.74-0.91x at 10x10 and 7x7, where
    tile quads are a third empty and the 2.8x larger transformed weights stream for few tiles."""
    return ((g["kh"], g["kw"], g["sh"], g["sw"], g["dh"], g["dw"], g["G"]) == (3, 3, 2, 2, 1, 1, 1)
            and (g["D"], g["kd"], g["pd"], g["OD"]) == (1, 1, 0, 1) and g["C"] >= 16 and g["M"] >= 16
            and g["OH"] * g["OW"] >= 144)


def winograd_tiling(g: dict[str, int], tile: int = 2) -> tuple[int, int]:
    """Tiles (of tile x tile outputs) per tile row, rounded up to the transforms' quads of 4, and tile
    rows per chunk (as many as fit ``WINOGRAD_FLOATS``: per tile, the transformed inputs (C per
    position) and products (M per position) of the (tile + 2)^2 positions, or 25 and 9 for stride 2;
    at least one)."""
    tiles = -(-g["OW"] // tile)
    twp = -(-tiles // 4) * 4
    per_tile = (tile + 2) ** 2 * (g["C"] + g["M"]) if g["sh"] == 1 else 25 * g["C"] + 9 * g["M"]
    rows = max(1, WINOGRAD_FLOATS // (per_tile * twp))
    return twp, min(rows, -(-g["OH"] // tile))


def _winograd_scratch_floats(g: dict[str, int], tile: int) -> int:
    """B operands (C rows per position and phase, whole panels), products (M x tiles per position),
    bordered input rows (tile + 2 of tile * twp + 4 floats; stride 2: 5 of 4 * twp + 4)."""
    twp, rows = winograd_tiling(g, tile)
    npad = -(-twp * rows // 8) * 8
    if g["sh"] == 1:
        a = tile + 2
        return a * a * (g["C"] * npad + g["M"] * twp * rows) + a * (tile * twp + 4)
    return 25 * g["C"] * npad + 9 * g["M"] * twp * rows + 5 * (4 * twp + 4)


def _winograd_weights(w: np.ndarray, gm: np.ndarray) -> np.ndarray:
    """[M, C, 3, 3] -> U = G g G^T as a GEMM A operand per position ([a^2][ceil(M/4)][C][4], position
    xi = a i + j for G's a rows), computed in float64."""
    u = np.einsum("ik,mckl,jl->ijmc", gm, w.astype(np.float64), gm)
    return np.concatenate([pack_a_panels(u[i, j].astype(np.float32)).reshape(-1)
                           for i in range(len(gm)) for j in range(len(gm))])


def winograd_weights(w: np.ndarray) -> np.ndarray:
    """F(2x2, 3x3): 16 positions."""
    return _winograd_weights(w, WINOGRAD_G)


def winograd4_weights(w: np.ndarray) -> np.ndarray:
    """F(4x4, 3x3): 36 positions."""
    return _winograd_weights(w, WINOGRAD4_G)


def winograd_s2_weights(w: np.ndarray) -> np.ndarray:
    """[M, C, 3, 3] -> per position xi = 3i + j, U = G g G^T of each polyphase component's taps (an odd
    axis: tap 1 then a zero), the components of ``WINOGRAD_S2_SLOTS[xi]`` side by side along K, packed
    as a GEMM A operand ([ceil(M/4)][K][4]); computed in float64."""
    w4 = np.pad(w.astype(np.float64), ((0, 0), (0, 0), (0, 1), (0, 1)))  # taps 3: the odd axes' zero
    u = {p: np.einsum("ik,mckl,jl->ijmc", WINOGRAD_S2_G, w4[:, :, "eo".index(p[0])::2, "eo".index(p[1])::2],
                      WINOGRAD_S2_G) for p in ("ee", "eo", "oe", "oo")}
    return np.concatenate([pack_a_panels(np.concatenate([u[p][xi // 3, xi % 3] for p in slots], 1)
                                         .astype(np.float32)).reshape(-1)
                           for xi, slots in enumerate(WINOGRAD_S2_SLOTS)])



#: (predicate, kernel name, C function, weight transform, output tile) of the Winograd kernels, in order
#: of preference
WINOGRAD_KERNELS = (
    (uses_winograd_f4, "f32-conv-winograd-f4x4-4x8", "f32_conv2d_winograd4", winograd4_weights, 4),
    (uses_winograd, "f32-conv-winograd-f2x2-4x8", "f32_conv2d_winograd", winograd_weights, 2),
    (uses_winograd_s2, "f32-conv-winograd-s2-f2x2-4x8", "f32_conv2d_winograd_s2", winograd_s2_weights, 2),
)


def _direct_scratch_floats(g: dict[str, int]) -> int:
    """Tap offsets (K ints, rounded to a vector), then the padded copy when there is padding."""
    hp, wp = padded_plane(g)
    k = g["C"] // g["G"] * g["kh"] * g["kw"]
    padded = (hp, wp) != (g["H"], g["W"])
    return (k + 3) // 4 * 4 + (g["C"] // g["G"] * hp * wp + 8 if padded else 0)


def pixel_chunk(g: dict[str, int]) -> int:
    k = g["C"] // g["G"] * g["kd"] * g["kh"] * g["kw"]
    p = g["OD"] * g["OH"] * g["OW"]
    chunk = max(8, SCRATCH_FLOATS // max(k, 1) // 8 * 8)
    return min(chunk, -(-p // 8) * 8)


def runtime_call(fn: str, node: Node, g: dict[str, int], ctx: EmitContext) -> str:
    """The call of a ``f32-conv-rt`` kernel (``f32_conv_rt``/``f32_deconv_rt``): weights and bias read
    where they lie, no scratch; threads split the output volumes."""
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    bias = ctx.ptr(node.inputs[2]) if len(node.inputs) > 2 else "0"
    ctx.parallel()
    shape = [g[k] for k in ("N", "C", "D", "H", "W")]
    geometry = [g[k] for k in ("M", "OD", "OH", "OW", "G", "kd", "kh", "kw", "sd", "sh", "sw", "dd", "dh",
                               "dw", "pd", "pt", "pl")]
    args = [ctx.ptr(x), *shape, ctx.ptr(w), bias, ctx.ptr(y), *geometry, act_c(node), "tid", "nt"]
    return f"{fn}({', '.join(map(str, args))});"


def _scratch(node: Node) -> int:
    if not node.inputs[1].is_const:
        return 0
    g = conv_geometry(node)
    if is_depthwise(g):
        plane = dw_padded_plane(g)
        return plane[0] * plane[1] * 4 if plane else 0
    if is_pointwise(g):
        return 0
    if uses_subsample_1x1(g):  # one image's subsampled planes
        return g["C"] * g["OH"] * g["OW"] * 4
    for uses, *_, tile in WINOGRAD_KERNELS:
        if uses(g):
            return _winograd_scratch_floats(g, tile) * 4
    if uses_direct(g):
        return _direct_scratch_floats(g) * 4
    k = g["C"] // g["G"] * g["kd"] * g["kh"] * g["kw"]
    return k * pixel_chunk(g) * 4


def _emit(node: Node, ctx: EmitContext) -> str:
    """Every conv kernel splits its work between threads (pixel panels, output channels or channels)."""
    g = conv_geometry(node)
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if not w.is_const:
        ctx.use_kernel("f32-conv-rt-4")
        return runtime_call("f32_conv_rt", node, g, ctx)
    bias = ctx.ptr(node.inputs[2]) if len(node.inputs) > 2 else "0"
    ctx.parallel()
    if is_depthwise(g):
        wf = ctx.weight(w.const.astype(np.float32).reshape(g["M"], -1))
        ctx.use_kernel(f"f32-dwconv-{kernel_tile(g)}")
        plane = dw_padded_plane(g)
        if plane:
            return (f"f32_dwconv_3x3p_s{g['sw']}({ctx.ptr(x)}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, {wf}, "
                    f"{bias}, {ctx.ptr(y)}, {g['OH']}, {g['OW']}, {g['sh']}, {g['pt']}, {g['pl']}, "
                    f"{plane[0]}, {plane[1]}, {ctx.scratch()}, {act_c(node)}, tid, nt);")
        return (f"f32_dwconv_{dwconv_variant(g)}({ctx.ptr(x)}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, "
                f"{wf}, {bias}, {ctx.ptr(y)}, {g['OH']}, {g['OW']}, {g['kh']}, {g['kw']}, {g['sh']}, "
                f"{g['sw']}, {g['dh']}, {g['dw']}, {g['pt']}, {g['pl']}, {act_c(node)}, tid, nt);")
    for uses, kernel, fn, transform, tile in WINOGRAD_KERNELS:
        if uses(g):
            ctx.use_kernel(kernel)
            twp, rows = winograd_tiling(g, tile)
            u = ctx.weight(transform(w.const))
            return (f"{fn}({ctx.ptr(x)}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, {u}, {bias}, {ctx.ptr(y)}, "
                    f"{g['M']}, {g['OH']}, {g['OW']}, {g['pt']}, {g['pl']}, {twp}, {rows}, "
                    f"{ctx.scratch(shared=True)}, {act_c(node)}, tid, nt);")
    chunk = pixel_chunk(g)
    # weights are the GEMM's A operand: packed in 4-row panels per group at build time
    w2 = w.const.astype(np.float32).reshape(g["M"], -1)
    mg = g["M"] // g["G"]
    wp = ctx.weight(np.concatenate([pack_a_panels(w2[i * mg:(i + 1) * mg]).reshape(-1)
                                    for i in range(g["G"])]))
    if is_pointwise(g):
        ctx.use_kernel("f32-conv1x1-gemm-4x8")
        return (f"f32_conv1x1({ctx.ptr(x)}, {g['N']}, {g['C']}, {g['D'] * g['H'] * g['W']}, {wp}, {bias}, "
                f"{ctx.ptr(y)}, {g['M']}, {g['G']}, {int(node.op == 'conv_nhwc')}, {act_c(node)}, tid, nt);")
    if uses_subsample_1x1(g):
        ctx.use_kernel("f32-conv1x1-subsample-gemm-4x8")
        return (f"f32_conv1x1_sub({ctx.ptr(x)}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, {wp}, {bias}, "
                f"{ctx.ptr(y)}, {g['M']}, {g['OH']}, {g['OW']}, {g['G']}, {g['sh']}, {g['sw']}, "
                f"{ctx.scratch(shared=True)}, {act_c(node)}, tid, nt);")
    if uses_direct(g):
        ctx.use_kernel("f32-conv-direct-4x8")
        ph, pw = padded_plane(g)
        return (f"f32_conv2d_direct({ctx.ptr(x)}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, {wp}, {bias}, "
                f"{ctx.ptr(y)}, {g['M']}, {g['OH']}, {g['OW']}, {g['G']}, {g['kh']}, {g['kw']}, {g['sh']}, "
                f"{g['dh']}, {g['dw']}, {g['pt']}, {g['pl']}, {ph}, {pw}, {ctx.scratch(shared=True)}, "
                f"{act_c(node)}, tid, nt);")
    if len(x.type.shape) == 5:
        ctx.use_kernel("f32-conv3d-im2col-gemm-4x8")
        return (f"f32_conv3d({ctx.ptr(x)}, {g['N']}, {g['C']}, {g['D']}, {g['H']}, {g['W']}, {wp}, {bias}, "
                f"{ctx.ptr(y)}, {g['M']}, {g['OD']}, {g['OH']}, {g['OW']}, {g['G']}, {g['kd']}, {g['kh']}, "
                f"{g['kw']}, {g['sd']}, {g['sh']}, {g['sw']}, {g['dd']}, {g['dh']}, {g['dw']}, {g['pd']}, "
                f"{g['pt']}, {g['pl']}, {chunk}, {ctx.scratch(shared=True)}, {act_c(node)}, "
                f"tid, nt);")
    ctx.use_kernel("f32-conv-im2col-gemm-4x8")
    return (f"f32_conv2d({ctx.ptr(x)}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, {wp}, {bias}, {ctx.ptr(y)}, "
            f"{g['M']}, {g['OH']}, {g['OW']}, {g['G']}, {g['kh']}, {g['kw']}, {g['sh']}, {g['sw']}, "
            f"{g['dh']}, {g['dw']}, {g['pt']}, {g['pl']}, {chunk}, {ctx.scratch(shared=True)}, "
            f"{act_c(node)}, tid, nt);")


register(OpDef("conv", conv_infer, None, _emit, kernels=("f32-gemm", "f32-conv", "f32-dwconv", "f32-conv-rt"),
               scratch=_scratch, dtypes=F32))


# -- conv_nhwc: a pointwise conv writing its output channels-last ---------------------------------
# Attrs as conv's; the output is [N, *spatial, M] (conv's output moved channels-last), written by the 1x1
# kernel's transposed tile store: what a conv followed by a transpose to NHWC becomes
# (``passes/absorb_transposes.py``). Quantization leaves it float (it rewrites ``conv`` only).
def _nhwc_infer(node: Node) -> list[TensorType]:
    if not is_pointwise(conv_geometry(node)):
        raise ShapeError(f"{node.name}: conv_nhwc needs 1x1 taps, stride 1 and no padding")
    (t,) = conv_infer(node)
    return [TensorType((t.shape[0], *t.shape[2:], t.shape[1]), t.dtype)]


register(OpDef("conv_nhwc", _nhwc_infer, None, _emit, kernels=("f32-gemm", "f32-conv"), dtypes=F32))


# -- conv_transpose: GEMM into columns + col2im scatter-add ---------------------------------------
def deconv_geometry(node: Node) -> dict[str, int]:
    """conv_transpose numbers: weights are [C, M/G, (kd,) (kh,) kw]; output_padding grows the far edge."""
    g = _spatial(node)
    op = node.attrs["output_padding"]
    opd, oph, opw = [0] * (3 - len(op)) + list(op)
    g["M"] = node.inputs[1].type.shape[1] * g["G"]
    g["OD"] = (g["D"] - 1) * g["sd"] - g["pd"] - g["pdb"] + g["dd"] * (g["kd"] - 1) + 1 + opd
    g["OH"] = (g["H"] - 1) * g["sh"] - g["pt"] - g["pb"] + g["dh"] * (g["kh"] - 1) + 1 + oph
    g["OW"] = (g["W"] - 1) * g["sw"] - g["pl"] - g["pr"] + g["dw"] * (g["kw"] - 1) + 1 + opw
    return g


def _deconv_infer(node: Node) -> list[TensorType]:
    x, w = node.inputs[0].type, node.inputs[1].type
    if len(x.shape) not in (3, 4, 5) or len(w.shape) != len(x.shape):
        raise ShapeError(f"{node.name}: conv_transpose needs NCL, NCHW or NCDHW input, got {x.shape} "
                         f"with weights {w.shape}")
    g = deconv_geometry(node)
    if g["C"] != w.shape[0] or g["C"] % g["G"]:
        raise ShapeError(f"{node.name}: conv_transpose channels {x.shape[1]} / weights {w.shape} / "
                         f"group {g['G']}")
    if min(g["OD"], g["OH"], g["OW"]) <= 0:
        raise ShapeError(f"{node.name}: conv_transpose output would be empty")
    spatial = (g["OD"], g["OH"], g["OW"])[5 - len(x.shape):]
    return [TensorType((g["N"], g["M"], *spatial), "float32")]


def _deconv_rows(g: dict[str, int]) -> int:
    """Column rows per input pixel and group: one per output channel and filter tap."""
    return g["M"] // g["G"] * g["kd"] * g["kh"] * g["kw"]


def deconv_chunk(g: dict[str, int]) -> int:
    """Input pixels per chunk: packed panels (C/G per pixel) plus columns (``_deconv_rows`` per pixel)."""
    per_pixel = g["C"] // g["G"] + _deconv_rows(g)
    chunk = max(8, SCRATCH_FLOATS // per_pixel // 8 * 8)
    return min(chunk, -(-g["D"] * g["H"] * g["W"] // 8) * 8)


def _deconv_scratch(node: Node) -> int:
    if not node.inputs[1].is_const:
        return 0
    g = deconv_geometry(node)
    return (g["C"] // g["G"] + _deconv_rows(g)) * deconv_chunk(g) * 4


def deconv_kernel(node: Node, g: dict[str, int]) -> str:
    """Grammar name: ``f32-deconv-<kh>x<kw>s<stride>`` (1D/2D), ``f32-deconv3d-<kd>x<kh>x<kw>s<strides>``."""
    if len(node.inputs[0].type.shape) < 5:
        return f"f32-deconv-{kernel_tile(g)}"
    strides = {g["sd"], g["sh"], g["sw"]}
    stride = f"{g['sd']}" if len(strides) == 1 else f"{g['sd']}x{g['sh']}x{g['sw']}"
    return f"f32-deconv3d-{g['kd']}x{g['kh']}x{g['kw']}s{stride}"


def _deconv_emit(node: Node, ctx: EmitContext) -> str:
    g = deconv_geometry(node)
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if not w.is_const:
        ctx.use_kernel("f32-deconv-rt-4")
        return runtime_call("f32_deconv_rt", node, g, ctx)
    bias = ctx.ptr(node.inputs[2]) if len(node.inputs) > 2 else "0"
    # [C, M/G, taps...] = [G, C/G, R] -> [G, R, C/G]: the GEMM's row-major A operand per group
    wt = w.const.astype(np.float32).reshape(g["G"], g["C"] // g["G"], -1).transpose(0, 2, 1)
    ctx.use_kernel(deconv_kernel(node, g))
    shape = [g[k] for k in ("N", "C", "D", "H", "W")]
    geometry = [g[k] for k in ("M", "OD", "OH", "OW", "G", "kd", "kh", "kw", "sd", "sh", "sw", "dd", "dh",
                               "dw", "pd", "pt", "pl")]
    args = [ctx.ptr(x), *shape, ctx.weight(np.ascontiguousarray(wt)), bias, ctx.ptr(y), *geometry,
            deconv_chunk(g), ctx.scratch(), act_c(node)]
    return f"f32_deconv({', '.join(map(str, args))});"


register(OpDef("conv_transpose", _deconv_infer, None, _deconv_emit,
               kernels=("f32-gemm", "f32-deconv", "f32-conv-rt"),
               scratch=_deconv_scratch, dtypes=F32))
