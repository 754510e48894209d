"""Ops that third-party models in the wild needed (issue 16): Mod, cubic Resize, Expand by a run-time
shape, 3D ConvTranspose and float16 graphs, each a small ONNX graph compiled, run in wasmtime and
compared with onnxruntime."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import NotConstant, UnsupportedOperator
from runtime_wasm.errors import InferenceTrap
from tests.support.ort_check import check_with_ort, make_model

N = helper.make_node
#: the shared check with this file's defaults: opset 19, closer than the shared tolerances
check = partial(check_with_ort, opset=19, rtol=1e-5, atol=1e-5)
#: every coordinate mode onnxruntime runs (it and the ONNX reference reject tf_half_pixel_for_nearest);
#: tf_crop_and_resize, which also takes a box, has its own test
RESIZE_COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric")


def rand(*shape: int, seed: int = 0, scale: float = 1.0, dtype=np.float32) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


# -- Mod ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_integers_broadcast(dtype, fmod: int) -> None:
    rng = np.random.default_rng(1)
    lo = 0 if dtype == np.uint8 else -60
    a = rng.integers(lo, 100, (2, 3, 4)).astype(dtype)
    b = rng.integers(1, 9, (3, 1)).astype(dtype)
    if dtype != np.uint8:
        b[1, 0] = -5  # the sign rules differ between fmod 0 and 1 only for mixed signs
    used = check([N("Mod", ["a", "b"], ["y"], fmod=fmod)], {"a": a, "b": b}, ["y"], rtol=0, atol=0).kernels
    assert used == {f"{np.dtype(dtype).kind}{np.dtype(dtype).itemsize * 8}-mod"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mod_floats_are_exact_fmod(dtype) -> None:
    """C fmod bit for bit: huge quotients (1e30 mod 3), subnormals, negative operands, inf divisors."""
    a = rand(2, 3, 4, scale=10, dtype=dtype)
    b = rand(3, 1, seed=1, scale=3, dtype=dtype)
    a[0, 0, :4] = [1e30, -7.5, np.finfo(dtype).tiny / 8, 5.0]
    b[0, 0] = 3.0
    b[2, 0] = np.inf
    check([N("Mod", ["a", "b"], ["y"], fmod=1)], {"a": a, "b": b}, ["y"], rtol=0, atol=0)


def test_mod_fmod0_on_floats_is_refused_at_import() -> None:
    a = rand(4)
    with pytest.raises(UnsupportedOperator, match="'Mod' at node 'm'.*fmod=0"):
        CuvilModel.load(make_model([N("Mod", ["a", "a"], ["y"], name="m")], {"a": a}, {"y": a}, {}, 13))


# -- Resize cubic ------------------------------------------------------------------------------------
@pytest.mark.parametrize("coord", RESIZE_COORDS)
def test_resize_cubic_every_coordinate_mode(coord: str) -> None:
    """Up by sizes (odd factors), down by scales, and a (cubic_coeff_a, exclude_outside) variant each."""
    x = rand(1, 2, 5, 7)
    cases = [({"sizes": np.array([1, 2, 9, 13], np.int64)}, {}),
             ({"scales": np.array([1, 1, 0.6, 0.5], np.float32)}, {}),
             ({"scales": np.array([1, 1, 2.5, 1.5], np.float32)},
              {"cubic_coeff_a": -0.5, "exclude_outside": 1})]
    for inits, attrs in cases:
        ins = ["x", "", "scales" if "scales" in inits else "", "sizes" if "sizes" in inits else ""]
        used = check([N("Resize", ins, ["y"], mode="cubic", coordinate_transformation_mode=coord,
                        **attrs)], {"x": x}, ["y"], inits=inits).kernels
        assert used == {"f32-resize-bicubic-4"}


CROPS = [  # roi (starts then ends, as fractions of the input), extrapolation_value, exclude_outside, sizes
    ([0, 0, 0.2, 0.1, 1, 1, 0.8, 0.9], 0.0, 0, [1, 2, 6, 9]),
    ([0, 0, -0.3, 0.4, 1, 1, 1.2, 1.5], 2.5, 0, [1, 2, 8, 5]),
    ([0, 0, -0.3, 0.4, 1, 1, 1.2, 1.5], -1.0, 1, [1, 2, 1, 5]),
]


@pytest.mark.parametrize("i", range(len(CROPS)))
def test_resize_cubic_tf_crop_and_resize(i: int) -> None:
    """The crop box inside and past the input (extrapolated there: zero, or a value filled after)."""
    roi, value, exclude, sizes = CROPS[i]
    inits = {"roi": np.array(roi, np.float32), "sizes": np.array(sizes, np.int64)}
    node = N("Resize", ["x", "roi", "", "sizes"], ["y"], mode="cubic", extrapolation_value=value,
             coordinate_transformation_mode="tf_crop_and_resize", exclude_outside=exclude)
    checked = check([node], {"x": rand(1, 2, 5, 7)}, ["y"], inits=inits)
    assert checked.kernels == {"f32-resize-bicubic-4"}
    assert (np.count_nonzero(checked.got[0]["y"] == value) > 0) == (i > 0)


def test_resize_tf_crop_and_resize_other_modes_are_refused_at_import() -> None:
    x = rand(1, 1, 4, 4)
    inits = {"roi": np.array([0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9], np.float32),
             "sizes": np.array([1, 1, 3, 3], np.int64)}
    node = N("Resize", ["x", "roi", "", "sizes"], ["y"], name="r", mode="nearest",
             coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(UnsupportedOperator, match="'Resize' at node 'r'.*linear and cubic only"):
        CuvilModel.load(make_model([node], {"x": x}, {"y": np.zeros((1, 1, 3, 3), np.float32)}, inits, 19))


def test_resize_cubic_of_position_embeddings_folds_at_build_time() -> None:
    """A ViT resizing its learned position grid (a constant) to the input's patch grid: folded at import
    by the numpy reference of the same tables, so nothing resizes at run time."""
    pos = rand(1, 8, 6, 6, seed=7)  # [1, C, h, w]
    x = rand(1, 8, 9, 9, seed=8)
    nodes = [N("Resize", ["pos", "", "", "sizes"], ["p9"], mode="cubic", cubic_coeff_a=-0.75),
             N("Add", ["x", "p9"], ["y"])]
    checked = check(nodes, {"x": x}, ["y"], inits={"pos": pos, "sizes": np.array([1, 8, 9, 9], np.int64)})
    assert not any("resize" in k for k in checked.kernels)


def test_resize_cubic_exclude_outside_differs_from_edge_clamping() -> None:
    """The two border rules give different numbers near the edge, and each matches onnxruntime."""
    x = rand(1, 1, 4, 4, seed=3)
    sizes = {"sizes": np.array([1, 1, 8, 8], np.int64)}
    outs = [check([N("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic", exclude_outside=ex)], {"x": x},
                  ["y"], inits=sizes).want[0]["y"] for ex in (0, 1)]
    assert np.abs(outs[0] - outs[1]).max() > 1e-3


# -- Expand by a run-time shape -----------------------------------------------------------------------
def test_expand_runtime_shape_uses_declared_output_and_checks_it() -> None:
    x = rand(3, 1)
    shape = np.array([2, 1, 4], np.int64)
    check([N("Expand", ["x", "s"], ["y"])], {"x": x, "s": shape}, ["y"], rtol=0, atol=0)
    # another shape that broadcasts to the same declared output runs too; one that does not traps
    model = make_model([N("Expand", ["x", "s"], ["y"])], {"x": x, "s": shape},
                   {"y": np.zeros((2, 3, 4), np.float32)}, {}, 13)
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        got = cm.predict({"x": x, "s": np.array([2, 3, 4], np.int64)})["y"]
        np.testing.assert_array_equal(got, np.broadcast_to(x, (2, 3, 4)))
        with pytest.raises(InferenceTrap):
            cm.predict({"x": x, "s": np.array([2, 1, 5], np.int64)})


def test_expand_runtime_shape_without_declared_output_is_refused() -> None:
    x = rand(3, 1)
    model = make_model([N("Expand", ["x", "s"], ["y"], name="e")], {"x": x, "s": np.array([2, 1], np.int64)},
                   {"y": None}, {}, 13)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"]))
    with pytest.raises(NotConstant, match=r"'Expand' at node 'e'.*no static shape.*input 1 \('s'\)"):
        CuvilModel.load(model)


def test_size_folds_to_a_constant() -> None:
    """``Size`` (silero-vad's decoder reads it) is static like ``Shape``."""
    x = rand(2, 3, 4)
    nodes = [N("Size", ["x"], ["n"]), N("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             N("Mul", ["x", "nf"], ["y"])]
    check(nodes, {"x": x}, ["y"])


# -- ConvTranspose 3D ---------------------------------------------------------------------------------
CONVT3D = [
    dict(),
    dict(strides=[2, 2, 2], pads=[1, 0, 1, 0, 1, 1]),
    dict(strides=[1, 2, 3], dilations=[2, 1, 1], output_padding=[0, 1, 2], group=2),
    dict(strides=[2, 1, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 2, 1], output_shape=[7, 8, 5]),
]


@pytest.mark.parametrize("i", range(len(CONVT3D)))
def test_conv_transpose_3d(i: int) -> None:
    attrs = CONVT3D[i]
    g = attrs.get("group", 1)
    x, w, b = rand(2, 4, 3, 4, 5), rand(4, 6 // g, 3, 2, 3, seed=1), rand(6, seed=2)
    check([N("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], {"x": x}, ["y"], inits={"w": w, "b": b},
          rtol=1e-4)


# -- float16 graphs -----------------------------------------------------------------------------------
def test_fp16_conv_softmax_graph_with_fp16_input_and_output() -> None:
    """fp16 initializers, a run-time Cast float32 -> float16, fp16 Conv/Relu/MatMul/Add/Softmax, fp16 and
    fp32 outputs: every output within one fp16 rounding step of onnxruntime's."""
    f16 = np.float16
    inits = {"w": rand(8, 3, 3, 3, seed=1, scale=0.5, dtype=f16), "b": rand(8, seed=2, dtype=f16),
             "mm": rand(8, 5, seed=3, scale=0.3, dtype=f16)}
    nodes = [N("Cast", ["x32"], ["x32h"], to=TensorProto.FLOAT16),
             N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             N("Relu", ["c"], ["r"]),
             N("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
             N("MatMul", ["t", "mm"], ["m"]),
             N("Add", ["m", "x32h"], ["a"]),
             N("Softmax", ["a"], ["y"], axis=-1),
             N("Cast", ["y"], ["y32"], to=TensorProto.FLOAT)]
    inputs = {"x": rand(1, 3, 6, 6, seed=4, dtype=f16), "x32": rand(1, 6, 6, 5, seed=5, scale=3)}
    used = check(nodes, inputs, ["c", "y", "y32"], inits=inits, opset=17, rtol=2e-3, atol=1e-3).kernels
    assert {"h-f32-vcvt", "f32-vroundh", "f32-h-vcvt"} <= used


def test_fp16_cast_rounds_to_nearest_even_with_inf_nan_and_subnormals() -> None:
    special = np.array([65504, 65519.99, 65520, -70000, np.inf, -np.inf, np.nan, 2.0 ** -24, 2.0 ** -25,
                        3 * 2.0 ** -26, 2.0 ** -14 - 2.0 ** -25, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, -0.0,
                        1e-30, 0.1, -2.5e-6], np.float32)
    bits = np.random.default_rng(6).integers(0, 2**32, 4032, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([special, rand(47, seed=6, scale=1000), bits.view(np.float32)]).reshape(64, 64)
    nodes = [N("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             N("Cast", ["h"], ["back"], to=TensorProto.FLOAT), N("Mul", ["h", "h"], ["sq"])]
    got = check(nodes, {"x": x}, ["h", "back", "sq"], rtol=0, atol=0).got[0]
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16)
    nan = np.isnan(want)  # any NaN will do (ours are quiet, numpy keeps signalling payloads)
    np.testing.assert_array_equal(np.isnan(got["h"]), nan)
    np.testing.assert_array_equal(got["h"][~nan].view(np.uint16), want[~nan].view(np.uint16))
    np.testing.assert_array_equal(got["back"][~nan], want[~nan].astype(np.float32))


def test_fp16_rounds_after_every_op_as_onnx_defines() -> None:
    """((x + 2048) - 2048) * 3 / 7 in float16 loses x's fraction at the first op; each op's output is
    rounded to half, bit for bit as the ONNX reference evaluator computes it. onnxruntime is no oracle
    here: its CPU provider runs fp16 Add/Sub as float32 with the casts between them removed, so it keeps
    the fraction (the conv graph above matches it within one fp16 rounding step)."""
    from onnx.reference import ReferenceEvaluator

    x = np.linspace(-3, 3, 24).astype(np.float16)
    inits = {k: np.array(v, np.float16) for k, v in (("c", 2048), ("three", 3), ("seven", 7))}
    nodes = [N("Add", ["x", "c"], ["s"]), N("Sub", ["s", "c"], ["d"]), N("Mul", ["d", "three"], ["m"]),
             N("Div", ["m", "seven"], ["y"])]
    model = make_model(nodes, {"x": x}, {"y": x}, inits, 17)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        got = cm.predict({"x": x})["y"]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    unrounded = (x.astype(np.float32) * 3 / 7).astype(np.float16)
    assert np.any(got != unrounded)


def test_out_of_order_nodes_are_sorted_at_load() -> None:
    """onnxruntime's fp16 converter (keep_io_types) appends the input Casts after their users; onnxruntime
    runs such graphs, so they load here too, in order. An ordered model is not copied."""
    from cuvil_edge.frontend.onnx.importer import load_onnx

    x = rand(2, 3)
    nodes = [N("Relu", ["s"], ["y"]), N("Add", ["c", "c"], ["s"]),
             N("Cast", ["x"], ["c"], to=TensorProto.FLOAT)]
    got = check(nodes, {"x": x}, ["y"]).got[0]
    np.testing.assert_array_equal(got["y"], np.maximum(2 * x, 0))
    ordered = make_model(nodes[::-1], {"x": x}, {"y": x}, {}, 17)
    assert load_onnx(ordered) is ordered


# -- OneHot and ScatterElements (SLANet's decoder writes its steps with them) ---------------------------
#: (axis, indices, depth and values dtypes: combinations onnxruntime implements); negative and
#: out-of-range indices in every case
ONEHOT = [(-1, np.int64, np.int64, np.float32), (0, np.int32, np.int32, np.float32),
          (1, np.float32, np.int64, np.int64), (-2, np.int64, np.float32, np.int32)]


@pytest.mark.parametrize("i", range(len(ONEHOT)))
def test_onehot_every_axis_and_index_type(i: int) -> None:
    axis, itype, dtype, vtype = ONEHOT[i]
    ind = np.array([[0, 4, -1], [-5, 5, 2]], itype)  # depth 5: -5 is 0, 5 marks nothing
    got = check([N("OneHot", ["ind", "depth", "values"], ["y"], axis=axis)], {"ind": ind}, ["y"],
                inits={"depth": np.array([5], dtype), "values": np.array([-2, 3], vtype)}).got[0]
    assert (got["y"] == 3).sum() == 5  # five indices in range, one on each


def test_onehot_depth_known_only_at_run_time_is_refused_at_import() -> None:
    graph = make_model([N("OneHot", ["ind", "depth", "values"], ["y"], name="hot")],
                   {"ind": np.zeros(3, np.int64), "depth": np.array([4], np.int64)},
                   {"y": np.zeros((3, 4), np.float32)},
                   {"values": np.array([0, 1], np.float32)}, 13)
    with pytest.raises(UnsupportedOperator, match="OneHot.*hot"):
        CuvilModel.load(graph)


SCATTER = [  # (axis, reduction, data shape, indices shape)
    (0, "none", (4, 3), (2, 3)), (1, "none", (2, 5), (2, 2)), (-1, "add", (2, 3, 4), (2, 3, 2)),
    (1, "mul", (3, 4, 2), (2, 3, 1)), (0, "max", (5, 2), (3, 2)), (2, "min", (2, 2, 6), (1, 2, 3))]


@pytest.mark.parametrize("i", range(len(SCATTER)))
def test_scatter_elements_axes_and_reductions(i: int) -> None:
    axis, reduction, shape, ishape = SCATTER[i]
    ax = axis % len(shape)
    dim, n = shape[ax], ishape[ax]
    rng = np.random.default_rng(i)
    # distinct positions per line unless reducing (repeats then combine); negative ones count from the end
    ind = np.stack([rng.permutation(dim)[:n] for _ in range(int(np.prod(ishape)) // n)])
    ind = np.moveaxis(ind.reshape(*(d for k, d in enumerate(ishape) if k != ax), n), -1, ax)
    ind = np.where(rng.random(ind.shape) < 0.5, ind - dim, ind).astype(np.int64)
    if reduction != "none":
        ind[(0,) * len(ishape)] = ind.flat[1] % dim  # a repeated index
    data, upd = rand(*shape, seed=i), rand(*ishape, seed=i + 10)
    got = check([N("ScatterElements", ["data", "ind", "upd"], ["y"], axis=axis, reduction=reduction)],
                {"data": data, "ind": ind, "upd": upd}, ["y"], opset=18).got[0]
    assert not np.array_equal(got["y"], data)


def test_scatter_elements_int64_data_constant_indices_and_a_trap_out_of_range() -> None:
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    nodes = [N("ScatterElements", ["data", "ind", "upd"], ["y"], axis=1)]
    check(nodes, {"data": data, "upd": np.array([[-7, -8]], np.int64)}, ["y"],
          inits={"ind": np.array([[3, -4]], np.int64)})
    feeds = {"data": data, "ind": np.zeros((1, 2), np.int64), "upd": np.zeros((1, 2), np.int64)}
    graph = make_model(nodes, feeds, {"y": data}, {}, 13)
    with CuvilModel.load(graph).optimize(targets=[Target()]) as cm:
        ok = cm.predict({"data": data, "ind": np.array([[1, -1]]), "upd": np.array([[50, 60]])})["y"]
        assert ok[0].tolist() == [0, 50, 2, 60]
        with pytest.raises(InferenceTrap):
            cm.predict({"data": data, "ind": np.array([[4, 0]]), "upd": np.array([[50, 60]])})
