"""Signal and math ops: DFT (opsets 17 and 20), STFT, MelWeightMatrix, the Hann/Hamming/Blackman windows,
CumProd, Det, LpNormalization and LpPool, each a small ONNX graph compiled, run in wasmtime and compared
with onnxruntime; and the variants they refuse, by op and node, at import."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper

from cuvil_edge import CuvilModel, NotConstant, Target
from cuvil_edge.codegen.kernels.table import dtype_code
from cuvil_edge.errors import UnsupportedOperator
from tests.support.ort_check import check_with_ort, make_model

N = helper.make_node
check = partial(check_with_ort, rtol=1e-4, atol=1e-5)


def rand(*shape: int, seed: int = 0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def refused(nodes, feeds, inits=None, opset: int = 17) -> str:
    """The UnsupportedOperator message importing the graph raises (the output typed but not shaped: the
    checker needs a type, the import never gets that far)."""
    outs = {"y": np.zeros(0, np.float32)}
    with pytest.raises(UnsupportedOperator) as exc:
        CuvilModel.load(make_model(nodes, feeds, outs, inits, opset))
    return str(exc.value)


# -- DFT ----------------------------------------------------------------------------------------------
DFT_VARIANTS = [  # shape, axis, dft_length (None: the axis'), inverse, onesided
    ((2, 8, 3, 1), 1, None, 0, 0),    # real, axis in the middle (inner stride 3)
    ((2, 8, 3, 2), 1, None, 0, 0),    # complex
    ((2, 8, 3, 2), 1, None, 1, 0),    # inverse: e^{+i...} / L
    ((3, 10, 1), 1, None, 0, 1),      # rfft: L/2 + 1 bins
    ((3, 9, 1), 1, 12, 0, 1),         # zero-padded to an even length, one-sided
    ((2, 8, 3, 2), 1, 5, 0, 0),       # cut to 5 points
    ((2, 6, 4, 2), 1, 10, 1, 1),      # irfft: 6 bins -> 10 real points
    ((2, 4, 3, 2), 1, 7, 1, 1),       # irfft of odd length (4 bins: no Nyquist bin)
    ((4, 6, 2), 0, None, 0, 0),       # the first axis
]


@pytest.mark.parametrize("shape,axis,length,inverse,onesided", DFT_VARIANTS)
def test_dft_opset20_axis_and_length_inputs(shape, axis, length, inverse, onesided) -> None:
    inits = {"axis": np.array(axis, np.int64)}
    if length is not None:
        inits["L"] = np.array(length, np.int64)
    node = N("DFT", ["x", "L" if length is not None else "", "axis"], ["y"], inverse=inverse,
             onesided=onesided)
    used = check([node], {"x": rand(*shape)}, ["y"], inits=inits, opset=20).kernels
    assert used == {"f32-dft"}


def test_dft_opset17_axis_attribute_and_negative_axis_input() -> None:
    x = rand(2, 7, 5, 1, seed=1)
    check([N("DFT", ["x"], ["y"], axis=2)], {"x": x}, ["y"], opset=17)
    check([N("DFT", ["x", "", "axis"], ["y"])], {"x": x}, ["y"], inits={"axis": np.array(-3, np.int64)},
          opset=20)


def test_dft_float64_runs_the_same_loop_in_double() -> None:
    x = rand(2, 16, 2, seed=2, dtype=np.float64)
    used = check([N("DFT", ["x"], ["y"], axis=1, inverse=1)], {"x": x}, ["y"], rtol=1e-10, atol=1e-12).kernels
    assert used == {"f64-dft"}


@pytest.mark.parametrize("bins,length", [(3, 8), (6, 7)])
def test_irfft_of_other_bin_counts_follows_the_onnx_reference(bins: int, length: int) -> None:
    """Bins past L/2 + 1 are cut and missing ones are zeros (numpy's irfft, the ONNX reference and its
    node cases); onnxruntime reads such inputs otherwise, so numpy is the oracle here."""
    x = rand(2, bins, 3, 2, seed=12)
    model = make_model([N("DFT", ["x", "L"], ["y"], axis=1, inverse=1, onesided=1)], {"x": x},
                       {"y": np.zeros((2, length, 3, 1), np.float32)}, {"L": np.array(length, np.int64)})
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        got = cm.predict({"x": x})["y"]
    want = np.fft.irfft(x[..., 0] + 1j * x[..., 1], n=length, axis=1)[..., None]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,axis", [((8, 64, 1), 1), ((1, 64, 24, 2), 1)])
def test_dft_threads_split_the_transforms(shape, axis) -> None:
    """Past the split threshold every thread takes whole transforms: contiguous ones (inner 1) and
    strided ones (the axis in the middle) give the single-threaded result."""
    x = rand(*shape, seed=3)
    one = check([N("DFT", ["x"], ["y"], axis=axis)], {"x": x}, ["y"], threads=1).got
    four = check([N("DFT", ["x"], ["y"], axis=axis)], {"x": x}, ["y"], threads=4).got
    np.testing.assert_array_equal(one[0]["y"], four[0]["y"])


def test_dft_refusals_name_the_node() -> None:
    x3 = rand(2, 8, 3)
    assert "'DFT' at node 'd'" in refused([N("DFT", ["x"], ["y"], axis=1, name="d")], {"x": x3})
    msg = refused([N("DFT", ["x"], ["y"], axis=2, name="d")], {"x": rand(2, 8, 2)})
    assert "'DFT' at node 'd'" in msg and "last" in msg
    msg = refused([N("DFT", ["x"], ["y"], axis=1, onesided=1, name="d")], {"x": rand(2, 8, 2)})
    assert "onesided=1 on a complex signal" in msg
    msg = refused([N("DFT", ["x"], ["y"], axis=1, name="d")], {"x": np.ones((2, 8, 1), np.int32)})
    assert "'DFT' at node 'd'" in msg and "int32" in msg
    with pytest.raises(NotConstant, match="'DFT' at node 'd'.*'L'"):  # the length sizes the output
        CuvilModel.load(make_model([N("DFT", ["x", "L"], ["y"], axis=1, name="d")],
                                   {"x": rand(2, 8, 1), "L": np.array(8, np.int64)}, {"y": rand(0)}))


# -- STFT ---------------------------------------------------------------------------------------------
def test_stft_with_window_and_frame_length() -> None:
    x = rand(2, 100, 1, seed=4)
    window = np.hanning(16).astype(np.float32)
    inits = {"step": np.array(6, np.int64), "len": np.array(16, np.int64)}
    used = check([N("STFT", ["x", "step", "w"], ["y"])], {"x": x, "w": window}, ["y"], inits=inits).kernels
    assert "f32-dft" in used  # a run-time window multiplies the frames before the transform
    check([N("STFT", ["x", "step", "", "len"], ["y"])], {"x": x}, ["y"], inits=inits)
    check([N("STFT", ["x", "step", "w", "len"], ["y"], onesided=0)], {"x": x}, ["y"],
          inits={**inits, "w": window})


def test_stft_complex_two_sided_float64() -> None:
    x = rand(1, 40, 2, seed=5, dtype=np.float64)
    inits = {"step": np.array(5, np.int64), "w": np.hamming(8)}
    check([N("STFT", ["x", "step", "w"], ["y"], onesided=0)], {"x": x}, ["y"], inits=inits, rtol=1e-9)


def test_stft_refuses_a_window_of_another_length() -> None:
    inits = {"step": np.array(4, np.int64), "len": np.array(16, np.int64), "w": np.ones(8, np.float32)}
    msg = refused([N("STFT", ["x", "step", "w", "len"], ["y"], name="s")], {"x": rand(1, 64, 1)}, inits)
    assert "'STFT' at node 's'" in msg and "window of 8 points" in msg


# -- MelWeightMatrix and windows ----------------------------------------------------------------------
MEL_INPUTS = ["bins", "length", "rate", "low", "high"]


@pytest.mark.parametrize("bins,length,rate,low,high,dtype", [
    (8, 16, 8192, 0.0, 4096.0, None), (20, 512, 16000, 20.0, 7600.0, TensorProto.DOUBLE),
    (5, 64, 22050, 300.0, 8000.0, None)])
def test_mel_weight_matrix_is_a_constant(bins, length, rate, low, high, dtype) -> None:
    inits = dict(zip(MEL_INPUTS, (np.array(bins, np.int32), np.array(length, np.int32),
                                  np.array(rate, np.int32), np.array(low, np.float32),
                                  np.array(high, np.float32))))
    attrs = {} if dtype is None else {"output_datatype": dtype}
    checked = check([N("MelWeightMatrix", MEL_INPUTS, ["y"], **attrs)], {}, ["y"], inits=inits)
    assert checked.got[0]["y"].shape == (length // 2 + 1, bins) and checked.got[0]["y"].any()


def test_mel_weight_matrix_refuses_run_time_inputs_and_edges_past_the_bins() -> None:
    values = (np.array(16, np.int32), np.array(8192, np.int32), np.array(0, np.float32))
    inits = dict(zip(MEL_INPUTS[1:], (*values, np.array(4096, np.float32))))
    with pytest.raises(NotConstant, match="'MelWeightMatrix' at node 'm'.*bind"):
        CuvilModel.load(make_model([N("MelWeightMatrix", MEL_INPUTS, ["y"], name="m")],
                                   {"bins": np.array(8, np.int32)}, {"y": rand(0)}, inits))
    for high in (8192, np.nan, -5000):  # past Nyquist, not a number, below -700 Hz
        inits = dict(zip(MEL_INPUTS, (np.array(8, np.int32), *values, np.array(high, np.float32))))
        msg = refused([N("MelWeightMatrix", MEL_INPUTS, ["y"], name="m")], {}, inits)
        assert "'MelWeightMatrix' at node 'm'" in msg and "fall outside the 9 bins" in msg


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op: str, periodic: int) -> None:
    for size, dtype in ((10, TensorProto.FLOAT), (7, TensorProto.DOUBLE)):
        checked = check([N(op, ["n"], ["y"], periodic=periodic, output_datatype=dtype)], {}, ["y"],
                        inits={"n": np.array(size, np.int64)})
        assert checked.got[0]["y"].shape == (size,)


def test_window_size_bound_at_build_time() -> None:
    """The size is what a model feeds; ``bind`` fixes it, as for every input that sizes an output."""
    model = make_model([N("HannWindow", ["n"], ["y"], name="w")], {"n": np.array(12, np.int32)},
                       {"y": rand(12)})
    with pytest.raises(NotConstant, match="'HannWindow' at node 'w'"):
        CuvilModel.load(model)
    with CuvilModel.load(model, bind={"n": 12}).optimize(targets=[Target()]) as cm:
        got = cm.predict({})["y"]
    np.testing.assert_allclose(got, np.sin(np.pi * np.arange(12) / 12) ** 2, atol=1e-6)


# -- CumProd ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype,axis", [(np.float32, 1), (np.int32, 0), (np.int64, -1), (np.float64, 2)])
def test_cumprod(exclusive: int, reverse: int, dtype, axis: int) -> None:
    x = (np.random.default_rng(6).integers(1, 4, (3, 4, 5)) * np.where(np.arange(5) % 2, -1, 1)).astype(dtype)
    used = check([N("CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)], {"x": x}, ["y"],
                 inits={"axis": np.array(axis, np.int64)}, opset=26, rtol=0, atol=0).kernels
    assert used == {f"{dtype_code(np.dtype(dtype).name)}-cumprod"}


# -- Det ----------------------------------------------------------------------------------------------
def test_det_batched_singular_and_pivoting() -> None:
    x = rand(2, 3, 4, 4, seed=7)
    x[0, 0] = [[0, 1, 2, 3], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]  # a zero first pivot: rows swap
    x[0, 1, 3] = x[0, 1, 0] + x[0, 1, 1]  # singular
    used = check([N("Det", ["x"], ["y"])], {"x": x}, ["y"], opset=22).kernels
    assert used == {"f32-det"}
    check([N("Det", ["x"], ["y"])], {"x": rand(5, 5, seed=8)}, ["y"], opset=22)


def test_det_float64_matches_numpy() -> None:
    """onnxruntime has no float64 Det; numpy's LU is the reference the kernel follows."""
    x = rand(3, 6, 6, seed=9, dtype=np.float64)
    model = make_model([N("Det", ["x"], ["y"])], {"x": x}, {"y": np.zeros(3)}, None, 22)
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        got = cm.predict({"x": x})["y"]
    np.testing.assert_allclose(got, np.linalg.det(x), rtol=1e-12)


