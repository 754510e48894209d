"""com.microsoft operators (what onnxruntime's transformer optimizer and quantization tools write), each
on a small graph compared with onnxruntime, and the variants refused by name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from cuvil_edge import CuvilModel
from cuvil_edge.errors import UnsupportedOperator
from cuvil_edge.frontend.onnx.importer import CONTRIB_OPS
from cuvil_edge.frontend.onnx.registry import CONTRIB_CONVERTERS, CONTRIB_DOMAIN
from tests.support.ort_check import check_with_ort, make_model

MS = CONTRIB_DOMAIN
rng = np.random.default_rng(0)


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def ms_model(nodes: Sequence[onnx.NodeProto], feeds: Mapping[str, np.ndarray], outputs: Sequence[str],
             inits: Mapping[str, Any] | None = None) -> onnx.ModelProto:
    """``make_model`` with the com.microsoft opset imported too."""
    model = make_model(nodes, feeds, outputs, inits)
    model.opset_import.append(helper.make_opsetid(MS, 1))
    return model


def check(nodes: Sequence[onnx.NodeProto], feeds: Mapping[str, np.ndarray], outputs: Sequence[str] = ("y",),
          inits: Mapping[str, Any] | None = None, **kw: Any):
    return check_with_ort(ms_model(nodes, feeds, outputs, inits), feeds, **kw)


def test_every_listed_contrib_op_has_a_converter() -> None:
    """The importer admits exactly the com.microsoft ops the contrib table converts."""
    assert {op for d, op in CONTRIB_OPS if d == MS} == set(CONTRIB_CONVERTERS)


# -- activations and matmul ---------------------------------------------------------------------------
@pytest.mark.parametrize("op, extra", [("Gelu", {}), ("BiasGelu", {"b": randn(16)}), ("FastGelu", {}),
                                       ("FastGelu", {"b": randn(16)}), ("QuickGelu", {}),
                                       ("QuickGelu", {"alpha": 1.0})])
def test_gelu_family(op: str, extra: dict[str, Any]) -> None:
    attrs = {k: v for k, v in extra.items() if k != "b"}
    node = helper.make_node(op, ["x", *(["b"] if "b" in extra else [])], ["y"], domain=MS, **attrs)
    check([node], {"x": randn(2, 3, 16, scale=3)}, inits={"b": extra["b"]} if "b" in extra else None)


def test_com_microsoft_and_default_gelu_in_one_model() -> None:
    """Same op type, two domains: the default one's ``approximate`` still holds beside the contrib one."""
    nodes = [helper.make_node("Gelu", ["x"], ["t"], approximate="tanh"),
             helper.make_node("Gelu", ["t"], ["y"], domain=MS)]
    feeds = {"x": randn(4, 8, scale=3)}
    model = make_model(nodes, feeds, ["y"], opset=20)
    model.opset_import.append(helper.make_opsetid(MS, 1))
    check_with_ort(model, feeds)


@pytest.mark.parametrize("trans_a, trans_b, alpha, const_b", [(0, 0, 1.0, True), (1, 1, 0.5, True),
                                                               (0, 1, 2.0, False), (1, 0, 1.0, False)])
def test_fused_matmul(trans_a: int, trans_b: int, alpha: float, const_b: bool) -> None:
    a = randn(2, 5, 6) if trans_a else randn(2, 6, 5)
    b = randn(7, 5) if trans_b else randn(5, 7)
    if not const_b:
        b = np.stack([b, b * 2])
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transA=trans_a, transB=trans_b,
                            alpha=alpha)
    feeds = {"a": a} if const_b else {"a": a, "b": b}
    check([node], feeds, inits={"b": b} if const_b else None)


# -- normalizations ---------------------------------------------------------------------------------
def test_skip_layer_norm_all_outputs() -> None:
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "beta", "bias"],
                            ["y", "mean", "inv_std", "sum"], domain=MS, epsilon=1e-5)
    inits = {"g": randn(16), "beta": randn(16), "bias": randn(16)}
    check([node], {"x": randn(2, 3, 16), "skip": randn(2, 3, 16)}, ["y", "mean", "inv_std", "sum"], inits)


