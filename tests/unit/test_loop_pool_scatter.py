"""A Loop whose trip count is a model input (``NotConstant``, fixed with ``bind=``), MaxPool's Indices
output and TensorScatter (opset 24), compiled to wasm, run in wasmtime and compared with onnxruntime or
the ONNX reference evaluator on seeded inputs; constant inputs check the folds the same way."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from cuvil_edge import CuvilModel, NotConstant, Target
from cuvil_edge.errors import UnsupportedOperator
from cuvil_edge.oracle import ort_session
from tests.support.ort_check import check_with_ort

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name: str, elem: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def build(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
          opset: int = 17, inits: list[onnx.TensorProto] = (), check: bool = True) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    if check:
        onnx.checker.check_model(m)
    return m


def run(m: onnx.ModelProto, feeds: dict[str, np.ndarray], **load: object) -> dict[str, np.ndarray]:
    with CuvilModel.load(m, **load).optimize(targets=[Target()]) as cm:
        return cm.predict(feeds)


def assert_like_reference(m: onnx.ModelProto, feeds: dict[str, np.ndarray], **load: object) -> None:
    """Ours equals the ONNX reference evaluator's outputs exactly (dtype and shape included)."""
    got = run(m, feeds, **load)
    want = ReferenceEvaluator(m).run(None, feeds)
    for o, ref in zip(m.graph.output, want):
        assert got[o.name].dtype == ref.dtype and got[o.name].shape == ref.shape, o.name
        np.testing.assert_array_equal(got[o.name], ref, err_msg=o.name)


# -- Loop: a trip count from the model's inputs ---------------------------------------------------------
def counting_loop() -> onnx.ModelProto:
    """y <- y * 2 + i for n = 3 * k steps (k a model input), each y scanned."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Add", ["y", "y"], ["y2"]),
         helper.make_node("Add", ["y2", "fi"], ["y_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Identity", ["y_out"], ["scan"])],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("y", F, [2])],
        [vi("cond_out", B, []), vi("y_out", F, [2]), vi("scan", F, [2])])
    return build([helper.make_node("Mul", ["k", "three"], ["n"]),
                  helper.make_node("Loop", ["n", "", "y0"], ["y", "ys"], body=body, name="count")],
                 [vi("k", I64, []), vi("y0", F, [2])], [vi("y", F, [2]), vi("ys", F, ["t", 2])],
                 inits=[numpy_helper.from_array(np.array(3, np.int64), "three")])


def test_loop_trip_count_from_an_input_asks_for_bind_and_binding_it_builds() -> None:
    m = counting_loop()
    hint = r"'Loop' at node 'count'.*max_trip_count=.*bind=\{'k': \.\.\.\}"
    with pytest.raises(NotConstant, match=hint) as exc:
        CuvilModel.load(m)
    assert exc.value.model_inputs == ("k",) and exc.value.input_name == "n"
    feeds = {"k": np.array(2, np.int64), "y0": np.array([0.5, -1.0], np.float32)}
    got = run(m, {"y0": feeds["y0"]}, bind={"k": feeds["k"]})
    want = ort_session(m).run(None, feeds)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-6)
    np.testing.assert_allclose(got["ys"], want[1], rtol=1e-6)
    assert got["ys"].shape == (6, 2)


def test_loop_with_neither_trip_count_nor_bound_stays_refused_without_a_bind_hint() -> None:
    """Only a run-time condition ends it: binding nothing fixes the scan outputs' size."""
    body = helper.make_graph(
        [helper.make_node("Less", ["y", "lim"], ["go"]), helper.make_node("Squeeze", ["go"], ["cond_out"]),
         helper.make_node("Add", ["y", "y"], ["y_out"]), helper.make_node("Identity", ["y_out"], ["scan"])],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("y", F, [1])],
        [vi("cond_out", B, []), vi("y_out", F, [1]), vi("scan", F, [1])])
    m = build([helper.make_node("Loop", ["", "c", "y0"], ["y", "ys"], body=body, name="grow")],
              [vi("c", B, []), vi("y0", F, [1]), vi("lim", F, [1])], [vi("y", F, [1]), vi("ys", F, ["t", 1])])
    with pytest.raises(UnsupportedOperator, match=r"'Loop' at node 'grow'.*max_trip_count") as exc:
        CuvilModel.load(m)
    assert not isinstance(exc.value, NotConstant)


# -- MaxPool's Indices --------------------------------------------------------------------------------------
POOLS = [  # (input shape, attrs): 2D both storage orders, pads, strides, dilations, ceil mode, 1D and 3D
    ((2, 3, 7, 6), dict(kernel_shape=[3, 2])),
    ((1, 2, 7, 6), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], storage_order=1)),
    ((2, 2, 9, 8), dict(kernel_shape=[2, 3], strides=[2, 2], dilations=[2, 1], pads=[1, 0, 0, 2])),
    ((1, 3, 8, 7), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, storage_order=1)),
    ((2, 2, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 0])),
    ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 3, 2], storage_order=1)),
]


def pool_nodes(attrs: dict) -> list[onnx.NodeProto]:
    return [helper.make_node("MaxPool", ["x"], ["y", "ind"], name="pool", **attrs)]


@pytest.mark.parametrize("shape, attrs", POOLS)
def test_maxpool_indices_match_onnxruntime(shape: tuple[int, ...], attrs: dict) -> None:
    """Rounded values make ties: the first tap of the max wins, as in onnxruntime."""
    x = np.round(np.random.default_rng(sum(shape)).standard_normal(shape) * 2).astype(np.float32)
    checked = check_with_ort(pool_nodes(attrs), {"x": x}, ["y", "ind"], rtol=0, atol=0)
    assert "f32-maxpool-indices" in checked.kernels
    assert checked.got[0]["ind"].dtype == np.int64


