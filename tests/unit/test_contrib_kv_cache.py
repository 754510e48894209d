"""Key/value caches of the com.microsoft attention ops, with static shapes: a prefill step, then decode
steps that feed the previous present back as past, each compared with onnxruntime (fp32, within 1e-4).
GroupQueryAttention's buffer-sharing form is checked against onnxruntime running it as onnxruntime-genai
does, each present bound to its past's buffer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import NotConstant, UnsupportedOperator
from cuvil_edge.frontend.onnx.registry import CONTRIB_DOMAIN as MS
from cuvil_edge.oracle import ort_session
from tests.support.ort_check import assert_outputs_close, check_with_ort, make_model

rng = np.random.default_rng(7)
B, HEADS, HEAD = 2, 2, 8
D = HEADS * HEAD
Step = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def randn(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def ms_model(node: onnx.NodeProto, feeds: Mapping[str, np.ndarray], outputs: Sequence[str],
             inits: Mapping[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """One com.microsoft node, its outputs typed from onnxruntime's results as an exporter would."""
    model = make_model([node], feeds, outputs, inits)
    model.opset_import.append(helper.make_opsetid(MS, 1))
    sess = ort_session(model)
    for out, value in zip(model.graph.output, sess.run(list(outputs), dict(feeds))):
        out.CopyFrom(helper.make_tensor_value_info(out.name, onnx.TensorProto.FLOAT, value.shape))
    return model


def ort_step(model: onnx.ModelProto, feed: Mapping[str, np.ndarray], shared: Mapping[str, str]
             ) -> dict[str, np.ndarray]:
    """onnxruntime's outputs; each output in ``shared`` (present -> past) is written into its past's own
    buffer (IOBinding), onnxruntime's past_present_share_buffer."""
    sess = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    if not shared:
        return dict(zip(names, sess.run(names, dict(feed))))
    io, buffers = sess.io_binding(), {}
    for name, value in feed.items():
        if name in shared.values():
            buffers[name] = ort.OrtValue.ortvalue_from_numpy(value.copy())
            io.bind_ortvalue_input(name, buffers[name])
        else:
            io.bind_cpu_input(name, value)
    for name in names:
        if name in shared:
            io.bind_ortvalue_output(name, buffers[shared[name]])
        else:
            io.bind_output(name)
    sess.run_with_iobinding(io)
    return dict(zip(names, io.copy_outputs_to_cpu()))


def check_steps(steps: Sequence[Step], carry: Mapping[str, str], shared: bool = False) -> None:
    """Run ``steps`` (a model and its feeds each) in order on onnxruntime and compiled here, each one's
    ``carry`` inputs (past -> the present output that feeds it) taken from the step before on the same
    side, and compare every output of every step."""
    theirs: dict[str, np.ndarray] = {}
    ours: dict[str, np.ndarray] = {}
    compiled: dict[int, CuvilModel] = {}
    with ExitStack() as stack:
        for i, (model, feed) in enumerate(steps):
            if id(model) not in compiled:
                compiled[id(model)] = stack.enter_context(CuvilModel.load(model).optimize(targets=[Target()]))
            past = [(p, o) for p, o in carry.items() if o in ours]
            want = ort_step(model, {**feed, **{p: theirs[o] for p, o in past}},
                            {o: p for p, o in carry.items()} if shared else {})
            got = compiled[id(model)].predict({**feed, **{p: ours[o] for p, o in past}})
            assert_outputs_close(got, want, what=f"step {i}")
            theirs, ours = want, got


# -- MultiHeadAttention and Attention: present = concat(past, new) ------------------------------------
def mha_step(s: int, past: int, mask: str) -> Step:
    """MultiHeadAttention (causal, packed bias) on ``s`` new tokens after ``past`` cached ones."""
    feeds = {"q": randn(B, s, D), "k": randn(B, s, D), "v": randn(B, s, D)}
    ins = ["q", "k", "v", "bias", "", "", "past_k" if past else "", "past_v" if past else ""]
    if past:
        feeds |= {"past_k": randn(B, HEADS, past, HEAD), "past_v": randn(B, HEADS, past, HEAD)}
    if mask == "raw":
        feeds["mask"] = (rng.random((B, past + s)) > 0.3).astype(np.int32)
        feeds["mask"][:, 0] = 1
    elif mask == "lengths":
        feeds["mask"] = np.array([past + s, past + s - 2], np.int32)
    ins[4] = "mask" if mask != "none" else ""
    node = helper.make_node("MultiHeadAttention", ins, ["y", "present_k", "present_v"], domain=MS,
                            num_heads=HEADS, unidirectional=1)
    return ms_model(node, feeds, ["y", "present_k", "present_v"], {"bias": randn(3 * D)}), feeds


