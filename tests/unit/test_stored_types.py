"""Stored element types: bfloat16, the float8 formats, float4, int4/uint4 and int2/uint2 held in their own
format at the graph's edges and computed in a wider type between, Cast and CastLike with ONNX's rounding
and ``saturate`` rules, QuantizeLinear/DequantizeLinear to and from them, Cast between float widths and
float64 math at run time. Each is a small ONNX graph compiled, run in wasmtime and compared with
onnxruntime where it takes the types (inside a graph: its Python binding neither takes nor gives most of
them, so those graphs have float32 inputs and outputs), and at the graph's edges with ONNX's own
reference implementation of the op (what the ONNX node cases are generated with)."""

from __future__ import annotations

from functools import partial

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference.ops.op_cast import cast_to

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import UnsupportedOperator
from runtime_wasm.errors import InferenceInputError
from runtime_wasm.spec import TensorSpec, from_storage, storage_dtype, to_storage
from tests.support.ort_check import check_with_ort, make_model

N = helper.make_node
TP = TensorProto
#: onnxruntime as the oracle, exactly: a conversion has one right answer
check = partial(check_with_ort, opset=21, rtol=0, atol=0)
#: every finite and special float32 a conversion treats apart: ties, each type's largest values and the
#: values just past them, subnormals of every width, signed zeros, infinities and NaN
SPECIAL = np.array([0.0, -0.0, 0.3, -2.5, 3.5, 0.25, 0.75, 5.0, 6.5, 240.0, 248.0, 255.9, 448.0, 464.0, 470.0,
                    -480.0, 57344.0, 61439.0, 61440.0, 1e6, -1e6, 2.0**-9, 2.0**-10, 1.5 * 2.0**-10, 2.0**-17,
                    2.0**-18, 1e-7, -1e-7, 2.0**-130, 3.0e38, np.inf, -np.inf, np.nan], np.float32)
#: ONNX float element type -> the kernel code of its conversions (``NAMING.md``)
FLOATS = {TP.BFLOAT16: "bf16", TP.FLOAT8E4M3FN: "f8e4m3", TP.FLOAT8E4M3FNUZ: "f8e4m3uz",
          TP.FLOAT8E5M2: "f8e5m2", TP.FLOAT8E5M2FNUZ: "f8e5m2uz"}
FLOAT8 = (TP.FLOAT8E4M3FN, TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2, TP.FLOAT8E5M2FNUZ)


def values(seed: int = 0) -> np.ndarray:
    """``SPECIAL`` and a spread of magnitudes from 2^-20 to 2^20 of both signs."""
    rng = np.random.default_rng(seed)
    spread = rng.standard_normal(300) * 2.0 ** rng.integers(-20, 20, 300)
    return np.concatenate([SPECIAL, spread.astype(np.float32)])