def test_maxpool_indices_split_between_threads() -> None:
    x = np.random.default_rng(5).standard_normal((2, 16, 32, 32)).astype(np.float32)
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], storage_order=1)
    check_with_ort(pool_nodes(attrs), {"x": x}, ["y", "ind"], threads=2, rtol=0, atol=0)


@pytest.mark.parametrize("shape, attrs", [POOLS[1], POOLS[2], POOLS[4], POOLS[6]])
def test_maxpool_indices_fold_matches_onnxruntime(shape: tuple[int, ...], attrs: dict) -> None:
    """A constant input folds at import: the numpy fold against onnxruntime (the ONNX reference ignores
    storage_order at unit strides)."""
    x = np.round(np.random.default_rng(7).standard_normal(shape) * 2).astype(np.float32)
    y, ind = ort_session(build(pool_nodes(attrs), [vi("x", F, list(shape))],
                               [vi("y", F, None), vi("ind", I64, None)], check=False)).run(None, {"x": x})
    m = build([*pool_nodes(attrs), helper.make_node("Add", ["y", "z"], ["out"])],
              [vi("z", F, [1])], [vi("out", F, list(y.shape)), vi("ind", I64, list(ind.shape))],
              inits=[numpy_helper.from_array(x, "x")])
    with CuvilModel.load(m).optimize(targets=[Target()]) as cm:
        assert "max_pool_argmax" not in cm.graph.op_counts()
        got = cm.predict({"z": np.zeros(1, np.float32)})
    np.testing.assert_array_equal(got["out"], y)
    np.testing.assert_array_equal(got["ind"], ind)


# -- TensorScatter ----------------------------------------------------------------------------------------
def scatter_model(cache: list[int], update: list[int], with_indices: bool, **attrs: object
                  ) -> onnx.ModelProto:
    ins = [vi("past", F, cache), vi("upd", F, update)] + ([vi("at", I64, [cache[0]])] if with_indices else [])
    return build([helper.make_node("TensorScatter", [i.name for i in ins], ["present"], **attrs)], ins,
                 [vi("present", F, cache)], opset=24)


@pytest.mark.parametrize("cache, update, attrs, at", [
    ([2, 3, 8, 4], [2, 3, 2, 4], {}, [1, 6]),                              # axis -2, linear
    ([2, 8, 3], [2, 3, 3], {"axis": 1}, [5, 0]),                           # rank 3
    ([3, 2, 6, 4], [3, 2, 3, 4], {"mode": "circular"}, [4, 5, 13]),        # wraps past the end
    ([2, 6, 5], [2, 6, 2], {"axis": -1, "mode": "circular"}, [-1, 4]),     # innermost axis
    ([2, 3, 5, 4], [2, 3, 2, 4], {}, None),                                # no write_indices: 0
])
def test_tensor_scatter_matches_the_reference(cache: list[int], update: list[int], attrs: dict,
                                              at: list[int] | None) -> None:
    rng = np.random.default_rng(len(cache) + sum(update))
    feeds = {"past": rng.standard_normal(cache).astype(np.float32),
             "upd": rng.standard_normal(update).astype(np.float32)}
    if at is not None:
        feeds["at"] = np.array(at, np.int64)
    assert_like_reference(scatter_model(cache, update, at is not None, **attrs), feeds)


def test_tensor_scatter_writes_in_place_of_a_cache_that_dies_there() -> None:
    m = build([helper.make_node("Neg", ["past"], ["cache"]),
               helper.make_node("TensorScatter", ["cache", "upd", "at"], ["present"], mode="circular")],
              [vi("past", F, [2, 2, 6, 4]), vi("upd", F, [2, 2, 3, 4]), vi("at", I64, [2])],
              [vi("present", F, [2, 2, 6, 4])], opset=24)
    rng = np.random.default_rng(3)
    feeds = {"past": rng.standard_normal((2, 2, 6, 4)).astype(np.float32),
             "upd": rng.standard_normal((2, 2, 3, 4)).astype(np.float32), "at": np.array([4, 1], np.int64)}
    with CuvilModel.load(m).optimize(targets=[Target()]) as cm:
        assert f"{2 * 2 * 6 * 4 * 4});" not in cm.compiled.program.source  # no copy of the whole cache
        np.testing.assert_array_equal(cm.predict(feeds)["present"], ReferenceEvaluator(m).run(None, feeds)[0])


def test_tensor_scatter_of_constants_folds_like_the_reference() -> None:
    m = scatter_model([2, 4, 3], [2, 2, 3], True, axis=1, mode="circular")
    rng = np.random.default_rng(11)
    consts = {"past": rng.standard_normal((2, 4, 3)).astype(np.float32),
              "upd": rng.standard_normal((2, 2, 3)).astype(np.float32), "at": np.array([3, 1], np.int64)}
    want = ReferenceEvaluator(m).run(None, consts)[0]
    folded = build([*m.graph.node, helper.make_node("Add", ["present", "z"], ["out"])], [vi("z", F, [1])],
                   [vi("out", F, [2, 4, 3])], opset=24,
                   inits=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    with CuvilModel.load(folded).optimize(targets=[Target()]) as cm:
        assert "tensor_scatter" not in cm.graph.op_counts()
        np.testing.assert_array_equal(cm.predict({"z": np.zeros(1, np.float32)})["out"], want)


def test_tensor_scatter_on_the_batch_axis_is_refused() -> None:
    with pytest.raises(UnsupportedOperator, match=r"'TensorScatter'.*axis 0"):
        CuvilModel.load(scatter_model([4, 3], [2, 3], True, axis=0))
