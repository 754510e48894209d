"""ATAN2, SPARSE_TO_DENSE, CONV_3D_TRANSPOSE, BITCAST and the data-dependent WHERE, UNIQUE and
NON_MAX_SUPPRESSION_V4 / V5: each model of ``tests.support.tflite_more_builtins`` compiled, run in wasmtime
and compared with LiteRT's interpreter on seeded inputs; a run-time length comes back as ``<name>:length``
with zeros past it; what stays refused is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from cuvil_edge import CuvilModel
from cuvil_edge.errors import UnsupportedOperator
from cuvil_edge.frontend.tflite import import_tflite
from tests.support import tflite_more_builtins as more_builtins
from tests.support.tflite_builtins import SAME, VALID, Case, Ops, litert

LENGTH = ":length"


def _compare(case: Case, padded: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Our outputs against LiteRT's: a ``padded`` one up to its ``:length`` (zero past it), every output in
    type and shape, floats close with the signs of their zeros. Returns ours."""
    want = litert(case.model, case.feeds)
    got = CuvilModel.load(case.model).predict(case.feeds)
    assert sorted(got) == sorted([*want, *(p + LENGTH for p in padded)])
    for name, ref in want.items():
        ours = got[name]
        if name in padded:
            n = int(got[name + LENGTH])
            assert n == len(ref) and not ours[n:].any(), name
            ours = ours[:n]
        assert (ours.dtype, ours.shape) == (ref.dtype, ref.shape), name
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(ours, ref, rtol=2e-5, atol=2e-6, err_msg=name)
            np.testing.assert_array_equal(np.signbit(ours[ref == 0]), np.signbit(ref[ref == 0]), err_msg=name)
        else:
            np.testing.assert_array_equal(ours, ref, err_msg=name)
    return got


def test_atan2_matches_std_atan2_in_every_quadrant_and_on_signed_zeros() -> None:
    _compare(more_builtins.atan2())


def test_sparse_to_dense_with_run_time_values_and_a_repeated_index() -> None:
    _compare(more_builtins.sparse_to_dense())


@pytest.mark.parametrize("padding, strides, dilations", [
    (SAME, (2, 2, 2), (1, 1, 1)), (VALID, (1, 2, 1), (1, 1, 1)), (VALID, (1, 1, 1), (2, 1, 2))])
def test_conv_3d_transpose(padding: int, strides: tuple[int, ...], dilations: tuple[int, ...]) -> None:
    _compare(more_builtins.conv_3d_transpose(padding, strides, dilations))


def test_bitcast_same_size_split_and_joined() -> None:
    _compare(more_builtins.bitcasts())


def test_where_gives_coordinates_up_to_a_run_time_length() -> None:
    got = _compare(more_builtins.where(), padded=("where_0", "where_1"))
    assert got["where_0"].shape == (12, 2)  # allocated for the bound: every element


@pytest.mark.parametrize("dtype, idx_type", [("int32", "int32"), ("float32", "int64")])
def test_unique_in_order_of_first_occurrence(dtype: str, idx_type: str) -> None:
    _compare(more_builtins.unique(dtype, idx_type), padded=("y",))


@pytest.mark.parametrize("version, iou, limit", [
    ("V4", 0.5, 6), ("V5", 0.5, 40), ("V4", 0.0, 3), ("V5", 0.3, 4)])
def test_non_max_suppression_matches_litert(version: str, iou: float, limit: int) -> None:
    """IoU at the threshold suppresses (LiteRT's >=); selections padded with zeros to max_output_size
    (past the box count too); threshold 0 keeps one box."""
    got = _compare(more_builtins.nms(version, iou, limit))
    kept = got["selected"][:int(got["valid"])]
    assert kept[0] == 0 and (1 not in kept) == (iou <= 0.5)  # box 1's IoU with box 0 is 0.5


def test_data_dependent_outputs_read_inside_the_model_and_soft_nms_are_refused() -> None:
    o = Ops()
    m = o.b.tensor("m", (3, 4), "bool")
    coords = o.op("WHERE", [m], (12, 2), "int64")
    y = o.op("ADD", [coords, o.const(np.ones((1, 2), np.int64))], (12, 2), "int64")
    with pytest.raises(UnsupportedOperator, match="run-time length") as err:
        import_tflite(o.b.build([m], [y]))
    assert err.value.op_type == "WHERE"

    o = Ops()
    boxes, scores = o.b.tensor("boxes", (4, 4)), o.b.tensor("scores", (4,))
    outs = [o.b.tensor("s", (2,), "int32"), o.b.tensor("sc", (2,)), o.b.tensor("v", (), "int32")]
    thresholds = [o.const(np.array(v, np.float32)) for v in (0.5, 0.0, 0.5)]  # iou, score, sigma
    o.b.op("NON_MAX_SUPPRESSION_V5", [boxes, scores, o.const(np.array(2, np.int32)), *thresholds], outs)
    with pytest.raises(UnsupportedOperator, match="soft-NMS") as err:
        import_tflite(o.b.build([boxes, scores], outs))
    assert err.value.op_type == "NON_MAX_SUPPRESSION_V5"

    o = Ops()
    b = o.b.tensor("b", (3, 3), "uint8")
    with pytest.raises(UnsupportedOperator, match="last dim must be 4"):
        import_tflite(o.b.build([b], [o.op("BITCAST", [b], (3,), "float32")]))