@pytest.mark.parametrize("mask", ["none", "raw", "lengths"])
def test_multi_head_attention_prefill_then_decode(mask: str) -> None:
    """A 4-token prompt, then two tokens at once (causal among themselves) over the 4 cached."""
    prefill, decode = mha_step(4, 0, "none"), mha_step(2, 4, mask)
    check_steps([prefill, decode], {"past_k": "present_k", "past_v": "present_v"})


WEIGHTS, BIAS = randn(6, 3 * D), randn(3 * D)  # one GPT-2 layer's, shared by its steps


def attention_step(s: int, past: int) -> Step:
    """GPT-2's Attention (packed weights, causal) on ``s`` new tokens after ``past`` cached ones, the
    mask over all of them."""
    feeds = {"x": randn(B, s, 6), "mask": np.ones((B, past + s), np.int32)}
    feeds["mask"][1, :2] = 0  # the second row left-padded
    if past:
        feeds["past"] = randn(2, B, HEADS, past, HEAD)
    node = helper.make_node("Attention", ["x", "w", "b", "mask", "past" if past else ""], ["y", "present"],
                            domain=MS, num_heads=HEADS, unidirectional=1)
    return ms_model(node, feeds, ["y", "present"], {"w": WEIGHTS, "b": BIAS}), feeds


def test_attention_prefill_then_decode() -> None:
    """A 5-token prompt, then one token over its 5 cached: the present grows by one each step."""
    prefill, decode = attention_step(5, 0), attention_step(1, 5)
    check_steps([prefill, decode], {"past": "present"})


# -- GroupQueryAttention: a buffer of the cache's length, written at seqlens_k --------------------------
GQA_HEADS, KV_HEADS, GQA_HEAD, CACHE = 4, 2, 8, 8  # onnxruntime's kernel takes head sizes in multiples of 8


def gqa_step(s: int, total: int, seqlens: Sequence[int], packed: bool, past: int | None = CACHE,
             bias: bool = False, batch: int = B) -> Step:
    """GroupQueryAttention on ``s`` new tokens with total_sequence_length ``total`` (a constant, as a
    static-shape export folds it) and past buffers of ``past`` positions (None: no past)."""
    q, k, v = (randn(batch, s, n * GQA_HEAD) for n in (GQA_HEADS, KV_HEADS, KV_HEADS))
    feeds = {"q": np.concatenate([q, k, v], -1)} if packed else {"q": q, "k": k, "v": v}
    feeds["seqlens_k"] = np.array(seqlens, np.int32)
    if past is not None:
        zeros = np.zeros((batch, KV_HEADS, past, GQA_HEAD), np.float32)
        feeds |= {"past_k": zeros, "past_v": zeros}
    if bias:
        feeds["bias"] = randn(1, GQA_HEADS, s, max(total, past or 0))
    ins = ["q", "", ""] if packed else ["q", "k", "v"]
    ins += ["past_k", "past_v"] if past is not None else ["", ""]
    ins += ["seqlens_k", "total", "", "", "", "bias" if bias else ""]
    node = helper.make_node("GroupQueryAttention", ins, ["y", "present_k", "present_v"], domain=MS,
                            num_heads=GQA_HEADS, kv_num_heads=KV_HEADS)
    return ms_model(node, feeds, ["y", "present_k", "present_v"], {"total": np.array(total, np.int32)}), feeds


