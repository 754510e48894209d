"""Ops whose output size depends on the data (NonZero, Unique, Compress, NonMaxSuppression), each a small
ONNX graph compiled, run in wasmtime and compared with onnxruntime: an output is allocated for its bound,
zero past its real length, and a model output comes with ``<name>:length`` (docs/ONNX.md); constant
inputs fold to the exact result; a run-time padded value read by another node is refused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import UnsupportedOperator
from runtime_wasm.errors import InferenceTrap
from tests.support.ort_check import assert_outputs_close, check_with_ort, make_model, ort_outputs

N = helper.make_node
check = partial(check_with_ort, rtol=0, atol=0)


def check_padded(nodes: Sequence[onnx.NodeProto], feeds: Sequence[Mapping[str, np.ndarray]],
                 axes: Mapping[str, int], outputs: Sequence[str] = ()) -> list[dict[str, np.ndarray]]:
    """``check`` for outputs padded along another axis than the first (the shared check cuts axis 0): each
    output in ``axes`` must be zero past its ``:length`` along that axis, and is compared up to it."""
    want = ort_outputs(make_model(nodes, feeds[0], [*axes, *outputs]), feeds)
    model = make_model(nodes, feeds[0], want[0])  # outputs typed as an exporter would
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        got = [cm.predict(feed) for feed in feeds]
    for i, (ours, ref) in enumerate(zip(got, want)):
        assert set(ours) == set(ref) | {f"{k}:length" for k in axes}, sorted(ours)
        cut = {k: v for k, v in ours.items() if not k.endswith(":length")}
        for name, axis in axes.items():
            n, bound = int(ours[f"{name}:length"]), cut[name].shape[axis]
            assert not np.take(cut[name], range(n, bound), axis=axis).any(), f"{name}: not zero past {n}"
            cut[name] = np.take(cut[name], range(n), axis=axis)
        assert_outputs_close(cut, ref, 0, 0, what=f"input #{i}")
    return got


def sparse(shape: tuple[int, ...], seed: int, dtype: type = np.float32) -> np.ndarray:
    """Small integers with about half of them zero."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-3, 4, shape) * (rng.random(shape) < 0.5)).astype(dtype)


