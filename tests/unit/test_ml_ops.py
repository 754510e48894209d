"""ONNX-ML operators as scikit-learn's exporter writes them (skl2onnx), against onnxruntime and
scikit-learn: tree ensembles, Binarizer, ArrayFeatureExtractor; malformed trees refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from cuvil_edge import CuvilModel
from cuvil_edge.errors import UnsupportedOperator
from tests.support.ort_check import check_with_ort, make_model


def _sklearn_onnx(model, features: int, dtype=np.float32) -> onnx.ModelProto:
    from skl2onnx import to_onnx

    return to_onnx(model, np.zeros((1, features), dtype), target_opset={"": 17, "ai.onnx.ml": 3})


def _rows(n: int, features: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, features)).astype(np.float32)


@pytest.mark.parametrize("kind", ["forest", "boosting", "forest-2-targets"])
def test_sklearn_regressors_match_onnxruntime_and_sklearn(kind: str) -> None:
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor

    x = _rows(200, 6, 1)
    y = x @ np.arange(1, 7, dtype=np.float32) + np.sin(3 * x[:, 0])
    if kind == "forest-2-targets":
        y = np.stack([y, x[:, 1] * x[:, 2]], axis=1)
    est = (GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=0) if kind == "boosting"
           else RandomForestRegressor(n_estimators=12, max_depth=6, random_state=0)).fit(x, y)
    model = _sklearn_onnx(est, 6)
    assert {n.op_type for n in model.graph.node} >= {"TreeEnsembleRegressor"}
    feeds = [{"X": _rows(17, 6, 2)}, {"X": _rows(17, 6, 3)}]
    checked = check_with_ort(model, feeds, rtol=1e-5, atol=1e-5, input_shapes={"X": (17, 6)})
    assert checked.kernels >= {"f32-trees"}
    ours = checked.got[0][model.graph.output[0].name]
    np.testing.assert_allclose(ours.reshape(est.predict(feeds[0]["X"]).shape), est.predict(feeds[0]["X"]),
                               rtol=1e-4, atol=1e-4)


def _ensemble_v5(x_dtype: int, **attrs) -> onnx.ModelProto:
    """Two trees over 3 features, a member set and a NaN that goes true, 2 targets; float64 tables."""
    d = np.float64
    base = dict(
        nodes_featureids=[0, 2, 1], nodes_modes=numpy_helper.from_array(np.array([0, 6, 3], np.uint8)),
        nodes_splits=numpy_helper.from_array(np.array([0.25, np.nan, -0.5], d)),
        nodes_truenodeids=[1, 0, 2], nodes_trueleafs=[0, 1, 1], nodes_falsenodeids=[1, 1, 3],
        nodes_falseleafs=[1, 1, 1], nodes_missing_value_tracks_true=[1, 0, 0],
        membership_values=numpy_helper.from_array(np.array([1.0, 2.0, 3.0, np.nan], d)),
        leaf_targetids=[0, 1, 0, 1],
        leaf_weights=numpy_helper.from_array(np.array([1.5, -2.0, 0.75, 3.0], d)),
        tree_roots=[0, 2], n_targets=2, aggregate_function=1)
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", name="trees",
                            **{**base, **attrs})
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", x_dtype, [6, 3])],
                              [helper.make_tensor_value_info("Y", x_dtype, [6, 2])])
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_v5_matches_the_reference(aggregate: int) -> None:
    from onnx.reference import ReferenceEvaluator

    x = np.array([[0.1, 0.0, 2.0], [0.3, -1.0, 1.0], [np.nan, 0.0, 3.0], [0.2, 5.0, 7.0],
                  [1.0, -0.6, 2.0], [-3.0, 0.0, 0.0]])
    model = _ensemble_v5(onnx.TensorProto.DOUBLE, aggregate_function=aggregate)
    want = ReferenceEvaluator(model).run(None, {"X": x})[0]
    with CuvilModel.load(model).optimize() as cm:
        np.testing.assert_allclose(cm.predict({"X": x})["Y"], want, rtol=1e-12)
        assert set(cm.compiled.program.kernels_used.values()) == {"f64-trees"}


def test_binarizer_and_feature_extractor_match_onnxruntime() -> None:
    nodes = [helper.make_node("Binarizer", ["x"], ["b"], domain="ai.onnx.ml", name="bin", threshold=0.2),
             helper.make_node("ArrayFeatureExtractor", ["x", "cols"], ["picked"], domain="ai.onnx.ml",
                              name="afe"),
             helper.make_node("ArrayFeatureExtractor", ["row", "cols"], ["one"], domain="ai.onnx.ml",
                              name="afe1")]
    feeds = {"x": _rows(3, 5, 4), "row": _rows(1, 5, 5)[0]}
    model = make_model(nodes, feeds, ["b", "picked", "one"], {"cols": np.array([4, 0, 2], np.int64)})
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 1))
    got = check_with_ort(model, feeds).got[0]
    assert got["one"].shape == (1, 3) and got["picked"].shape == (3, 3)
    assert set(np.unique(got["b"])) == {0.0, 1.0}


def test_a_tree_that_loops_and_a_classifier_are_refused_by_name() -> None:
    model = _ensemble_v5(onnx.TensorProto.FLOAT, nodes_falseleafs=[0, 1, 1], nodes_falsenodeids=[0, 1, 3])
    with pytest.raises(UnsupportedOperator, match="'trees'.*loops back to node 0"):
        CuvilModel.load(model)
    from sklearn.tree import DecisionTreeClassifier

    x = _rows(40, 3, 6)
    clf = DecisionTreeClassifier(max_depth=2, random_state=0).fit(x, x[:, 0] > 0)
    with pytest.raises(UnsupportedOperator, match="TreeEnsembleClassifier"):
        CuvilModel.load(_sklearn_onnx(clf, 3))


def test_binarizer_on_integers_compares_with_the_float_threshold() -> None:
    """An int64 input against threshold 2.5 (and NaN, which nothing exceeds), as the reference does."""
    from onnx.reference import ReferenceEvaluator

    x = np.arange(-3, 6, dtype=np.int64).reshape(3, 3)
    for threshold in (2.5, float("nan")):
        node = helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", name="bin",
                                threshold=threshold)
        model = make_model([node], {"x": x}, {"y": x})
        model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 1))
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
        with CuvilModel.load(model).optimize() as cm:
            got = cm.predict({"x": x})["y"]
        assert got.dtype == np.int64 and np.array_equal(got, want)
        assert got.sum() == (3 if threshold == 2.5 else 0)