def edge_model(nodes: list, inputs: dict[str, np.ndarray], outputs: dict[str, int], opset: int = 25):
    """A model whose inputs are typed like their arrays (ml_dtypes ones included) and outputs as given,
    each shaped like the first input."""
    shape = next(iter(inputs.values())).shape
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(
        k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, t, shape) for k, t in outputs.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(model, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], set[str]]:
    """Our outputs and the kernels the model ran."""
    shapes = {k: v.shape for k, v in feeds.items()}
    with CuvilModel.load(model, input_shapes=shapes).optimize(targets=[Target()]) as cm:
        return cm.predict(feeds), set(cm.compiled.program.kernels_used.values())


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype and shape, the same numbers (NaN where NaN) and the same signs of zero."""
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    with np.errstate(invalid="ignore"):  # NaN widens to NaN; numpy warns on the narrow types' NaN
        a, b = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.signbit(a[a == 0]), np.signbit(b[a == 0]))


# -- Cast inside a graph, against onnxruntime ------------------------------------------------------------
@pytest.mark.parametrize("to", list(FLOATS))
def test_cast_to_a_narrow_float_and_back_matches_ort(to: int) -> None:
    """float32 -> the type -> float32: round to nearest even, subnormals, overflow to the largest finite
    value (saturate=1, the default), NaN kept, FNUZ without -0. (Without saturation onnxruntime 1.32
    departs from ONNX's reference where a value rounds past the largest finite one: -480 -> -448 in
    E4M3FN, 61440 -> NaN for inf in E5M2; ``test_cast_to_stored_output_as_onnx_reference`` has those.)"""
    used = check([N("Cast", ["x"], ["n"], to=to), N("Cast", ["n"], ["y"], to=TP.FLOAT)], {"x": values()},
                 ["y"]).kernels
    code = FLOATS[to]  # bfloat16 values stay float32, rounded in place as after any bfloat16 op
    assert used == ({"f32-vroundbf16"} if code == "bf16" else {f"f32-{code}-vcvt", f"{code}-f32-vcvt"})


def test_bfloat16_ops_round_after_each_op() -> None:
    """A bfloat16 chain computes in float32 with the result rounded to bfloat16 after each op, as ONNX
    defines each op's bfloat16 output (onnxruntime's CPU provider has no bfloat16 Mul or Add: the oracle
    is numpy, each step rounded by ml_dtypes)."""
    x = values()[:-3]  # finite: the graph squares them
    nodes = [N("Cast", ["x"], ["b"], to=TP.BFLOAT16), N("Mul", ["b", "b"], ["p"]),
             N("Add", ["p", "b"], ["s"]), N("Cast", ["s"], ["y"], to=TP.FLOAT)]
    got, used = run(make_model(nodes, {"x": x}, {"y": x}, {}, 21), {"x": x})
    assert "f32-vroundbf16" in used
    step = lambda v: v.astype(ml_dtypes.bfloat16).astype(np.float32)  # noqa: E731
    b = step(x)
    with np.errstate(over="ignore", invalid="ignore"):  # squares past bfloat16's range are inf, as ours
        want = step(step(b * b) + b)
    np.testing.assert_array_equal(got["y"], want)


# -- graph edges, against ONNX's reference --------------------------------------------------------------
EDGE_TYPES = {TP.BFLOAT16: ml_dtypes.bfloat16, TP.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
              TP.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz, TP.FLOAT8E5M2: ml_dtypes.float8_e5m2,
              TP.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz, TP.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu,
              TP.FLOAT4E2M1: ml_dtypes.float4_e2m1fn, TP.INT4: ml_dtypes.int4, TP.UINT4: ml_dtypes.uint4,
              TP.INT2: ml_dtypes.int2, TP.UINT2: ml_dtypes.uint2}


def every_value(dtype) -> np.ndarray:
    """Every value of a stored type (its bit patterns; bfloat16: every 97th of them)."""
    info = ml_dtypes.iinfo(dtype) if np.dtype(dtype).name in ("int4", "uint4", "int2", "uint2") else None
    if info is not None:
        return np.arange(info.min, info.max + 1).astype(dtype)
    if np.dtype(dtype).itemsize == 2:
        return np.arange(0, 1 << 16, 97, dtype=np.uint16).view(dtype)
    bits = np.arange(256, dtype=np.uint8)
    if np.dtype(dtype).name == "float4_e2m1fn":
        bits = bits[:16]
    return bits.view(dtype)


@pytest.mark.parametrize("elem", list(EDGE_TYPES))
def test_stored_input_widens_and_output_narrows_exactly(elem: int) -> None:
    """Every value of the type as a model input: Cast to float32 gives its value, and passed through to
    an output of the same type it comes back the same (the caller gets an ml_dtypes array)."""
    x = every_value(EDGE_TYPES[elem])
    model = edge_model([N("Cast", ["x"], ["y"], to=TP.FLOAT), N("Identity", ["x"], ["z"])], {"x": x},
                       {"y": TP.FLOAT, "z": elem})
    got, _ = run(model, {"x": x})
    assert_same(got["y"], x.astype(np.float32))
    assert_same(got["z"], x)


@pytest.mark.parametrize("to, saturate, mode", [
    *((t, 0, None) for t in FLOAT8), (TP.FLOAT8E5M2FNUZ, 1, None), (TP.FLOAT4E2M1, 1, None),
    (TP.FLOAT8E8M0, 1, "up"), (TP.FLOAT8E8M0, 0, "nearest"), (TP.FLOAT8E8M0, 1, "down"),
    *((t, 1, None) for t in (TP.INT4, TP.UINT4, TP.INT2, TP.UINT2))])
def test_cast_to_stored_output_as_onnx_reference(to: int, saturate: int, mode: str | None) -> None:
    """A float16 input cast to a stored-type output: what onnx.reference's Cast gives, bit for bit
    (without saturation NaN, or inf for E5M2, past the largest value; FLOAT4E2M1 always saturates;
    FLOAT8E8M0's round_mode; the small integers truncate and wrap, 9.5 -> -7 as int4: onnxruntime 1.32
    rounds to nearest there instead)."""
    with np.errstate(over="ignore"):
        x = values().astype(np.float16)
    attrs = {"saturate": saturate} | ({"round_mode": mode} if mode else {})
    got, _ = run(edge_model([N("Cast", ["x"], ["y"], to=to, **attrs)], {"x": x}, {"y": to}), {"x": x})
    assert_same(got["y"], cast_to(x, to, bool(saturate), mode or "up"))


def test_castlike_takes_the_stored_type_of_its_target() -> None:
    """CastLike to a uint4 and a float8 tensor: the like's type decides (a byte or a float32 as held)."""
    x = np.array([-3.0, 9.5, 17.0, 1e3, -0.2], np.float32)
    like_u4, like_f8 = np.zeros(1, ml_dtypes.uint4), np.zeros(1, ml_dtypes.float8_e4m3fnuz)
    model = edge_model([N("CastLike", ["x", "u"], ["a"]), N("CastLike", ["x", "f"], ["b"], saturate=0)],
                       {"x": x, "u": like_u4, "f": like_f8}, {"a": TP.UINT4, "b": TP.FLOAT8E4M3FNUZ})
    got, _ = run(model, {"x": x, "u": like_u4, "f": like_f8})
    assert_same(got["a"], x.astype(ml_dtypes.uint4))
    assert_same(got["b"], cast_to(x, TP.FLOAT8E4M3FNUZ, False))