def test_skip_layer_norm_broadcast_skip_without_beta() -> None:
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "g"], ["y"], domain=MS)
    check([node], {"x": randn(2, 3, 16), "skip": randn(3, 16)}, inits={"g": randn(16)})


def test_skip_simplified_layer_norm() -> None:
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "g", "bias"],
                            ["y", "", "", "sum"], domain=MS, epsilon=1e-6)
    check([node], {"x": randn(2, 3, 16), "skip": randn(2, 3, 16)}, ["y", "sum"],
          {"g": randn(16), "bias": randn(16)})


def test_simplified_layer_norm_default_domain() -> None:
    """onnxruntime's own default-domain op, which onnx's checker does not know."""
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], epsilon=1e-6)
    check([node], {"x": randn(2, 3, 16)}, inits={"g": randn(16)})


@pytest.mark.parametrize("segments, positions, mask", [(True, False, True), (False, True, False),
                                                       (True, True, True)])
def test_embed_layer_norm(segments: bool, positions: bool, mask: bool) -> None:
    b, s, hidden = 2, 5, 16
    feeds: dict[str, np.ndarray] = {"ids": rng.integers(0, 30, (b, s)).astype(np.int32)}
    inits = {"word": randn(30, hidden), "pos": randn(8, hidden), "seg": randn(2, hidden), "g": randn(hidden),
             "beta": randn(hidden)}
    if segments:
        feeds["segs"] = rng.integers(0, 2, (b, s)).astype(np.int32)
    if mask:
        feeds["mask"] = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    if positions:
        feeds["pos_ids"] = np.array([[4, 3, 2, 1, 0], [0, 1, 2, 3, 7]], np.int32)
    ins = ["ids", "segs" if segments else "", "word", "pos", "seg" if segments else "", "g", "beta",
           "mask" if mask else "", "pos_ids" if positions else ""]
    node = helper.make_node("EmbedLayerNormalization", ins, ["y", "mask_index", "sum"], domain=MS,
                            epsilon=1e-5)
    check([node], feeds, ["y", "mask_index", "sum"], inits)


# -- attention ----------------------------------------------------------------------------------------
B, S, HEADS, HEAD = 2, 6, 2, 4
D = HEADS * HEAD
MASKS = {"none": None, "lengths": np.array([4, 6], np.int32), "left": np.array([6, 6, 2, 0], np.int32),
         "raw": (rng.random((B, S)) > 0.3).astype(np.int32),
         "raw3d": (rng.random((B, S, S)) > 0.3).astype(np.int32)}


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("causal", [0, 1])
def test_attention(mask: str, causal: int) -> None:
    feeds = {"x": randn(B, S, 5)}
    if MASKS[mask] is not None:
        feeds["mask"] = MASKS[mask]
    node = helper.make_node("Attention", ["x", "w", "bias", "mask" if MASKS[mask] is not None else ""], ["y"],
                            domain=MS, num_heads=HEADS, unidirectional=causal)
    check([node], feeds, inits={"w": randn(5, 3 * D), "bias": randn(3 * D)})


def test_attention_sizes_scale_and_bias() -> None:
    """qkv_hidden_sizes with a wider V, an explicit scale, attention_bias and a filter value."""
    node = helper.make_node("Attention", ["x", "w", "", "mask", "", "attn_bias"], ["y"], domain=MS,
                            num_heads=2, qkv_hidden_sizes=[8, 8, 12], scale=0.3, mask_filter_value=-50.0)
    feeds = {"x": randn(B, S, 5), "mask": MASKS["raw"], "attn_bias": randn(B, 2, S, S)}
    check([node], feeds, inits={"w": randn(5, 28)})


