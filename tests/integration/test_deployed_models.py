"""The models people deploy, built with ``cuvil_edge.testing.zoo_transformers`` (onnx.helper, no torch),
compiled to wasm and compared with onnxruntime (1 thread) within 1e-4 on random inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session, random_inputs
from cuvil_edge.testing.zoo_transformers import (
    bert_encoder,
    bert_feeds,
    crnn,
    gru_kws,
    vit_encoder,
    yolo_head,
)

pytestmark = pytest.mark.integration
TOL = 1e-4


def compile_model(model: onnx.ModelProto) -> CuvilModel:
    return CuvilModel.load(model).optimize(targets=[Target()])


def assert_close(
    cm: CuvilModel, model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    sess = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    want = dict(zip(names, sess.run(names, feeds)))
    got = cm.predict(feeds)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=TOL, atol=TOL, err_msg=name)
    return got


def test_bert_encoder_two_layers_with_mask_and_decomposed_layernorm():
    model = bert_encoder(layers=2, seq=128)
    cm = compile_model(model)
    ops = cm.graph.op_counts()
    assert ops["attention"] == 2 and ops["gelu"] == 2 and ops["layernorm"] == 5, ops
    assert "softmax" not in ops and "reduce" not in ops and "matmul" not in ops
    for seed in (0, 1):
        assert_close(cm, model, bert_feeds(128, seed=seed))


def test_distilbert_full_shape_six_layers():
    """6 layers x 768, 12 heads, FFN 3072, seq 128, padded attention mask."""
    model = bert_encoder(layers=6, decomposed=False)
    cm = compile_model(model)
    assert cm.graph.op_counts()["attention"] == 6
    assert_close(cm, model, bert_feeds(128, seed=2))


def test_vit_tiny_shape():
    model = vit_encoder(layers=2)
    cm = compile_model(model)
    assert cm.graph.op_counts()["attention"] == 2
    for feeds in random_inputs(model, 1, seed=0):
        assert_close(cm, model, feeds)


def test_crnn_bidirectional_lstm():
    model = crnn()
    cm = compile_model(model)
    assert cm.graph.op_counts()["rnn"] == 1
    for feeds in random_inputs(model, 2, seed=0):
        assert_close(cm, model, feeds)


def test_gru_keyword_spotter_carries_state_across_calls():
    model = gru_kws()
    cm = compile_model(model)
    rng = np.random.default_rng(0)
    state = np.zeros((1, 1, 64), np.float32)
    for _ in range(2):  # the second call starts from the first call's state
        feeds = {"features": rng.standard_normal((49, 1, 40)).astype(np.float32), "state_in": state}
        got = assert_close(cm, model, feeds)
        assert not np.allclose(got["state_out"], state)
        state = got["state_out"].copy()


def test_yolo_style_detector_head():
    model = yolo_head()
    cm = compile_model(model)
    for feeds in random_inputs(model, 2, seed=0):
        assert_close(cm, model, feeds)
