"""Mod, Pow and BitCast in the element types ONNX allows, and SpaceToDepth's CRD mode: each a small graph
compiled, run in wasmtime and compared with onnxruntime or, for the opsets it lacks (BitCast 26, Mod's
float fmod=0 and SpaceToDepth's mode at 28), the ONNX reference evaluator."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import UnsupportedOperator
from tests.support.ort_check import check_with_ort

N = helper.make_node
#: integer results must be exact
exact = partial(check_with_ort, opset=17, rtol=0, atol=0)


def _info(name: str, a: np.ndarray) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)


def _model(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray | None],
           opset: int, inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """A graph whose inputs and outputs are typed like the example arrays (None: left untyped)."""
    outs = [helper.make_value_info(k, onnx.TypeProto()) if v is None else _info(k, v)
            for k, v in outputs.items()]
    graph = helper.make_graph(nodes, "t", [_info(k, v) for k, v in feeds.items()], outs,
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check_with_reference(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], outputs: list[str],
                         opset: int, inits: dict[str, np.ndarray] | None = None, rtol: float = 0
                         ) -> dict[str, np.ndarray]:
    """Our outputs against the ONNX reference evaluator's: equal unless ``rtol`` (nan equal to nan, and
    the sign of every value but nan the same); returns ours."""
    untyped = _model(nodes, feeds, dict.fromkeys(outputs), opset, inits)
    want = dict(zip(outputs, ReferenceEvaluator(untyped).run(None, feeds)))
    with CuvilModel.load(_model(nodes, feeds, want, opset, inits)).optimize(targets=[Target()]) as cm:
        got = cm.predict(feeds)
    for name in outputs:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=0, err_msg=name)
        if want[name].dtype.kind == "f":
            assert (np.signbit(got[name]) == np.signbit(want[name]))[~np.isnan(want[name])].all(), name
    return got


# -- Mod -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.filterwarnings("ignore:invalid value encountered in remainder:RuntimeWarning")  # its nan
def test_mod_fmod0_on_floats_takes_the_divisor_sign(dtype) -> None:
    """numpy.mod (opset 28): mixed signs, zeros of both signs, infinite divisors, nan for an inf dividend
    or a zero divisor."""
    rng = np.random.default_rng(3)
    inf, nan = np.inf, np.nan
    a = np.concatenate([rng.standard_normal(18) * 20,
                        [0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, inf, -inf, 1.0, 1.0, nan, 1.0]])
    b = np.concatenate([rng.standard_normal(18) * 3,
                        [-2.0, 2.0, 2.0, -2.0, inf, inf, -inf, -inf, 2.0, 2.0, 0.0, -0.0, 2.0, nan]])
    feeds = {"a": a.astype(dtype).reshape(4, 8), "b": b.astype(dtype).reshape(4, 8)}
    check_with_reference([N("Mod", ["a", "b"], ["y"], fmod=0), N("Mod", ["a", "r"], ["row"], fmod=0)],
                         feeds, ["y", "row"], 28, inits={"r": np.linspace(-3.5, 4.5, 8).astype(dtype)})


@pytest.mark.parametrize("dtype", [np.int16, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_on_the_other_integer_types(dtype, fmod: int) -> None:
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    a = rng.integers(max(info.min, -30000), min(info.max, 2**62), (3, 5), endpoint=True).astype(dtype)
    b = rng.integers(1, 1000, (5,)).astype(dtype)
    if info.min < 0:
        b[1::2] *= -1  # the two modes differ only where the signs do
    used = exact([N("Mod", ["a", "b"], ["y"], fmod=fmod)], {"a": a, "b": b}, ["y"]).kernels
    assert used == {f"{np.dtype(dtype).kind}{np.dtype(dtype).itemsize * 8}-mod"}


def test_mod_fmod0_on_floats_before_opset_28_stays_refused() -> None:
    a = np.ones(4, np.float32)
    with pytest.raises(UnsupportedOperator, match="'Mod' at node 'm'.*fmod=0"):
        CuvilModel.load(_model([N("Mod", ["a", "a"], ["y"], name="m")], {"a": a}, {"y": a}, 21))


# -- Pow -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("etype", [np.int32, np.int64, np.uint32, np.uint64])
def test_pow_float_base_integer_exponent(etype) -> None:
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32) * 2
    e = np.arange(12).reshape(3, 4).astype(etype) % 7
    check_with_reference([N("Pow", ["x", "e"], ["y"]), N("Pow", ["x", "c"], ["yc"])], {"x": x, "e": e},
                         ["y", "yc"], 15, inits={"c": np.array(3, etype)}, rtol=1e-5)


@pytest.mark.parametrize("btype", [np.int32, np.int64])
def test_pow_integer_base_float_exponent_truncates_a_float64_power(btype) -> None:
    """Exact where the power is an integer (3^6 = 729, not 728.99...), truncated where it is not; a
    constant fractional exponent is not truncated to an integer first."""
    x = np.array([[1, 2, 3, 7], [4, 9, -2, -3], [10, 5, 0, 2]], btype)
    e = np.array([[4, 5, 6, 3], [0.5, 1.5, 3, 2], [8, -1, 2, 2.5]], np.float32)
    exact([N("Pow", ["x", "e"], ["y"]), N("Pow", ["x", "h"], ["yh"])], {"x": np.abs(x) + 1, "e": e},
          ["y", "yh"], inits={"h": np.array(0.5, np.float32)})
    check_with_reference([N("Pow", ["x", "e"], ["y"])], {"x": x, "e": e}, ["y"], 15)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64, np.uint64])
def test_pow_integers_at_run_time_are_exact_and_wrap(dtype) -> None:
    """Square-and-multiply in the type: large powers wrap as numpy's do."""
    rng = np.random.default_rng(6)
    lo = -9 if np.dtype(dtype).kind == "i" else 0
    x = rng.integers(lo, 10, (4, 6)).astype(dtype)
    e = rng.integers(0, 70, (6,)).astype(dtype)
    got = check_with_reference([N("Pow", ["x", "e"], ["y"])], {"x": x, "e": e}, ["y"], 15)
    small = e < 3
    want = x[:, small].astype(np.int64) ** e[small].astype(np.int64)
    np.testing.assert_array_equal(got["y"][:, small], want)