@pytest.mark.parametrize("packed", [False, True])
def test_group_query_attention_shared_buffer(packed: bool) -> None:
    """A 4-token prompt (the second row right-padded to 2) into zeroed 8-position caches, then two decode
    steps with total_sequence_length the cache's length: each row's token goes to its seqlens_k, the keys
    past it stay masked (the second row overwrites its padding)."""
    prefill = gqa_step(4, 4, [3, 1], packed)
    decode = gqa_step(1, CACHE, [4, 2], packed)
    steps = [prefill, decode, (decode[0], gqa_step(1, CACHE, [5, 3], packed)[1])]
    check_steps(steps, {"past_k": "present_k", "past_v": "present_v"}, shared=True)


def test_group_query_attention_chunked_prompt() -> None:
    """A prompt in two chunks of 3 and 2 tokens (batch 1): the second, not a first prompt, goes after the
    first's 3 keys and is causal within itself."""
    first = gqa_step(3, 3, [2], packed=False, batch=1)
    second = gqa_step(2, CACHE, [4], packed=False, batch=1)
    check_steps([first, second], {"past_k": "present_k", "past_v": "present_v"}, shared=True)


def test_group_query_attention_growing_cache() -> None:
    """Past caches of 4 positions and total_sequence_length 5: the present grows to 5 (past then the new
    token), with an attention_bias over all 5 keys."""
    model, feeds = gqa_step(1, 5, [4, 4], packed=False, past=4, bias=True)
    feeds |= {"past_k": randn(B, KV_HEADS, 4, GQA_HEAD), "past_v": randn(B, KV_HEADS, 4, GQA_HEAD)}
    got = check_with_ort(model, feeds)
    assert got.want[0]["present_k"].shape == (B, KV_HEADS, 5, GQA_HEAD)


# -- still refused ---------------------------------------------------------------------------------------
def test_gqa_run_time_total_length_refused() -> None:
    """The present's length and whether a step is a first prompt come from total_sequence_length: a model
    input has to be bound at build time."""
    _, feeds = gqa_step(1, CACHE, [4, 2], packed=False)
    feeds["total"] = np.array(CACHE, np.int32)
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "past_k", "past_v", "seqlens_k", "total"],
                            ["y", "present_k", "present_v"], domain=MS, num_heads=GQA_HEADS,
                            kv_num_heads=KV_HEADS)
    model = ms_model(node, feeds, ["y", "present_k", "present_v"])
    with pytest.raises(NotConstant, match=r"present states' length.*input 6 \('total'\).*bind"):
        CuvilModel.load(model)


@pytest.mark.parametrize("op, ins, attrs, why", [
    ("MultiHeadAttention", ["q", "k", "v", "", "", "", "past_k", "past_v", "past_len"], {},
     r"input 8 \('past_len'\).*shared past/present buffer"),
    ("MultiHeadAttention", ["q", "k", "v", "", "", "", "past_k", ""], {},
     r"past_key and past_value come together"),
    ("GroupQueryAttention", ["q", "k", "v", "past_k", "past_v", "seqlens_k", "total", "cos", "cos"],
     {"kv_num_heads": HEADS, "do_rotary": 1}, r"input 7 \('cos'\).*do_rotary=1.*rotary embedding"),
    ("GroupQueryAttention", ["q", "k", "v", "past_k", "past_v", "seqlens_k", "total"],
     {"kv_num_heads": HEADS, "local_window_size": 2}, r"local_window_size=2.*windows")])
def test_refused(op: str, ins: list[str], attrs: dict[str, int], why: str) -> None:
    feeds = {"q": randn(B, 1, D), "k": randn(B, 1, D), "v": randn(B, 1, D),
             "past_k": randn(B, HEADS, CACHE, HEAD), "past_v": randn(B, HEADS, CACHE, HEAD)}
    inits = {"past_len": np.array(4, np.int32), "seqlens_k": np.array([4, 4], np.int32),
             "total": np.array(CACHE, np.int32), "cos": randn(CACHE, HEAD // 2)}
    node = helper.make_node(op, ins, ["y"], domain=MS, num_heads=HEADS, **attrs)
    model = make_model([node], {k: v for k, v in feeds.items() if k in ins}, {"y": feeds["q"]},
                       {k: v for k, v in inits.items() if k in ins})
    model.opset_import.append(helper.make_opsetid(MS, 1))
    with pytest.raises(UnsupportedOperator, match=rf"'com\.microsoft\.{op}' at node .*{why}"):
        CuvilModel.load(model)