def boxes_and_scores(batches: int, classes: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """Clustered boxes (so many overlap) with corners in either order, and scores with ties."""
    rng = np.random.default_rng(seed)
    centers = rng.integers(0, 4, (batches, n, 2)) * 2.0 + rng.random((batches, n, 2))
    size = 1.0 + rng.random((batches, n, 2)) * 2
    corners = np.concatenate([centers - size / 2, centers + size / 2], axis=2)
    flip = rng.random((batches, n)) < 0.3
    corners[flip] = corners[flip][:, [2, 3, 0, 1]]
    scores = np.round(rng.random((batches, classes, n)), 1)
    return {"boxes": corners.astype(np.float32), "scores": scores.astype(np.float32)}


BOXES = boxes_and_scores(1, 1, 4, 0)


# -- NonZero -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4)])
def test_nonzero_is_padded_along_its_last_axis(shape: tuple[int, ...], dtype: type) -> None:
    feeds = [{"x": sparse(shape, s, dtype)} for s in range(3)] + [{"x": np.zeros(shape, dtype)}]
    got = check_padded([N("NonZero", ["x"], ["y"])], feeds, {"y": 1})
    assert all(g["y"].shape == (len(shape), int(np.prod(shape))) for g in got)  # the bound, every run
    assert [int(g["y:length"]) for g in got] == [np.count_nonzero(f["x"]) for f in feeds]


def test_nonzero_counts_nan_and_not_negative_zero() -> None:
    x = np.array([0.0, -0.0, np.nan, 1.0, np.inf], np.float32)
    got = check_padded([N("NonZero", ["x"], ["y"])], [{"x": x}], {"y": 1})
    assert got[0]["y"][0, :3].tolist() == [2, 3, 4]


def test_nonzero_of_a_constant_folds_to_the_exact_result() -> None:
    value = numpy_helper.from_array(np.array([[0, 2], [3, 0]], np.int64), "c")
    model = make_model([N("Constant", [], ["c"], value=value), N("NonZero", ["c"], ["y"]),
                        N("Add", ["y", "x"], ["z"])], {"x": np.zeros((2, 2), np.int64)},
                       {"z": np.zeros((2, 2), np.int64)})
    with CuvilModel.load(model) as cm:
        assert not any(n.op == "nonzero" for n in cm.graph.nodes)
    r = check(model, {"x": np.ones((2, 2), np.int64)})  # a constant result may feed other nodes
    assert set(r.got[0]) == {"z"} and r.got[0]["z"].tolist() == [[1, 2], [2, 1]]


# -- Unique --------------------------------------------------------------------------------------------
UNIQUE_OUTS = ["y", "first", "inverse", "counts"]


@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
def test_unique_without_axis(sorted_: int, dtype: type) -> None:
    feeds = [{"x": sparse((3, 5), s, dtype)} for s in range(3)]
    feeds.append({"x": np.full((3, 5), 7, dtype)})
    r = check([N("Unique", ["x"], UNIQUE_OUTS, sorted=sorted_)], feeds, UNIQUE_OUTS)
    for g in r.got:  # Y, first indices and counts padded to the 15 elements, inverse exact
        assert [g[k].shape for k in UNIQUE_OUTS] == [(15,)] * 4
        assert int(g["y:length"]) == int(g["first:length"]) == int(g["counts:length"])
        assert "inverse:length" not in g
    assert int(r.got[-1]["y:length"]) == 1


def test_unique_puts_nans_last_as_one() -> None:
    """onnxruntime merges NaN with whatever its map meets first; ours follows numpy (NaNs equal, last)."""
    x = np.array([np.nan, 1, np.nan, 0, -0.0, 1], np.float32)
    ids = np.zeros(6, np.int64)
    model = make_model([N("Unique", ["x"], UNIQUE_OUTS)], {"x": x}, dict(zip(UNIQUE_OUTS, [x, *[ids] * 3])))
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        got = cm.predict({"x": x})
    n = int(got["y:length"])
    assert n == 3 and got["y"][:2].tolist() == [0, 1] and np.isnan(got["y"][2])
    assert got["counts"][:n].tolist() == [2, 2, 2] and got["inverse"].tolist() == [2, 1, 2, 0, 0, 1]


@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unique_along_an_axis(axis: int, sorted_: int) -> None:
    base = np.random.default_rng(0).integers(0, 3, (2, 3, 4)).astype(np.float32)
    x = np.concatenate([base, base[:, :2]], axis=1)  # repeated slices along axis 1
    x = np.concatenate([x, x[..., :1]], axis=2)  # ... and along axis 2
    padded = {"y": axis % 3, "first": 0, "counts": 0}
    got = check_padded([N("Unique", ["x"], UNIQUE_OUTS, axis=axis, sorted=sorted_)], [{"x": x}], padded,
                       ["inverse"])
    assert got[0]["y"].shape == x.shape


# -- Compress ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_with_a_run_time_condition(axis: int | None) -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 5
    dim = x.size if axis is None else x.shape[axis]
    rng = np.random.default_rng(1)
    conds = [rng.random(dim) < 0.5 for _ in range(2)] + [np.zeros(dim, bool), np.ones(dim, bool)]
    feeds = [{"x": x, "c": c} for c in conds]
    attrs = {} if axis is None else {"axis": axis}
    got = check_padded([N("Compress", ["x", "c"], ["y"], **attrs)], feeds, {"y": (axis or 0) % 3})
    assert [int(g["y:length"]) for g in got] == [int(c.sum()) for c in conds]


def test_compress_with_a_shorter_condition_keeps_only_its_slices() -> None:
    x = np.arange(12, dtype=np.int64).reshape(4, 3)
    r = check([N("Compress", ["x", "c"], ["y"], axis=0)], {"x": x, "c": np.array([True, False, True])}, ["y"])
    assert r.got[0]["y"].shape == (3, 3) and int(r.got[0]["y:length"]) == 2


def test_compress_by_a_constant_condition_is_an_exact_gather() -> None:
    """No padding: the kept slices are known at build time."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = check([N("Compress", ["x", "c"], ["y"], axis=1)], {"x": x}, ["y"],
              inits={"c": np.array([True, False, False, True])})
    assert set(r.got[0]) == {"y"} and r.got[0]["y"].shape == (3, 2)
    assert not any(n.op == "compress" for n in r.model.graph.nodes)


def test_compress_of_float16_passes_the_length_through_its_cast() -> None:
    x = np.arange(6, dtype=np.float16).reshape(2, 3) / 4
    feed = {"x": x, "c": np.array([True, False, True])}
    got = check_padded([N("Compress", ["x", "c"], ["y"], axis=1)], [feed], {"y": 1})
    assert got[0]["y"].dtype == np.float16 and int(got[0]["y:length"]) == 2


# -- NonMaxSuppression ---------------------------------------------------------------------------------
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("score", [None, 0.35])
def test_nms_matches_onnxruntime(center: int, score: float | None) -> None:
    feeds = [boxes_and_scores(2, 3, 12, seed) for seed in range(3)]
    inits = {"limit": np.array([4], np.int64), "iou": np.array([0.4], np.float32)}
    names = ["boxes", "scores", "limit", "iou"]
    if score is not None:
        inits["score"], names = np.array([score], np.float32), [*names, "score"]
    r = check([N("NonMaxSuppression", names, ["sel"], center_point_box=center)], feeds, ["sel"], inits=inits)
    assert all(g["sel"].shape == (2 * 3 * 4, 3) for g in r.got)  # batches * classes * min(limit, boxes)
    assert r.kernels == {"f32-nms"}


def test_nms_with_a_run_time_limit_is_bounded_by_the_boxes() -> None:
    feeds = [{**boxes_and_scores(1, 2, 6, seed), "limit": np.array([k], np.int64)}
             for seed, k in enumerate([0, 2, 100, -1])]
    r = check([N("NonMaxSuppression", ["boxes", "scores", "limit", "iou"], ["sel"])], feeds, ["sel"],
              inits={"iou": np.array([0.5], np.float32)}, threads=2)
    assert r.got[0]["sel"].shape == (12, 3) and [int(g["sel:length"]) for g in r.got][::3] == [0, 0]


def test_nms_with_run_time_thresholds() -> None:
    """Every input fed at run time; an IoU threshold outside [0, 1] traps (onnxruntime fails)."""
    names = ["boxes", "scores", "limit", "iou", "score"]
    feeds = [{**boxes_and_scores(2, 2, 8, seed), "limit": np.array([3], np.int64),
              "iou": np.array([iou], np.float32), "score": np.array([score], np.float32)}
             for seed, (iou, score) in enumerate([(0.0, 0.5), (0.3, 0.2), (1.0, -1.0)])]
    r = check([N("NonMaxSuppression", names, ["sel"])], feeds, ["sel"])
    assert r.got[0]["sel"].shape == (2 * 2 * 8, 3)
    model = make_model([N("NonMaxSuppression", names, ["sel"])], feeds[0], {"sel": r.want[0]["sel"]})
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm, pytest.raises(InferenceTrap):
        cm.predict({**feeds[0], "iou": np.array([1.5], np.float32)})


# -- constant inputs -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("node", "inits"), [
    (N("Unique", ["c"], ["y", "i", "v", "n"], sorted=0), {"c": np.array([[1, 3, 1], [2, 3, 1]], np.float32)}),
    (N("Unique", ["c"], ["y", "i", "v", "n"], axis=1), {"c": np.array([[1, 3, 1], [1, 3, 1]], np.int64)}),
    (N("Compress", ["c", "k"], ["y"]), {"c": np.arange(6, dtype=np.float32), "k": np.array([1, 0, 1], bool)}),
    (N("NonMaxSuppression", ["b", "s", "k"], ["y"]), {"b": BOXES["boxes"], "s": BOXES["scores"],
                                                      "k": np.array([2], np.int64)}),
])
def test_constant_inputs_fold_to_the_exact_result(node: onnx.NodeProto, inits: dict[str, np.ndarray]) -> None:
    r = check([node, N("Identity", ["d"], ["e"])], {"d": np.zeros(2, np.float32)}, [*node.output, "e"],
              inits=inits)
    assert not any(k.endswith(":length") for k in r.got[0])
    assert {n.op for n in r.model.graph.nodes} <= {"copy"}


# -- refusals ------------------------------------------------------------------------------------------
def test_a_padded_value_read_by_another_node_is_refused() -> None:
    x = sparse((3, 4), 0)
    model = make_model([N("NonZero", ["x"], ["y"], name="nz"), N("Transpose", ["y"], ["t"], name="tr")],
                       {"x": x}, {"t": np.zeros((7, 2), np.int64)})
    with pytest.raises(UnsupportedOperator, match=r"'NonZero' at node 'nz'.*run-time length.*'tr'"):
        CuvilModel.load(model)


@pytest.mark.parametrize(("node", "feeds", "inits", "why"), [
    (N("NonMaxSuppression", ["boxes", "scores"], ["y"], name="bad", center_point_box=2), BOXES, {},
     "center_point_box=2"),
    (N("NonMaxSuppression", ["boxes", "scores", "", "iou"], ["y"], name="bad"), BOXES,
     {"iou": np.array([2], np.float32)}, "iou_threshold 2.0 is outside"),
    (N("Unique", ["x"], ["y"], name="bad"), {"x": np.zeros((0, 3), np.float32)}, {}, "empty"),
    (N("Compress", ["x", "c"], ["y"], name="bad"), {"x": np.zeros(3, np.float32), "c": np.ones(3, np.int64)},
     {}, "1-D bool"),
])
def test_unsupported_variants_are_refused_naming_the_node(node: onnx.NodeProto, feeds: dict[str, np.ndarray],
                                                          inits: dict[str, np.ndarray], why: str) -> None:
    with pytest.raises(UnsupportedOperator, match=rf"'{node.op_type}' at node 'bad'.*{why}"):
        CuvilModel.load(make_model([node], feeds, {"y": np.zeros(1, np.int64)}, inits),
                        input_shapes={k: v.shape for k, v in feeds.items()})