@pytest.mark.parametrize("length, causal, mask", [(6, 0, "raw"), (3, 0, "lengths"), (6, 1, "none")])
def test_multi_head_attention(length: int, causal: int, mask: str) -> None:
    feeds = {"q": randn(B, S, D), "k": randn(B, length, D), "v": randn(B, length, 12)}
    if mask == "raw":
        feeds["mask"] = (rng.random((B, length)) > 0.3).astype(np.int32)
    elif mask == "lengths":
        feeds["mask"] = np.array([2, 3], np.int32)
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "bias", "mask" if mask != "none" else ""],
                            ["y"], domain=MS, num_heads=HEADS, unidirectional=causal)
    check([node], feeds, inits={"bias": randn(2 * D + 12)})


@pytest.mark.parametrize("packed", [False, True])
def test_group_query_attention_prompt(packed: bool) -> None:
    """4 query heads over 2 key/value heads; the first batch right-padded to 4 of 6 tokens."""
    heads, kv, head = 4, 2, 8  # onnxruntime's kernel takes head sizes in multiples of 8
    q, k, v = randn(B, S, heads * head), randn(B, S, kv * head), randn(B, S, kv * head)
    feeds = {"q": np.concatenate([q, k, v], -1)} if packed else {"q": q, "k": k, "v": v}
    feeds["seqlens_k"] = np.array([3, 5], np.int32)
    ins = ["q", "", ""] if packed else ["q", "k", "v"]
    node = helper.make_node("GroupQueryAttention", [*ins, "", "", "seqlens_k", "total"],
                            ["y", "present_k", "present_v"], domain=MS, num_heads=heads, kv_num_heads=kv)
    got = check([node], feeds, ["y", "present_k", "present_v"], {"total": np.array(S, np.int32)})
    assert got.want[0]["present_k"].shape == (B, kv, S, head)


@pytest.mark.parametrize("layout, interleaved, rotary, positions", [
    ("bsd", 0, 0, "ids"), ("bsd", 1, 0, "ids"), ("bnsh", 0, 0, "first"), ("bnsh", 1, 4, "ids"),
    ("bsd", 0, 4, "first")])
def test_rotary_embedding(layout: str, interleaved: int, rotary: int, positions: str) -> None:
    heads, head, max_pos = 2, 8, 16
    x = randn(B, S, heads * head) if layout == "bsd" else randn(B, heads, S, head)
    half = (rotary or head) // 2
    angles = np.arange(max_pos)[:, None] / 10000 ** (np.arange(half) / half)
    pos = rng.integers(0, max_pos, (B, S)) if positions == "ids" else np.array([3])
    attrs = {"interleaved": interleaved, "num_heads": heads if layout == "bsd" or rotary else 0,
             "rotary_embedding_dim": rotary}
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)
    check([node], {"x": x, "pos": pos.astype(np.int64)},
          inits={"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)})


# -- quantized ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, per_column, bias", [(np.int8, True, True), (np.uint8, False, False)])
def test_dynamic_quantize_matmul(dtype: type, per_column: bool, bias: bool) -> None:
    info = np.iinfo(dtype)
    w = rng.integers(info.min, info.max + 1, (12, 5)).astype(dtype)
    n = 5 if per_column else 1
    inits = {"w": w, "w_scale": (rng.random(n) * 0.02 + 0.01).astype(np.float32),
             "w_zp": rng.integers(info.min // 4, info.max // 4, n).astype(dtype), "bias": randn(5)}
    node = helper.make_node("DynamicQuantizeMatMul", ["a", "w", "w_scale", "w_zp", "bias" if bias else ""],
                            ["y"], domain=MS)
    check([node], {"a": randn(3, 12)}, inits=inits)


def _quantized(op: str, n_inputs: int, dtype: type, attrs: Mapping[str, Any], shape: Sequence[int],
               y_scale: float = 0.05) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray], dict[str, Any]]:
    """Float inputs quantized (QuantizeLinear), ``op`` on them, its result dequantized: a float output, so
    a rounding step apart from onnxruntime is one ``y_scale``."""
    zp = np.array(3 if dtype == np.uint8 else -2, dtype)
    inits = {"s": np.float32(0.04), "zp": zp, "ys": np.float32(y_scale), "yzp": zp}
    nodes, feeds, qargs = [], {}, []
    for i in range(n_inputs):
        feeds[f"x{i}"] = randn(*shape)
        nodes.append(helper.make_node("QuantizeLinear", [f"x{i}", "s", "zp"], [f"q{i}"]))
        qargs.append([f"q{i}", "s", "zp"])
    if op == "QLinearConcat":
        ins = ["ys", "yzp", *(a for q in qargs for a in q)]
    elif op in ("QLinearAdd", "QLinearMul"):
        ins = [*qargs[0], *qargs[1], "ys", "yzp"]
    else:
        ins = [*qargs[0], "ys", "yzp"]
    nodes += [helper.make_node(op, ins, ["qy"], domain=MS, **attrs),
              helper.make_node("DequantizeLinear", ["qy", "ys", "yzp"], ["y"])]
    return nodes, feeds, inits


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op, n_inputs, attrs, shape", [
    ("QLinearAdd", 2, {}, (2, 3, 4, 4)), ("QLinearMul", 2, {}, (2, 3, 4, 4)),
    ("QLinearSigmoid", 1, {}, (2, 3, 4, 4)), ("QLinearLeakyRelu", 1, {"alpha": 0.2}, (2, 3, 4, 4)),
    ("QLinearConcat", 3, {"axis": 1}, (2, 3, 4, 4)),
    ("QLinearAveragePool", 1, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4}, (1, 3, 7, 7)),
    ("QLinearAveragePool", 1, {"kernel_shape": [2, 2], "channels_last": 1, "count_include_pad": 1},
     (1, 6, 6, 3)),
    ("QLinearGlobalAveragePool", 1, {}, (2, 3, 5, 5)),
    ("QLinearGlobalAveragePool", 1, {"channels_last": 1}, (2, 5, 5, 3)),
    ("QLinearSoftmax", 1, {"opset": 13, "axis": -1}, (2, 3, 10)),
    ("QLinearSoftmax", 1, {"opset": 12, "axis": 1}, (2, 3, 4))])
