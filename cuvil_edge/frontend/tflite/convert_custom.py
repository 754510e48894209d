"""Converters for custom ops that real models ship with (registered in the custom-op table by their
custom code): MediaPipe's ``Convolution2DTransposeBias`` (selfie segmentation, hair segmentation),
which LiteRT runs through its XNNPACK delegate."""

from __future__ import annotations

import struct

from .convert_nn import SAME, VALID, deconv
from .registry import TflContext, custom_converter

#: TfLitePadding (the C enum in custom options) -> the flatbuffer Padding enum
_C_PADDING = {1: SAME, 2: VALID}


@custom_converter("Convolution2DTransposeBias")
def convolution2d_transpose_bias(ctx: TflContext) -> None:
    """Inputs x, weights [O, KH, KW, I], bias; the options are a raw ``TfLiteTransposeConvParams``
    (padding, stride_w, stride_h as int32); the output size is the output tensor's."""
    if len(ctx.op.custom_options) < 12:
        raise ctx.unsupported(f"custom options of {len(ctx.op.custom_options)} bytes, want 12")
    padding, stride_w, stride_h = struct.unpack_from("<3i", ctx.op.custom_options)
    if padding not in _C_PADDING:
        raise ctx.unsupported(f"padding {padding}")
    out_shape = list(ctx.sg.tensors[ctx.op.outputs[0]].shape)
    if len(out_shape) != 4:
        raise ctx.unsupported(f"output shape {out_shape} is not NHWC")
    deconv(ctx, x=0, w=1, bias=2, out_shape=out_shape, strides=[stride_h, stride_w],
           padding=_C_PADDING[padding])
