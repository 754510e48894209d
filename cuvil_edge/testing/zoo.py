"""A model zoo of seeded ONNX nets built with ``onnx.helper`` (no downloads): the shapes real edge
models have, small enough to build and run in seconds. The demo, the tests and the benchmarks use it.

Every builder takes ``weights_as`` ("initializer" or "constant": weights as graph initializers or as
``Constant`` nodes, the two ways exporters store them) and ``batch``, and returns a checked
``onnx.ModelProto``. Weights are He-scaled so activations stay O(1) through the net and an absolute
tolerance means the same thing at every depth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WEIGHTS_AS = ("initializer", "constant")
OPSET = 17


class NetBuilder:
    """Accumulates nodes and weights; each layer method returns the name of its output tensor."""

    def __init__(self, name: str, weights_as: str = "initializer", seed: int = 0) -> None:
        if weights_as not in WEIGHTS_AS:
            raise ValueError(f"weights_as must be one of {WEIGHTS_AS}, got {weights_as!r}")
        self.name, self.weights_as = name, weights_as
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}

    def fresh(self, prefix: str) -> str:
        """A unique tensor/node name, readable in error messages and kernel tables."""
        i = self._count.get(prefix, 0)
        self._count[prefix] = i + 1
        return f"{prefix}{i}"

    def const(self, array: np.ndarray, prefix: str = "w") -> str:
        """Store ``array`` the way ``weights_as`` says and return its tensor name."""
        name = self.fresh(prefix)
        tensor = numpy_helper.from_array(np.asarray(array), name)
        if self.weights_as == "initializer":
            self.initializers.append(tensor)
        else:
            self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}/const", value=tensor))
        return name

    def op(self, op_type: str, inputs: Sequence[str], name: str | None = None, **attrs: object) -> str:
        name = name or self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name

    # -- layers -------------------------------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, k: int | Sequence[int], stride: int = 1, dilation: int = 1,
             group: int = 1, pad: int | None = None, bias: bool = True, name: str | None = None) -> str:
        """2D conv for an int or 2-tuple ``k``, 1D conv for a 1-tuple; "same"-style pads by default."""
        ks = [k, k] if isinstance(k, int) else list(k)
        p = [dilation * (kk - 1) // 2 for kk in ks] if pad is None else [pad] * len(ks)
        fan_in = cin // group * int(np.prod(ks))
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // group, *ks)).astype(np.float32)
        ins = [x, self.const(w)]
        if bias:
            ins.append(self.const(self.rng.normal(0, 0.1, cout).astype(np.float32), "b"))
        return self.op("Conv", ins, name, kernel_shape=ks, strides=[stride] * len(ks),
                       dilations=[dilation] * len(ks), pads=p + p, group=group)

    def conv_transpose(self, x: str, cin: int, cout: int, k: int, stride: int) -> str:
        w = self.rng.normal(0, np.sqrt(2.0 / (cin * k * k)), (cin, cout, k, k)).astype(np.float32)
        b = self.rng.normal(0, 0.1, cout).astype(np.float32)
        return self.op("ConvTranspose", [x, self.const(w), self.const(b, "b")], kernel_shape=[k, k],
                       strides=[stride, stride])

    def bn(self, x: str, c: int) -> str:
        r = self.rng
        params = [r.uniform(0.5, 1.5, c), r.normal(0, 0.1, c), r.normal(0, 0.1, c), r.uniform(0.5, 1.5, c)]
        return self.op("BatchNormalization", [x, *(self.const(p.astype(np.float32), "bn") for p in params)],
                       epsilon=1e-5)

    def conv_bn(self, x: str, cin: int, cout: int, k: int | Sequence[int], act: str | None = "Relu",
                **conv: object) -> str:
        """Conv (no bias, as exporters write it before BN) + BN + optional activation."""
        y = self.bn(self.conv(x, cin, cout, k, bias=False, **conv), cout)
        return self.act(y, act) if act else y

    def act(self, x: str, kind: str) -> str:
        if kind == "Relu6":
            return self.op("Clip", [x, self.const(np.float32(0), "lo"), self.const(np.float32(6), "hi")])
        return self.op(kind, [x])

    def gemm(self, x: str, n_in: int, n_out: int, act: str | None = None) -> str:
        w = self.rng.normal(0, np.sqrt(2.0 / n_in), (n_out, n_in)).astype(np.float32)
        b = self.rng.normal(0, 0.1, n_out).astype(np.float32)
        y = self.op("Gemm", [x, self.const(w), self.const(b, "b")], transB=1)
        return self.act(y, act) if act else y

    def head(self, x: str, c: int, classes: int) -> str:
        """Global average pool, flatten, classifier: the end of every classification net here."""
        return self.gemm(self.op("Flatten", [self.op("GlobalAveragePool", [x])]), c, classes)

    def build(self, inputs: Sequence[tuple[str, Sequence[int | str]]], output: str,
              out_shape: Sequence[int], opset: int = OPSET) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(out_shape))],
            initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="cuvil-edge-tests")
        model.ir_version = 8  # readable by every onnxruntime the project supports
        onnx.checker.check_model(model, full_check=True)
        return model


# -- the nets ---------------------------------------------------------------------------------
def mlp(weights_as: str = "initializer", batch: int = 1) -> onnx.ModelProto:
    """784-512-256-10, Gemm + Relu: the MatMul-bound case (batch 1 is a GEMV)."""
    b = NetBuilder("mlp", weights_as)
    h = b.gemm(b.gemm("x", 784, 512, "Relu"), 512, 256, "Relu")
    return b.build([("x", [batch, 784])], b.gemm(h, 256, 10), [batch, 10])


def _basic_block(b: NetBuilder, x: str, cin: int, cout: int, stride: int) -> str:
    y = b.conv_bn(x, cin, cout, 3, stride=stride)
    y = b.conv_bn(y, cout, cout, 3, act=None)
    short = x if stride == 1 and cin == cout else b.conv_bn(x, cin, cout, 1, act=None, stride=stride)
    return b.op("Relu", [b.op("Add", [y, short])])


def resnet(weights_as: str = "initializer", batch: int = 1, size: int = 64) -> onnx.ModelProto:
    """Stem conv+BN+relu, maxpool, two identity blocks, one strided block with a 1x1 shortcut, head."""
    b = NetBuilder("resnet", weights_as)
    y = b.conv_bn("x", 3, 16, 3, stride=2)
    y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = _basic_block(b, y, 16, 16, 1)
    y = _basic_block(b, y, 16, 16, 1)
    y = _basic_block(b, y, 16, 32, 2)
    return b.build([("x", [batch, 3, size, size])], b.head(y, 32, 10), [batch, 10])


#: ONNX node names of MobileNet's depthwise convs start with this (the kernel-choice test finds them)
DW_PREFIX = "dw"


def _squeeze_excite(b: NetBuilder, x: str, c: int) -> str:
    s = b.op("GlobalAveragePool", [x])
    s = b.act(b.conv(s, c, c // 4, 1), "Relu")
    s = b.op("HardSigmoid", [b.conv(s, c // 4, c, 1)], alpha=1 / 6, beta=0.5)
    return b.op("Mul", [x, s])


def _inverted_residual(b: NetBuilder, x: str, cin: int, cout: int, expand: int, stride: int,
                       se: bool = False) -> str:
    mid = cin * expand
    y = b.conv_bn(x, cin, mid, 1, act="Relu6")
    y = b.conv_bn(y, mid, mid, 3, act="Relu6", stride=stride, group=mid, name=b.fresh(DW_PREFIX))
    if se:
        y = _squeeze_excite(b, y, mid)
    y = b.conv_bn(y, mid, cout, 1, act=None)
    return b.op("Add", [x, y]) if stride == 1 and cin == cout else y


def mobilenet(weights_as: str = "initializer", batch: int = 1, size: int = 64) -> onnx.ModelProto:
    """MobileNetV2/V3 mix: HardSwish stem, inverted residuals (ReLU6 Clip, depthwise s1/s2), SE block."""
    b = NetBuilder("mobilenet", weights_as)
    y = b.conv_bn("x", 3, 16, 3, act="HardSwish", stride=2)
    y = _inverted_residual(b, y, 16, 16, 4, 1)
    y = _inverted_residual(b, y, 16, 24, 4, 2)
    y = _inverted_residual(b, y, 24, 24, 4, 1, se=True)
    y = _inverted_residual(b, y, 24, 32, 4, 2, se=True)
    y = b.conv_bn(y, 32, 64, 1, act="HardSwish")
    return b.build([("x", [batch, 3, size, size])], b.head(y, 64, 10), [batch, 10])


def _resize(b: NetBuilder, x: str, scale: float, mode: str) -> str:
    scales = b.const(np.array([1, 1, scale, scale], np.float32), "scales")
    return b.op("Resize", [x, "", scales], mode=mode)


def unet(weights_as: str = "initializer", batch: int = 1, size: int = 64) -> onnx.ModelProto:
    """Two-level encoder/decoder: ConvTranspose and nearest Resize up-paths with skip Concats, and a
    bilinear-Resize side branch from the bottleneck added to the last decoder stage."""
    b = NetBuilder("unet", weights_as)
    e1 = b.act(b.conv(b.act(b.conv("x", 3, 8, 3), "Relu"), 8, 8, 3), "Relu")
    e2 = b.act(b.conv(b.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]), 8, 16, 3), "Relu")
    mid = b.act(b.conv(b.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]), 16, 32, 3), "Relu")
    d2 = b.op("Concat", [b.conv_transpose(mid, 32, 16, 2, 2), e2], axis=1)
    d2 = b.act(b.conv(d2, 32, 16, 3), "Relu")
    d1 = b.op("Concat", [_resize(b, d2, 2.0, "nearest"), e1], axis=1)
    d1 = b.act(b.conv(d1, 24, 8, 3), "Relu")
    side = b.conv(_resize(b, mid, 4.0, "linear"), 32, 8, 1)
    out = b.conv(b.op("Add", [d1, side]), 8, 2, 1)
    return b.build([("x", [batch, 3, size, size])], out, [batch, 2, size, size])


def audio(weights_as: str = "initializer", batch: int = 1, length: int = 16000) -> onnx.ModelProto:
    """Keyword-spotting style Conv1d stack: strided front end, dilated convs, BN + relu, pooled head."""
    b = NetBuilder("audio", weights_as)
    y = b.conv_bn("x", 1, 16, (10,), stride=5, pad=0)
    y = b.conv_bn(y, 16, 32, (3,), stride=2)
    y = b.conv_bn(y, 32, 32, (3,), dilation=2)
    y = b.conv_bn(y, 32, 48, (3,), stride=2, dilation=4)
    y = b.conv_bn(y, 48, 48, (3,), dilation=8)
    return b.build([("x", [batch, 1, length])], b.head(y, 48, 12), [batch, 12])


NETS: dict[str, Callable[..., onnx.ModelProto]] = {
    "mlp": mlp, "resnet": resnet, "mobilenet": mobilenet, "unet": unet, "audio": audio,
}
