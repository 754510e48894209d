"""LSTM and GRU against onnxruntime (1 thread, rtol = atol = 1e-4): every direction, initial states,
GRU linear_before_reset, batch > 1 and a hidden size that is not a multiple of 4 (partial vectors)."""

from __future__ import annotations

import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session

T, BATCH, INP = 7, 2, 5


def rnn_model(op: str, direction: str, hidden: int, states: bool, lbr: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(zlib.crc32(repr((op, direction, hidden, states, lbr)).encode()))
    dirs = 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    w = {
        "W": (dirs, gates * hidden, INP),
        "R": (dirs, gates * hidden, hidden),
        "B": (dirs, 2 * gates * hidden),
    }
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), k) for k, s in w.items()
    ]
    ins = ["x", "W", "R", "B"]
    vis = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, BATCH, INP])]
    state_shape = [dirs, BATCH, hidden]
    if states:
        names = ["h0", "c0"] if op == "LSTM" else ["h0"]
        ins += ["", *names]
        vis += [helper.make_tensor_value_info(n, TensorProto.FLOAT, state_shape) for n in names]
    outs = ["y", "yh", "yc"] if op == "LSTM" else ["y", "yh"]
    attrs = {"linear_before_reset": lbr} if op == "GRU" else {}
    node = helper.make_node(op, ins, outs, hidden_size=hidden, direction=direction, **attrs)
    out_vis = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, dirs, BATCH, hidden])]
    out_vis += [helper.make_tensor_value_info(n, TensorProto.FLOAT, state_shape) for n in outs[1:]]
    m = helper.make_model(
        helper.make_graph([node], "rnn", vis, out_vis, inits), opset_imports=[helper.make_opsetid("", 14)]
    )
    m.ir_version = 8
    return m


CASES = [
    ("LSTM", d, h, s, 0) for d in ("forward", "reverse", "bidirectional") for h, s in ((8, False), (6, True))
]
CASES += [
    ("GRU", d, h, s, lbr)
    for d in ("forward", "reverse", "bidirectional")
    for h, s, lbr in ((8, False, 0), (6, True, 1), (5, True, 0))
]


@pytest.mark.parametrize("op,direction,hidden,states,lbr", CASES)
def test_rnn_matches_onnxruntime(op: str, direction: str, hidden: int, states: bool, lbr: int):
    model = rnn_model(op, direction, hidden, states, lbr)
    rng = np.random.default_rng(1)
    feeds = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in model.graph.input
        if i.name not in {t.name for t in model.graph.initializer}
    }
    want = ort_session(model).run(None, feeds)
    cm = CuvilModel.load(model).optimize(targets=[Target()])
    got = cm.predict(feeds)
    for out, ref in zip(model.graph.output, want):
        np.testing.assert_allclose(got[out.name], ref, rtol=1e-4, atol=1e-4, err_msg=out.name)
    assert cm.graph.op_counts() == {"rnn": 1}
