"""Inputs bound at build time (``CuvilModel.load(bind=...)``, ``--bind``): a model that takes an axis, a
shape or pads as an input builds once they are fixed, the bound input leaves the compiled signature, and
an op that needs such an input at build time names it (``NotConstant``) and says how to bind it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from cuvil_edge import CuvilModel, InputError, NotConstant, Target
from cuvil_edge.cli import main
from cuvil_edge.errors import UnsupportedOperator
from tests.support.ort_check import make_model

N = helper.make_node
X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)


def reduce_model():
    """ReduceSum over axes given as a model input (opset 18), as the ONNX node cases write it."""
    return make_model([N("ReduceSum", ["x", "axes"], ["y"], keepdims=0, name="r")],
                      {"x": X, "axes": np.array([1], np.int64)}, {"y": X.sum(1)}, opset=18)


def slice_model():
    """Slice with starts and ends as model inputs on two axes (no run-time form exists for that)."""
    starts, ends = np.array([0, 1], np.int64), np.array([2, 3], np.int64)
    return make_model([N("Slice", ["x", "starts", "ends"], ["y"], name="s")],
                      {"x": X, "starts": starts, "ends": ends}, {"y": X[0:2, 1:3]}, opset=13)


def test_an_axis_fed_as_input_is_named_with_how_to_bind_it() -> None:
    named = r"'ReduceSum' at node 'r'.*input 1 \('axes'\).*bind=\{'axes'"
    with pytest.raises(NotConstant, match=named) as err:
        CuvilModel.load(reduce_model())
    assert (err.value.input_name, err.value.index, err.value.model_inputs) == ("axes", 1, ("axes",))


@pytest.mark.parametrize("axes", [[1], np.array([1], np.int32), 1])
def test_a_bound_axis_builds_and_leaves_the_signature(axes) -> None:
    with CuvilModel.load(reduce_model(), bind={"axes": axes}).optimize(targets=[Target()]) as cm:
        assert [t.name for t in cm.spec.inputs] == ["x"]
        np.testing.assert_allclose(cm.predict({"x": X})["y"], X.sum(1), rtol=1e-6)


def test_a_run_time_path_that_cannot_take_the_input_names_it_too() -> None:
    with pytest.raises(NotConstant, match=r"run-time bounds are supported on one axis.*input 1 \('starts'\)"):
        CuvilModel.load(slice_model())
    bound = {"starts": [0, 1], "ends": [2, 3]}
    with CuvilModel.load(slice_model(), bind=bound).optimize(targets=[Target()]) as cm:
        np.testing.assert_array_equal(cm.predict({"x": X})["y"], X[0:2, 1:3])


def test_a_value_computed_from_a_model_input_names_that_input() -> None:
    """pads = Concat(p + 1, p + 1): Pad needs them at build time, the error names 'p', binding it builds."""
    x = X[0]
    model = make_model([N("Add", ["p", "one"], ["q"]), N("Concat", ["q", "q"], ["pads"], axis=0),
                        N("Pad", ["x", "pads"], ["y"], name="pad")],
                       {"x": x, "p": np.zeros(2, np.int64)}, {"y": np.pad(x, 1)},
                       {"one": np.ones(2, np.int64)}, opset=18)
    with pytest.raises(NotConstant, match=r"input 1 \('pads'\).*computed from model input\(s\) 'p'") as err:
        CuvilModel.load(model)
    assert err.value.model_inputs == ("p",)
    with CuvilModel.load(model, bind={"p": [0, 0]}).optimize(targets=[Target()]) as cm:
        np.testing.assert_array_equal(cm.predict({"x": x})["y"], np.pad(x, 1))


@pytest.mark.parametrize(("bind", "match"), [
    ({"nope": [1]}, r"unknown inputs \['nope'\]; model inputs are \['x', 'axes'\]"),
    ({"axes": [1.5]}, "do not fit its type int64"),
    ({"axes": [2**70]}, "do not fit|int64"),
    ({"axes": ["1"]}, "takes int64, got <U1"),
])
def test_a_bind_that_does_not_fit_is_an_input_error(bind, match) -> None:
    with pytest.raises(InputError, match=match):
        CuvilModel.load(reduce_model(), bind=bind)


def test_the_cli_binds_from_a_list_and_from_a_npy_file(tmp_path) -> None:
    model = tmp_path / "reduce.onnx"
    model.write_bytes(reduce_model().SerializeToString())
    np.save(tmp_path / "axes.npy", np.array([1], np.int64))
    np.save(tmp_path / "x.npy", X)
    for bind in ("axes=1", f"axes=@{tmp_path / 'axes.npy'}"):
        out = tmp_path / "m.cuvil"
        assert main(["build", str(model), "-o", str(out), "--targets", "simd128-x86", "-q",
                     "--bind", bind]) == 0
        assert main(["run", str(out), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npz")]) == 0
        np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], X.sum(1), rtol=1e-6)
    assert main(["build", str(model), "-o", str(tmp_path / "n.cuvil"), "--bind", "axes=one"]) == 2


def test_dropout_in_training_mode_builds_only_with_nothing_dropped() -> None:
    """training_mode and ratio fed as inputs: named until bound; a ratio of 0 is the identity with an
    all-true mask, a ratio above 0 would drop at random and stays refused."""
    t, r = np.array(True), np.array(0.0, np.float32)
    model = make_model([N("Dropout", ["x", "r", "t"], ["y", "mask"], seed=0, name="d")],
                       {"x": X, "r": r, "t": t}, {"y": X, "mask": np.ones(X.shape, bool)}, opset=13)
    with pytest.raises(NotConstant, match="'t'"):
        CuvilModel.load(model)
    with CuvilModel.load(model, bind={"t": t, "r": r}).optimize(targets=[Target()]) as cm:
        got = cm.predict({"x": X})
    np.testing.assert_array_equal(got["y"], X)
    assert got["mask"].dtype == bool and got["mask"].all()
    with pytest.raises(UnsupportedOperator, match="drops at random"):
        CuvilModel.load(model, bind={"t": t, "r": np.array(0.25, np.float32)})