def test_pow_float64_at_run_time() -> None:
    """Integral exponents exact, fractional ones through exp and log in double, the signs and specials."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(0.01, 30, 20), [-2.0, -2.0, -0.5, 0.0, -0.0, np.inf, 1.0, -1.0]])
    e = np.concatenate([rng.uniform(-6, 6, 20), [3.0, 2.0, 0.5, -1.0, -3.0, -2.0, np.nan, np.inf]])
    r = check_with_ort([N("Pow", ["x", "e"], ["y"])], {"x": x, "e": e}, ["y"], opset=17, rtol=1e-12, atol=0)
    assert r.kernels == {"f64-pow"}
    assert r.got[0]["y"][20] == -8.0


# -- BitCast -------------------------------------------------------------------------------------------
PAIRS = [(np.float32, np.int32), (np.int32, np.float32), (np.float64, np.int64), (np.int64, np.float64),
         (np.uint32, np.int32), (np.int8, np.uint8), (np.uint16, np.int16), (np.bool_, np.uint8),
         (np.uint64, np.float64), (np.int16, np.uint16)]


@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_bitcast_reinterprets_the_bytes(src, dst) -> None:
    """As a graph output (a view of a graph input: copied out) and feeding another op (a view, no code)."""
    raw = np.random.default_rng(8).integers(0, 256, 48, dtype=np.uint8)
    x = (raw % 2).astype(np.bool_) if src is np.bool_ else raw.view(src).reshape(2, -1)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    nodes = [N("BitCast", ["x"], ["y"], to=to), N("Identity", ["x"], ["xi"]),
             N("BitCast", ["xi"], ["y2"], to=to), N("Concat", ["y2", "y2"], ["z"], axis=0)]
    check_with_reference(nodes, {"x": x}, ["y", "z"], 26)


def test_bitcast_of_a_scalar_and_a_constant() -> None:
    nodes = [N("BitCast", ["x"], ["y"], to=onnx.TensorProto.INT32),
             N("BitCast", ["c"], ["yc"], to=onnx.TensorProto.FLOAT)]
    check_with_reference(nodes, {"x": np.array(-2.5, np.float32)}, ["y", "yc"], 26,
                         inits={"c": np.array([1065353216, -1071644672], np.int32)})


def test_bitcast_of_a_stored_type_is_refused() -> None:
    """float16 runs as float32, whose bits are not the float16 ones."""
    x = np.ones(4, np.float16)
    with pytest.raises(UnsupportedOperator, match="'BitCast' at node 'b'.*float16 to int16"):
        CuvilModel.load(_model([N("BitCast", ["x"], ["y"], to=onnx.TensorProto.INT16, name="b")], {"x": x},
                               {"y": x.view(np.int16)}, 26))


# -- SpaceToDepth ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_spacetodepth_modes(mode: str) -> None:
    x = np.random.default_rng(9).standard_normal((2, 3, 6, 4)).astype(np.float32)
    check_with_reference([N("SpaceToDepth", ["x"], ["y"], blocksize=2, mode=mode)], {"x": x}, ["y"], 28)
