"""Convolution family (NCHW): ``conv`` (1D/2D, groups, strides, dilations, explicit pads, fused act).

Kernel choice is made here, once per node, from its shape: im2col-in-panels + GEMM in general,
the direct depthwise kernel when every group has one input and one output channel.
"""

from __future__ import annotations

import numpy as np

from ..codegen.emit import EmitContext
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import act_c
from .registry import OpDef, register

SCRATCH_FLOATS = 131072  # 512 KiB of packed im2col panels per chunk of output pixels


def conv_geometry(node: Node) -> dict[str, int]:
    """Normalise 1D/2D conv attrs to 2D numbers (1D runs with H = 1)."""
    x, w = node.inputs[0].type.shape, node.inputs[1].type.shape
    a = node.attrs
    two_d = len(x) == 4
    H, W = (x[2], x[3]) if two_d else (1, x[2])
    kh, kw = (w[2], w[3]) if two_d else (1, w[2])
    sh, sw = a["strides"] if two_d else (1, a["strides"][0])
    dh, dw = a["dilations"] if two_d else (1, a["dilations"][0])
    pads = a["pads"]  # ONNX order: begins then ends
    pt, pl, pb, pr = (pads[0], pads[1], pads[2], pads[3]) if two_d else (0, pads[0], 0, pads[1])
    OH = (H + pt + pb - dh * (kh - 1) - 1) // sh + 1
    OW = (W + pl + pr - dw * (kw - 1) - 1) // sw + 1
    return dict(N=x[0], C=x[1], H=H, W=W, M=w[0], G=a.get("group", 1), kh=kh, kw=kw, sh=sh, sw=sw,
                dh=dh, dw=dw, pt=pt, pl=pl, pb=pb, pr=pr, OH=OH, OW=OW)


def _infer(node: Node) -> list[TensorType]:
    x, w = node.inputs[0].type, node.inputs[1].type
    if len(x.shape) not in (3, 4) or len(w.shape) != len(x.shape):
        raise ShapeError(f"{node.name}: conv needs NCL or NCHW input, got {x.shape} with weights {w.shape}")
    g = conv_geometry(node)
    if g["C"] != w.shape[1] * g["G"] or g["M"] % g["G"]:
        raise ShapeError(f"{node.name}: conv channels {x.shape[1]} / weights {w.shape} / group {g['G']}")
    if g["OH"] <= 0 or g["OW"] <= 0:
        raise ShapeError(f"{node.name}: conv output would be empty")
    shape = (g["N"], g["M"], g["OH"], g["OW"]) if len(x.shape) == 4 else (g["N"], g["M"], g["OW"])
    return [TensorType(shape, "float32")]


def is_depthwise(g: dict[str, int]) -> bool:
    return g["G"] == g["C"] and g["M"] == g["C"] and g["G"] > 1


def pixel_chunk(g: dict[str, int]) -> int:
    k = g["C"] // g["G"] * g["kh"] * g["kw"]
    p = g["OH"] * g["OW"]
    chunk = max(8, SCRATCH_FLOATS // max(k, 1) // 8 * 8)
    return min(chunk, -(-p // 8) * 8)


def _scratch(node: Node) -> int:
    g = conv_geometry(node)
    k = g["C"] // g["G"] * g["kh"] * g["kw"]
    return k * pixel_chunk(g) * 4


def _emit(node: Node, ctx: EmitContext) -> str:
    g = conv_geometry(node)
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    bias = ctx.ptr(node.inputs[2]) if len(node.inputs) > 2 else "0"
    wf = ctx.weight(w.const.astype(np.float32).reshape(g["M"], -1))
    chunk = pixel_chunk(g)
    ctx.use_kernel(f"f32-conv-im2col-gemm-{min(g['M'] // g['G'], 4)}x8")
    return (f"f32_conv2d({ctx.ptr(x)}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, {wf}, {bias}, {ctx.ptr(y)}, "
            f"{g['M']}, {g['OH']}, {g['OW']}, {g['G']}, {g['kh']}, {g['kw']}, {g['sh']}, {g['sw']}, "
            f"{g['dh']}, {g['dw']}, {g['pt']}, {g['pl']}, {chunk}, {ctx.scratch()}, {act_c(node)});")


register(OpDef("conv", _infer, None, _emit, kernels=("f32-gemm", "f32-conv"), scratch=_scratch))