# -- QuantizeLinear / DequantizeLinear -----------------------------------------------------------------
@pytest.mark.parametrize("zp", [np.array([1, -2, 0], ml_dtypes.int4), np.array([3, 0, 15], ml_dtypes.uint4),
                                np.zeros(3, ml_dtypes.float8_e4m3fn), np.zeros(3, ml_dtypes.float8_e5m2)])
def test_quantize_dequantize_narrow_types_match_ort(zp: np.ndarray) -> None:
    """Per-axis QuantizeLinear to the zero point's type and back: rounding half to even, clamping to the
    4-bit range, float8 saturation."""
    x = np.linspace(-40, 40, 24, dtype=np.float32).reshape(2, 3, 4)
    x[0, 0, :3] = [2.5, 3.5, 1e4]
    inits = {"s": np.array([2.0, 0.5, 4.0], np.float32), "z": zp}
    nodes = [N("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             N("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    check(nodes, {"x": x}, ["y"], inits=inits)


def test_dequantize_stored_input_and_quantize_to_stored_output() -> None:
    """int4 and float8 model inputs dequantized, and a QuantizeLinear to an int4 output, as onnx's
    reference computes them."""
    xi, xf = every_value(ml_dtypes.int4), every_value(ml_dtypes.float8_e4m3fn)[:120]
    f = np.linspace(-9, 9, 16, dtype=np.float32)
    s, zi = np.array(1.5, np.float32), np.array(2, ml_dtypes.int4)
    feeds = {"xi": xi, "xf": xf, "f": f, "s": s, "zi": zi}
    nodes = [N("DequantizeLinear", ["xi", "s", "zi"], ["yi"]), N("DequantizeLinear", ["xf", "s"], ["yf"]),
             N("QuantizeLinear", ["f", "s", "zi"], ["q"])]
    got, _ = run(edge_model(nodes, feeds, {"yi": TP.FLOAT, "yf": TP.FLOAT, "q": TP.INT4}), feeds)
    assert_same(got["yi"], (xi.astype(np.float32) - 2) * np.float32(1.5))
    assert_same(got["yf"], xf.astype(np.float32) * np.float32(1.5))
    assert_same(got["q"], np.clip(np.rint(f / np.float32(1.5)) + 2, -8, 7).astype(ml_dtypes.int4))


# -- float widths and float64 math at run time --------------------------------------------------------
def test_cast_between_float_widths_at_run_time() -> None:
    """float16 <-> float64 and float64 -> float32 at run time (through float32 where that is exact)."""
    x = values()[:-3]
    x = x[np.abs(x) < 60000].astype(np.float16)
    nodes = [N("Cast", ["x"], ["d"], to=TP.DOUBLE), N("Mul", ["d", "d"], ["p"]),
             N("Cast", ["p"], ["h"], to=TP.FLOAT16), N("Cast", ["p"], ["f"], to=TP.FLOAT)]
    used = check(nodes, {"x": x}, ["d", "h", "f"], opset=19).kernels
    assert {"f32-f64-vcvt", "f64-f32-vcvt"} <= used


@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_float64_unary_math_at_run_time(op: str) -> None:
    """float64 Sin, Cos, ... run on the float32 kernels between two casts: within float32's precision (Exp,
    Log and the exact ones run in double: tests/unit/test_float64_einsum.py)."""
    x = np.linspace(0.05, 8, 40).astype(np.float64)
    used = check([N(op, ["x"], ["y"])], {"x": x}, ["y"], opset=19, rtol=2e-6, atol=1e-7).kernels
    assert {"f64-f32-vcvt", "f32-f64-vcvt"} <= used


# -- refused variants and the device side ---------------------------------------------------------------
def test_cast_to_a_type_without_a_format_is_refused_naming_the_node() -> None:
    x = np.ones(3, np.float32)
    model = edge_model([N("Cast", ["x"], ["y"], to=TP.FLOAT6E2M3, name="to6")], {"x": x},
                       {"y": TP.FLOAT6E2M3}, opset=28)
    with pytest.raises(UnsupportedOperator, match="'Cast' at node 'to6'.*FLOAT6E2M3"):
        CuvilModel.load(model)


def test_unary_on_integers_at_run_time_is_refused_naming_the_node() -> None:
    x = np.ones(3, np.int32)
    with pytest.raises(UnsupportedOperator, match="'Abs' at node 'a'.*int32 at run time"):
        CuvilModel.load(make_model([N("Abs", ["x"], ["y"], name="a")], {"x": x}, {"y": x}, {}, 13))


def test_device_conversions_need_no_ml_dtypes_for_raw_storage() -> None:
    """The device holds stored types as plain numpy types: raw storage arrays go in as they are (bits for
    the floats, values for the integers), an out-of-range int4 is refused, ml_dtypes arrays convert."""
    b = TensorSpec("b", "bfloat16", (3,), 0)
    i = TensorSpec("i", "int4", (3,), 0)
    assert storage_dtype("bfloat16") == np.uint16 and storage_dtype("int4") == np.int8
    raw = np.array([0x3F80, 0xC000, 0x7FC0], np.uint16)
    assert to_storage(b, raw) is raw
    np.testing.assert_array_equal(to_storage(b, np.array([1.0, -2.0, 3.0], ml_dtypes.bfloat16)),
                                  [0x3F80, 0xC000, 0x4040])
    np.testing.assert_array_equal(to_storage(i, np.array([-8, 7, 0], ml_dtypes.int4)), [-8, 7, 0])
    with pytest.raises(InferenceInputError, match="int4: values must be in"):
        to_storage(i, np.array([3, 8, 0], np.int8))
    assert from_storage("int4", np.array([-8, 7], np.int8)).dtype == ml_dtypes.int4
    assert from_storage("bfloat16", raw).astype(np.float32)[:2].tolist() == [1.0, -2.0]


def test_golden_vectors_of_a_stored_type_model_are_drawn_in_range(tmp_path) -> None:
    """The build's golden vectors (``random_feeds``) for bfloat16, float8_e8m0 and int4 inputs: storage
    arrays the device takes, int4 over its whole range, e8m0 without NaN; the model answers them."""
    from cuvil_edge.oracle import random_feeds
    from cuvil_edge.signing import golden_vectors

    x = {"b": np.ones((4, 8), ml_dtypes.bfloat16), "e": np.ones((4, 8), ml_dtypes.float8_e8m0fnu),
         "i": np.ones((4, 8), ml_dtypes.int4)}
    nodes = [N("Cast", [k], [f"{k}f"], to=TP.FLOAT) for k in x] + [N("Sum", ["bf", "ef", "if"], ["y"])]
    with CuvilModel.load(edge_model(nodes, x, {"y": TP.FLOAT})).optimize(targets=[Target()]) as cm:
        feeds = random_feeds(cm.spec.inputs, 3)
        assert feeds["i"].dtype == np.int8 and feeds["i"].min() == -8 and feeds["i"].max() == 7
        assert feeds["b"].dtype == np.uint16 and feeds["e"].dtype == np.uint8
        assert not np.isnan(feeds["e"].view(ml_dtypes.float8_e8m0fnu).astype(np.float32)).any()
        want = sum(from_storage(t.dtype, feeds[t.name]).astype(np.float32) for t in cm.spec.inputs)
        np.testing.assert_allclose(cm.predict(feeds)["y"], want, rtol=1e-6)
        vectors = golden_vectors(cm.save(tmp_path / "m"), count=2)
    assert len(vectors) == 2