def test_qlinear(op: str, n_inputs: int, attrs: dict[str, Any], shape: tuple[int, ...], dtype: type) -> None:
    y_scale = 1 / 256 if op == "QLinearSoftmax" else 0.05
    nodes, feeds, inits = _quantized(op, n_inputs, dtype, attrs, shape, y_scale)
    check(nodes, feeds, inits=inits, atol=y_scale * 1.01)


# -- refused, by name ----------------------------------------------------------------------------------
@pytest.mark.parametrize("node, why", [
    (helper.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=2, past_present_share_buffer=1),
     r"past_present_share_buffer=1: a shared past/present buffer"),
    (helper.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=2, do_rotary=1), r"do_rotary=1"),
    (helper.make_node("FusedMatMul", ["x", "m"], ["y"], domain=MS, transBatchA=1), r"transBatchA=1"),
    (helper.make_node("FastGelu", ["x"], ["y"], domain=MS, mode=3), r"attribute mode is not supported"),
    (helper.make_node("RotaryEmbedding", ["x", "pos", "c", "c"], ["y"], domain=MS, is_packed_batching=1),
     r"is_packed_batching=1")])
def test_refused(node: onnx.NodeProto, why: str) -> None:
    feeds = {"x": randn(1, 4, 8)}
    inits = {"w": randn(8, 24), "m": randn(8, 8), "c": randn(8, 2), "pos": np.zeros((1, 4), np.int64)}
    model = ms_model([node], feeds, ["y"], {k: v for k, v in inits.items() if k in node.input})
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8]))
    with pytest.raises(UnsupportedOperator, match=rf"'com\.microsoft\.{node.op_type}' at node .*{why}"):
        CuvilModel.load(model)


def test_other_com_microsoft_op_refused() -> None:
    node = helper.make_node("QGemm", ["x", "x"], ["y"], domain=MS)
    model = ms_model([node], {"x": randn(2, 2)}, ["y"])
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 2]))
    with pytest.raises(UnsupportedOperator, match=r"com\.microsoft\.QGemm.*custom-domain"):
        CuvilModel.load(model)
