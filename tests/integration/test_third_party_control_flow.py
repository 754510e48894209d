"""A third-party model with run-time control flow: Silero VAD (the ``silero-vad`` wheel on PyPI ships its
ONNX exports). ``silero_vad_op18_ifless.onnx`` picks its 16 kHz or 8 kHz network with an ``If`` on the
``sr`` input, so the whole model runs inside one branch chosen at run time. The wheel is installed by the
test's setup with ``pip install --no-deps --target`` into pytest's cache (once), never fetched elsewhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session

pytestmark = pytest.mark.integration
PACKAGE = "silero-vad==6.2.3"
SHAPES = {"input": [1, 512], "state": [2, 1, 128]}


@pytest.fixture(scope="module")
def vad_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider: install per run
    base = cache.mkdir("third_party") if cache is not None else tmp_path_factory.mktemp("third_party")
    target = base / PACKAGE.replace("==", "-")
    model = target / "silero_vad" / "data" / "silero_vad_op18_ifless.onnx"
    if not model.exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        PACKAGE], check=True)
    return model


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
