"""Quantized builds of a real trained model: a small CNN trained (numpy, seeded, a few seconds) on
scikit-learn's digits, exported with onnx.helper, built at every precision and scored on the held-out
split. Accuracy numbers are deterministic, so they are asserted; timings are not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel
from cuvil_edge.quant import PRECISIONS

pytestmark = pytest.mark.integration
sklearn_datasets = pytest.importorskip("sklearn.datasets")

BATCH = 1


def _im2col(x: np.ndarray, k: int, stride: int, pad: int) -> tuple[np.ndarray, int]:
    n, c, h, _ = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - k) // stride + 1
    cols = np.stack([xp[:, :, i:i + stride * oh:stride, j:j + stride * oh:stride]
                     for i in range(k) for j in range(k)], axis=2)  # n, c, k*k, oh, ow
    return cols.reshape(n, c * k * k, oh * oh), oh


def _col2im(dcols: np.ndarray, shape: tuple[int, ...], k: int, stride: int, pad: int, oh: int) -> np.ndarray:
    n, c, h, w = shape
    dx = np.zeros((n, c, h + 2 * pad, w + 2 * pad), np.float32)
    d = dcols.reshape(n, c, k * k, oh, oh)
    for t, (i, j) in enumerate((i, j) for i in range(k) for j in range(k)):
        dx[:, :, i:i + stride * oh:stride, j:j + stride * oh:stride] += d[:, :, t]
    return dx[:, :, pad:pad + h, pad:pad + w]


CONVS = ((1, 8, 1), (8, 16, 2))  # (in, out, stride), 3x3, pad 1: 8x8 -> 8x8 -> 4x4
FCS = ((256, 32), (32, 10))


def train(x: np.ndarray, y: np.ndarray, epochs: int = 12, seed: int = 0) -> dict[str, np.ndarray]:
    """Plain SGD with momentum on cross-entropy; returns the parameters."""
    rng = np.random.default_rng(seed)
    p: dict[str, np.ndarray] = {}
    for i, (ci, co, _) in enumerate(CONVS):
        p[f"cw{i}"] = (rng.standard_normal((co, ci, 3, 3)) * np.sqrt(2 / (ci * 9))).astype(np.float32)
        p[f"cb{i}"] = np.zeros(co, np.float32)
    for i, (fi, fo) in enumerate(FCS):
        p[f"fw{i}"] = (rng.standard_normal((fi, fo)) * np.sqrt(2 / fi)).astype(np.float32)
        p[f"fb{i}"] = np.zeros(fo, np.float32)
    vel = {k: np.zeros_like(v) for k, v in p.items()}
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for s in range(0, len(x), 32):
            xb, yb = x[order[s:s + 32]], y[order[s:s + 32]]
            grads = _backprop(p, xb, yb)
            for k in p:
                vel[k] = 0.9 * vel[k] - 0.05 * grads[k]
                p[k] += vel[k]
    return p


def _backprop(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    acts, cache = x, []
    for i, (_, co, st) in enumerate(CONVS):
        cols, oh = _im2col(acts, 3, st, 1)
        z = np.einsum("ok,nkp->nop", p[f"cw{i}"].reshape(co, -1), cols) + p[f"cb{i}"][:, None]
        cache.append((acts.shape, cols, oh, z))
        acts = np.maximum(z, 0).reshape(len(x), co, oh, oh)
    h = acts.reshape(len(x), -1)
    fc_in = []
    for i in range(len(FCS)):
        fc_in.append(h)
        h = h @ p[f"fw{i}"] + p[f"fb{i}"]
        if i < len(FCS) - 1:
            h = np.maximum(h, 0)
    e = np.exp(h - h.max(1, keepdims=True))
    d = e / e.sum(1, keepdims=True)
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    g: dict[str, np.ndarray] = {}
    for i in reversed(range(len(FCS))):
        g[f"fw{i}"], g[f"fb{i}"] = fc_in[i].T @ d, d.sum(0)
        d = d @ p[f"fw{i}"].T
        if i > 0:
            d = d * (fc_in[i] > 0)
    d = d.reshape(len(x), CONVS[-1][1], -1) * (cache[-1][3] > 0)
    for i in reversed(range(len(CONVS))):
        shape, cols, oh, _ = cache[i]
        co = CONVS[i][1]
        g[f"cw{i}"] = np.einsum("nop,nkp->ok", d, cols).reshape(p[f"cw{i}"].shape)
        g[f"cb{i}"] = d.sum((0, 2))
        if i > 0:
            dcols = np.einsum("ok,nop->nkp", p[f"cw{i}"].reshape(co, -1), d)
            d = _col2im(dcols, shape, 3, CONVS[i][2], 1, oh).reshape(len(x), shape[1], -1)
            d = d * (cache[i - 1][3] > 0)
    return g


def export(p: dict[str, np.ndarray]) -> onnx.ModelProto:
    nodes, x = [], "x"
    for i, (_, _, st) in enumerate(CONVS):
        nodes += [helper.make_node("Conv", [x, f"cw{i}", f"cb{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                   strides=[st, st]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    nodes.append(helper.make_node("Flatten", [x], ["h"]))
    x = "h"
    for i in range(len(FCS)):
        out = "logits" if i == len(FCS) - 1 else f"f{i}"
        nodes += [helper.make_node("MatMul", [x, f"fw{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"fb{i}"], [out if i == len(FCS) - 1 else f"a{i}"])]
        if i < len(FCS) - 1:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [out]))
        x = out
    graph = helper.make_graph(nodes, "digits_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, 10])],
                              [numpy_helper.from_array(v, k) for k, v in p.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def digits():
    data = sklearn_datasets.load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    y = data.target
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    train_idx, test_idx = order[:1400], order[1400:]
    params = train(x[train_idx], y[train_idx])
    calib = [x[i][None] for i in train_idx[:128]]
    return export(params), x[test_idx], y[test_idx], calib


def accuracy(model: CuvilModel, x: np.ndarray, y: np.ndarray) -> float:
    pred = [int(model.predict(xi[None])["logits"].argmax()) for xi in x]
    return float(np.mean(np.array(pred) == y))


def test_precisions_on_trained_cnn(digits, tmp_path):
    proto, x, y, calib = digits
    acc = {}
    for precision in PRECISIONS:
        with CuvilModel.load(proto) as m:
            m.optimize(precision, calibration=calib, accuracy_budget=0.02)
            acc[precision] = accuracy(m, x, y)
            if precision != "fp32":
                rec = m.compiled.spec.extra["quantization"]
                assert rec["precision"] == precision and len(rec["layers"]) == 4
            if precision == "mixed":
                choices = {r["name"]: r["choice"] for r in rec["layers"]}
                assert all(r["sensitivity"] for r in rec["layers"])
                m.save(tmp_path / "mixed")
    print("held-out top-1:", acc)
    assert acc["fp32"] > 0.9
    assert acc["fp16"] >= acc["fp32"] - 0.005
    assert acc["int8"] >= acc["fp32"] - 0.01
    assert acc["int8-dynamic"] >= acc["fp32"] - 0.01
    assert acc["int4"] >= acc["fp32"] - 0.02
    assert acc["mixed"] >= acc["fp32"] - 0.02
    assert set(choices.values()) - {"fp32"}, "mixed should quantize something"