def test_det_refuses_non_square() -> None:
    msg = refused([N("Det", ["x"], ["y"], name="d")], {"x": rand(3, 4)}, opset=22)
    assert "'Det' at node 'd'" in msg and "[..., M, M]" in msg


# -- LpNormalization ----------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_lp_normalization_with_a_zero_slice(p: int, axis: int) -> None:
    x = rand(3, 4, 5, seed=10)
    x[1, :, 2] = 0
    x[:, 2, :] = 0
    x[0, 0, :] = 0
    check([N("LpNormalization", ["x"], ["y"], p=p, axis=axis)], {"x": x}, ["y"], opset=22)


def test_lp_normalization_refusals() -> None:
    msg = refused([N("LpNormalization", ["x"], ["y"], p=3, name="n")], {"x": rand(2, 3)}, opset=22)
    assert "'LpNormalization' at node 'n'" in msg and "p=3" in msg
    msg = refused([N("LpNormalization", ["x"], ["y"], name="n")], {"x": rand(2, 3, dtype=np.float64)},
                  opset=22)
    assert "float64" in msg


# -- LpPool -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,attrs", [
    ((1, 2, 9), {"kernel_shape": [3], "p": 1}),
    ((1, 3, 8, 9), {"kernel_shape": [3, 2], "p": 2, "strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ((1, 3, 8, 9), {"kernel_shape": [3, 3], "p": 3, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((2, 2, 9, 9), {"kernel_shape": [2, 3], "p": 4, "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 2, 3], "p": 2, "strides": [2, 2, 2], "ceil_mode": 1}),
])
def test_lp_pool(shape, attrs) -> None:
    used = check([N("LpPool", ["x"], ["y"], **attrs)], {"x": rand(*shape, seed=11)}, ["y"], opset=22).kernels
    assert any(k.startswith("f32-avgpool-") for k in used)  # the sum pool: average kernel, divisors of 1


def test_lp_pool_refuses_float64() -> None:
    msg = refused([N("LpPool", ["x"], ["y"], kernel_shape=[2], name="l")],
                  {"x": rand(1, 2, 6, dtype=np.float64)}, opset=22)
    assert "'LpPool' at node 'l'" in msg and "float64" in msg
