"""Deployed-model shapes built with ``onnx.helper`` (no torch needed): a BERT/DistilBERT-style encoder,
a ViT-style image encoder, a CRNN text recogniser, a GRU keyword spotter with carried state and a
YOLO-style detector head. Weights are seeded random, scaled so activations stay O(1) through depth.

The graphs use the forms exporters write: decomposed LayerNorm and erf GELU (fused by the compiler's
pattern pass), Q/K/V head split by Reshape + Transpose, an additive attention mask from int64 ids.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    """Accumulates nodes and seeded initializers; names are unique by construction."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def const(self, array: np.ndarray, base: str = "c") -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def weight(self, *shape: int, scale: float | None = None) -> str:
        s = scale if scale is not None else 1 / math.sqrt(shape[0])
        return self.const((self.rng.standard_normal(shape) * s).astype(np.float32), "w")

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def f(self, x: float) -> str:
        return self.const(np.array(x, np.float32), "s")

    def shape(self, *dims: int) -> str:
        return self.const(np.array(dims, np.int64), "shape")

    def linear(self, x: str, k: int, n: int) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.weight(k, n)]), self.weight(n, scale=0.02)])

    def layernorm(self, x: str, n: int, decomposed: bool) -> str:
        gamma = self.const((1 + 0.1 * self.rng.standard_normal(n)).astype(np.float32), "gamma")
        beta = self.weight(n, scale=0.1)
        if not decomposed:
            return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)
        mean = self.op("ReduceMean", [x], axes=[-1])
        d = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [d, self.f(2.0)])], axes=[-1])
        norm = self.op("Div", [d, self.op("Sqrt", [self.op("Add", [var, self.f(1e-5)])])])
        return self.op("Add", [self.op("Mul", [norm, gamma]), beta])

    def gelu(self, x: str) -> str:
        e = self.op("Erf", [self.op("Div", [x, self.f(math.sqrt(2))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [e, self.f(1.0)])]), self.f(0.5)])

    def attention(self, x: str, seq: int, hidden: int, heads: int, mask: str | None) -> str:
        d = hidden // heads

        def split(v: str, perm: list[int]) -> str:
            return self.op("Transpose", [self.op("Reshape", [v, self.shape(1, seq, heads, d)])], perm=perm)

        q = split(self.linear(x, hidden, hidden), [0, 2, 1, 3])
        k = split(self.linear(x, hidden, hidden), [0, 2, 3, 1])
        v = split(self.linear(x, hidden, hidden), [0, 2, 1, 3])
        s = self.op("Div", [self.op("MatMul", [q, k]), self.f(math.sqrt(d))])
        if mask is not None:
            s = self.op("Add", [s, mask])
        ctx = self.op("MatMul", [self.op("Softmax", [s], axis=-1), v])
        merged = self.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        merged = self.op("Reshape", [merged, self.shape(1, seq, hidden)])
        return self.linear(merged, hidden, hidden)

    def model(
        self,
        inputs: list[onnx.ValueInfoProto],
        outputs: list[onnx.ValueInfoProto],
        name: str,
        opset: int = 17,
    ) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="cuvil-zoo")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def _vi(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def bert_encoder(
    layers: int = 6,
    hidden: int = 768,
    heads: int = 12,
    ffn: int = 3072,
    seq: int = 128,
    vocab: int = 1000,
    decomposed: bool = True,
    seed: int = 0,
) -> onnx.ModelProto:
    """DistilBERT-shaped encoder: ``input_ids``/``attention_mask`` int64 [1, seq] -> hidden states.

    Post-LN blocks (attention, FFN with erf GELU), learned positions, additive mask (1 - m) * -10000."""
    b = _Builder(seed)
    word = b.weight(vocab, hidden, scale=1.0)
    pos = b.weight(seq, hidden, scale=1.0)
    x = b.layernorm(b.op("Add", [b.op("Gather", [word, "input_ids"]), pos]), hidden, decomposed)
    m = b.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    m = b.op("Mul", [b.op("Sub", [b.f(1.0), m]), b.f(-10000.0)])
    mask = b.op("Reshape", [m, b.shape(1, 1, 1, seq)])
    for _ in range(layers):
        x = b.layernorm(b.op("Add", [x, b.attention(x, seq, hidden, heads, mask)]), hidden, decomposed)
        h = b.linear(b.gelu(b.linear(x, hidden, ffn)), ffn, hidden)
        x = b.layernorm(b.op("Add", [x, h]), hidden, decomposed)
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    ins = [_vi(n, TensorProto.INT64, [1, seq]) for n in ("input_ids", "attention_mask")]
    return b.model(ins, [_vi("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden])], "bert_encoder")


def bert_feeds(seq: int = 128, vocab: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
    """Random ids and a mask that pads the last quarter of the sequence."""
    rng = np.random.default_rng(seed)
    mask = np.ones((1, seq), np.int64)
    mask[:, seq - seq // 4 :] = 0
    return {"input_ids": rng.integers(0, vocab, (1, seq)).astype(np.int64), "attention_mask": mask}


def vit_encoder(
    layers: int = 12,
    image: int = 224,
    patch: int = 16,
    hidden: int = 192,
    heads: int = 3,
    mlp: int = 768,
    classes: int = 1000,
    seed: int = 0,
) -> onnx.ModelProto:
    """ViT-tiny-shaped classifier: patchify conv, class token, learned positions, pre-LN blocks."""
    b = _Builder(seed)
    n = (image // patch) ** 2
    seq = n + 1
    x = b.op(
        "Conv",
        [
            "pixel_values",
            b.weight(hidden, 3, patch, patch, scale=1 / (patch * math.sqrt(3))),
            b.weight(hidden, scale=0.02),
        ],
        strides=[patch, patch],
    )
    x = b.op("Transpose", [b.op("Reshape", [x, b.shape(1, hidden, n)])], perm=[0, 2, 1])
    x = b.op("Concat", [b.weight(1, 1, hidden, scale=1.0), x], axis=1)
    x = b.op("Add", [x, b.weight(1, seq, hidden, scale=0.1)])
    for _ in range(layers):
        x = b.op("Add", [x, b.attention(b.layernorm(x, hidden, True), seq, hidden, heads, None)])
        h = b.linear(b.gelu(b.linear(b.layernorm(x, hidden, False), hidden, mlp)), mlp, hidden)
        x = b.op("Add", [x, h])
    cls = b.op("Gather", [b.layernorm(x, hidden, False), b.const(np.array(0, np.int64), "cls")], axis=1)
    b.nodes.append(
        helper.make_node("Gemm", [cls, b.weight(hidden, classes), b.weight(classes, scale=0.02)], ["logits"])
    )
    return b.model(
        [_vi("pixel_values", TensorProto.FLOAT, [1, 3, image, image])],
        [_vi("logits", TensorProto.FLOAT, [1, classes])],
        "vit_encoder",
    )


def _rnn_weights(b: _Builder, dirs: int, gates: int, hidden: int, inp: int) -> list[str]:
    s = 1 / math.sqrt(hidden)
    return [
        b.weight(dirs, gates * hidden, inp, scale=s),
        b.weight(dirs, gates * hidden, hidden, scale=s),
        b.weight(dirs, 2 * gates * hidden, scale=s),
    ]


def crnn(
    height: int = 32, width: int = 100, hidden: int = 64, classes: int = 37, seed: int = 0
) -> onnx.ModelProto:
    """CRNN text recogniser: conv/relu/pool x2, columns as time steps, bidirectional LSTM, linear
    classifier, log-softmax per step: ``image`` [1, 1, H, W] -> ``log_probs`` [W/4, 1, classes]."""
    b = _Builder(seed)
    x = "image"
    for cin, cout in ((1, 32), (32, 64)):
        x = b.op(
            "Conv",
            [x, b.weight(cout, cin, 3, 3, scale=math.sqrt(2 / (9 * cin))), b.weight(cout, scale=0.02)],
            pads=[1, 1, 1, 1],
        )
        x = b.op("MaxPool", [b.op("Relu", [x])], kernel_shape=[2, 2], strides=[2, 2])
    t, feat = width // 4, 64 * (height // 4)
    seq = b.op("Transpose", [b.op("Reshape", [x, b.shape(1, feat, t)])], perm=[2, 0, 1])  # [T, 1, feat]
    y = b.op(
        "LSTM",
        [seq, *_rnn_weights(b, 2, 4, hidden, feat)],
        n_out=3,
        hidden_size=hidden,
        direction="bidirectional",
    )[0]
    y = b.op("Reshape", [b.op("Transpose", [y], perm=[0, 2, 1, 3]), b.shape(t, 1, 2 * hidden)])
    b.nodes.append(helper.make_node("LogSoftmax", [b.linear(y, 2 * hidden, classes)], ["log_probs"], axis=-1))
    return b.model(
        [_vi("image", TensorProto.FLOAT, [1, 1, height, width])],
        [_vi("log_probs", TensorProto.FLOAT, [t, 1, classes])],
        "crnn",
    )


def gru_kws(
    frames: int = 49, features: int = 40, hidden: int = 64, keywords: int = 12, seed: int = 0
) -> onnx.ModelProto:
    """Streaming GRU keyword spotter: ``features`` [T, 1, F] and carried ``state_in`` [1, 1, H] ->
    ``logits`` [1, keywords] and ``state_out`` (feed it back as the next call's ``state_in``)."""
    b = _Builder(seed)
    _, h = b.op(
        "GRU",
        ["features", *_rnn_weights(b, 1, 3, hidden, features), "", "state_in"],
        n_out=2,
        hidden_size=hidden,
        linear_before_reset=1,
    )
    last = b.op("Reshape", [h, b.shape(1, hidden)])
    b.nodes.append(
        helper.make_node(
            "Gemm", [last, b.weight(hidden, keywords), b.weight(keywords, scale=0.02)], ["logits"]
        )
    )
    b.nodes.append(helper.make_node("Identity", [h], ["state_out"]))
    return b.model(
        [
            _vi("features", TensorProto.FLOAT, [frames, 1, features]),
            _vi("state_in", TensorProto.FLOAT, [1, 1, hidden]),
        ],
        [
            _vi("logits", TensorProto.FLOAT, [1, keywords]),
            _vi("state_out", TensorProto.FLOAT, [1, 1, hidden]),
        ],
        "gru_kws",
    )


def yolo_head(classes: int = 20, anchors: int = 3, seed: int = 0) -> onnx.ModelProto:
    """YOLOv5-style detect head on two feature maps (stride 8 and 16): 1x1 conv, reshape/transpose to
    [A, H, W, 5 + classes], sigmoid, split xy/wh/conf, decode with grid and anchors, concat scales."""
    b = _Builder(seed)
    no = 5 + classes
    outs, inputs = [], []
    for name, (c, hw, stride) in {"p3": (64, 16, 8), "p4": (128, 8, 16)}.items():
        inputs.append(_vi(name, TensorProto.FLOAT, [1, c, hw, hw]))
        x = b.op("Conv", [name, b.weight(anchors * no, c, 1, 1), b.weight(anchors * no, scale=0.1)])
        x = b.op("Transpose", [b.op("Reshape", [x, b.shape(1, anchors, no, hw, hw)])], perm=[0, 1, 3, 4, 2])
        xy, wh, conf = b.op(
            "Split", [b.op("Sigmoid", [x]), b.const(np.array([2, 2, no - 4], np.int64))], n_out=3, axis=-1
        )
        gy, gx = np.meshgrid(np.arange(hw), np.arange(hw), indexing="ij")
        grid = np.stack([gx, gy], -1).reshape(1, 1, hw, hw, 2).astype(np.float32) - 0.5
        xy = b.op(
            "Mul", [b.op("Add", [b.op("Mul", [xy, b.f(2.0)]), b.const(grid, "grid")]), b.f(float(stride))]
        )
        anchor = (np.array([[10, 13], [16, 30], [33, 23]], np.float32) * stride / 8).reshape(
            1, anchors, 1, 1, 2
        )
        wh = b.op("Mul", [b.op("Pow", [b.op("Mul", [wh, b.f(2.0)]), b.f(2.0)]), b.const(anchor, "anchor")])
        det = b.op("Concat", [xy, wh, conf], axis=-1)
        outs.append(b.op("Reshape", [det, b.shape(1, anchors * hw * hw, no)]))
    b.nodes.append(helper.make_node("Concat", outs, ["detections"], axis=1))
    total = anchors * (16 * 16 + 8 * 8)
    return b.model(inputs, [_vi("detections", TensorProto.FLOAT, [1, total, no])], "yolo_head")
