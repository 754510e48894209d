"""Sampling and vision ops (``ops/sampling.py``, ``ops/rearrange.py``): GridSample, AffineGrid, RoiAlign,
Col2Im, DeformConv, MaxUnpool and ReverseSequence, each a small ONNX graph compiled, run in wasmtime and
compared with onnxruntime; run-time shape and index inputs that do not fit trap, unsupported variants are
refused at import naming the op and node."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import NotConstant, ShapeError, UnsupportedOperator
from runtime_wasm.errors import InferenceTrap
from tests.support.ort_check import check_with_ort, make_model, ort_outputs

N = helper.make_node
check = partial(check_with_ort, rtol=1e-5, atol=1e-5)


def rand(*shape: int, seed: int = 0, scale: float = 1.0, dtype=np.float32) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def uniform(*shape: int, seed: int = 0, lo: float = -1.0, hi: float = 1.0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def built(model):
    """A compiled model for the default target (a context manager), for runs with inputs that trap."""
    return CuvilModel.load(model).optimize(targets=[Target()])


# -- GridSample ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_gridsample_2d_every_mode_padding_and_alignment(mode: str, padding: str, align: int) -> None:
    """Grid points up to 1.8x outside [-1, 1] (reflected several times over), on a non-square image."""
    x = rand(2, 3, 5, 7, seed=1)
    grid = uniform(2, 4, 6, 2, seed=2, lo=-1.8, hi=1.8)
    if (mode, padding) == ("cubic", "border"):  # off the band where onnxruntime differs (below)
        grid = np.where((np.abs(grid) > 1) & (np.abs(grid) < 1.6), grid * 1.6, grid)
    node = N("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align)
    checked = check([node], {"x": x, "grid": grid}, ["y"], opset=20, rtol=1e-4, atol=1e-5)
    assert checked.kernels == {f"f32-gridsample-{mode}"}
    assert np.abs(checked.got[0]["y"]).max() > 0.1


def test_gridsample_cubic_border_clamps_the_point_as_the_onnx_reference() -> None:
    """A point just past the border (less than a pixel) is clamped onto it before the 4x4 taps, as
    ONNX's reference (and its node cases) has it; onnxruntime only clamps the taps, so its numbers
    differ there (and agree inside, and a pixel or more outside, where every tap is clamped)."""
    x = rand(1, 1, 5, 7, seed=1)
    grid = np.array([[[[1.07, 0.1], [-1.1, -1.05], [0.2, 0.4], [2.0, -2.2]]]], np.float32)
    node = N("GridSample", ["x", "grid"], ["y"], mode="cubic", padding_mode="border")
    model = make_model([node], {"x": x, "grid": grid}, {"y": np.zeros((1, 1, 1, 4), np.float32)}, opset=20)
    want = ReferenceEvaluator(model).run(None, {"x": x, "grid": grid})[0]
    with built(model) as cm:
        got = cm.predict({"x": x, "grid": grid})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ort = ort_outputs(model, [{"x": x, "grid": grid}])[0]["y"]
    assert (np.abs(got - ort).ravel() > 1e-3).tolist() == [True, True, False, False]


@pytest.mark.parametrize("opset", [16, 20])
def test_gridsample_opset16_names_and_float64(opset: int) -> None:
    """Opset 16's mode names (bilinear, bicubic) on float32; opset 20's on float64, computed in double."""
    dtype = np.float64 if opset == 20 else np.float32
    x, grid = rand(1, 2, 4, 4, seed=3, dtype=dtype), uniform(1, 3, 5, 2, seed=4, lo=-1, hi=1, dtype=dtype)
    for mode, kind in (("bilinear", "linear"), ("bicubic", "cubic"), ("nearest", "nearest")):
        if opset == 20:
            mode = kind
        node = N("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode="border")
        kernels = check([node], {"x": x, "grid": grid}, ["y"], opset=opset).kernels
        assert kernels == {f"{'f64' if opset == 20 else 'f32'}-gridsample-{kind}"}


def test_gridsample_float16_runs_in_float32_and_rounds_once() -> None:
    """fp16 tensors widen to float32 for the kernel and the result is rounded to half once: the ONNX
    reference on the same numbers in float32, rounded to half (onnxruntime has no fp16 GridSample)."""
    x, grid = rand(1, 2, 4, 5, seed=1, dtype=np.float16), uniform(1, 3, 3, 2, seed=2, lo=-1.2, hi=1.2,
                                                                   dtype=np.float16)
    node = N("GridSample", ["x", "grid"], ["y"], mode="cubic", padding_mode="reflection")
    model = make_model([node], {"x": x, "grid": grid}, {"y": np.zeros((1, 2, 3, 3), np.float16)}, opset=20)
    wide = {"x": x.astype(np.float32), "grid": grid.astype(np.float32)}
    want = ReferenceEvaluator(make_model([node], wide, {"y": np.zeros((1, 2, 3, 3), np.float32)}, opset=20)
                              ).run(None, wide)[0].astype(np.float16)
    with built(model) as cm:
        got = cm.predict({"x": x, "grid": grid})["y"]
        assert cm.compiled.program.kernels_used["GridSample_y"] == "f32-gridsample-cubic"
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2**-10, atol=1e-3)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_gridsample_volumetric(mode: str, padding: str) -> None:
    x = rand(1, 2, 3, 4, 5, seed=5)
    grid = uniform(1, 2, 3, 4, 3, seed=6, lo=-1.4, hi=1.4)
    node = N("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding)
    check([node], {"x": x, "grid": grid}, ["y"], opset=20, rtol=1e-4)


@pytest.mark.parametrize("threads", [1, 3])
def test_gridsample_and_roialign_split_between_threads(threads: int) -> None:
    """Large enough to split (grid points, and (ROI, bin) pairs, between threads): the same numbers on
    one thread and on three."""
    x, grid = rand(1, 8, 32, 32, seed=1), uniform(1, 24, 24, 2, seed=2, lo=-1.1, hi=1.1)
    feats, rois = rand(2, 16, 20, 20, seed=3), uniform(8, 4, seed=4, lo=0, hi=10)
    rois[:, 2:] += rois[:, :2]
    nodes = [N("GridSample", ["x", "grid"], ["y"], mode="bicubic", padding_mode="reflection"),
             N("RoiAlign", ["feats", "rois", "idx"], ["pooled"], output_height=7, output_width=7)]
    feeds = {"x": x, "grid": grid, "feats": feats, "rois": rois, "idx": np.arange(8, dtype=np.int64) % 2}
    checked = check(nodes, feeds, ["y", "pooled"], opset=16, rtol=1e-4, threads=threads)
    assert {"GridSample_y", "RoiAlign_pooled"} <= set(checked.model.compiled.program.parallel_nodes)


def test_gridsample_nearest_rounds_half_to_even_and_nan_reads_padding() -> None:
    """x = 1.5 and 2.5 (pixel units, aligned corners on 5 columns) round to 2 both; a NaN grid point
    reads a zero, never traps on the float -> int conversion."""
    x = np.arange(5, dtype=np.float32).reshape(1, 1, 1, 5)
    grid = np.array([[[[-0.25, 0.0], [0.25, 0.0], [np.nan, 0.0]]]], np.float32)
    model = make_model([N("GridSample", ["x", "grid"], ["y"], mode="nearest", align_corners=1)],
                       {"x": x, "grid": grid}, {"y": np.zeros((1, 1, 1, 3), np.float32)}, opset=20)
    with built(model) as cm:
        assert cm.predict({"x": x, "grid": grid})["y"].ravel().tolist() == [2.0, 2.0, 0.0]


def test_gridsample_refusals_name_the_node() -> None:
    x5, g5 = rand(1, 1, 2, 2, 2), uniform(1, 2, 2, 2, 3)
    with pytest.raises(UnsupportedOperator, match="'GridSample' at node 'gs'.*rank 5"):
        CuvilModel.load(make_model([N("GridSample", ["x", "g"], ["y"], name="gs")], {"x": x5, "g": g5},
                                   {"y": np.zeros((1, 1, 2, 2, 2), np.float32)}, opset=16))
    x, g = rand(1, 1, 3, 3), uniform(1, 2, 2, 2)
    with pytest.raises(UnsupportedOperator, match="'GridSample' at node 'gs'.*mode 'bilinear'"):
        CuvilModel.load(make_model([N("GridSample", ["x", "g"], ["y"], name="gs", mode="bilinear")],
                                   {"x": x, "g": g}, {"y": np.zeros((1, 1, 2, 2), np.float32)}, opset=20))
    ints = np.arange(9, dtype=np.int32).reshape(1, 1, 3, 3)
    with pytest.raises(UnsupportedOperator, match="'GridSample' at node 'gs'.*int32"):
        CuvilModel.load(make_model([N("GridSample", ["x", "g"], ["y"], name="gs")], {"x": ints, "g": g},
                                   {"y": np.zeros((1, 1, 2, 2), np.int32)}, opset=20))


# -- AffineGrid ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 4, 2]])
def test_affine_grid_constant_size(align: int, size: list[int]) -> None:
    r = len(size) - 2
    theta = rand(2, r, r + 1, seed=len(size))
    checked = check([N("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)], {"theta": theta},
                    ["grid"], inits={"size": np.array(size, np.int64)}, opset=20)
    assert checked.kernels == {"f32-affinegrid"}


def test_affine_grid_single_position_with_aligned_corners_is_at_minus_one() -> None:
    """As the ONNX reference and PyTorch (linspace(-1, 1, 1)); onnxruntime puts it at +1."""
    theta = np.array([[[1, 0, 0], [0, 1, 0]], [[0.5, 0.2, 0.1], [-0.3, 0.9, 0.4]]], np.float32)
    node = N("AffineGrid", ["theta", "size"], ["grid"], align_corners=1)
    model = make_model([node], {"theta": theta}, {"grid": np.zeros((2, 1, 3, 2), np.float32)},
                       {"size": np.array([2, 1, 1, 3], np.int64)}, opset=20)
    with built(model) as cm:
        got = cm.predict({"theta": theta})["grid"]
    with np.errstate(divide="ignore"):  # the reference divides by the 0 steps between 1 position
        want = ReferenceEvaluator(model).run(None, {"theta": theta})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got[0, 0, :, 1].tolist() == [-1, -1, -1]


def test_affine_grid_run_time_size_is_checked_against_the_declared_grid() -> None:
    """The size input the model feeds: any channel count runs, another grid traps."""
    theta, size = rand(1, 2, 3), np.array([1, 3, 4, 6], np.int64)
    nodes = [N("AffineGrid", ["theta", "size"], ["grid"])]
    check(nodes, {"theta": theta, "size": size}, ["grid"], opset=20)
    model = make_model(nodes, {"theta": theta, "size": size}, {"grid": np.zeros((1, 4, 6, 2), np.float32)},
                       opset=20)
    with built(model) as cm:
        cm.predict({"theta": theta, "size": np.array([1, 7, 4, 6], np.int64)})
        with pytest.raises(InferenceTrap):
            cm.predict({"theta": theta, "size": np.array([1, 3, 6, 4], np.int64)})
    undeclared = make_model(nodes, {"theta": theta, "size": size}, {"grid": None}, opset=20)
    symbolic = helper.make_tensor_value_info("grid", TensorProto.FLOAT, ["n", "h", "w", 2])
    undeclared.graph.output[0].CopyFrom(symbolic)
    with pytest.raises(NotConstant, match="'AffineGrid' at node 'AffineGrid_grid'.*'size'"):
        CuvilModel.load(undeclared)


def test_affine_grid_into_grid_sample() -> None:
    """A spatial transformer: the grid AffineGrid makes, sampled at once."""
    x, theta = rand(1, 2, 6, 6, seed=1), np.array([[[0.8, -0.3, 0.1], [0.2, 1.1, -0.2]]], np.float32)
    nodes = [N("AffineGrid", ["theta", "size"], ["grid"]), N("GridSample", ["x", "grid"], ["y"])]
    check(nodes, {"x": x, "theta": theta}, ["y"], inits={"size": np.array([1, 2, 5, 7], np.int64)}, opset=20)


# -- RoiAlign ------------------------------------------------------------------------------------------
ROIS = np.array([[0.5, 1.0, 6.3, 5.2], [-2.0, -1.0, 3.0, 14.0], [2.2, 2.8, 2.4, 3.1], [7.0, 0.0, 11.5, 9.9]],
                np.float32)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("coord", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling", [0, 2])
def test_roialign(mode: str, coord: str, sampling: int) -> None:
    """ROIs inside, across the border, tiny and past the edge, over two images; adaptive and fixed
    sampling grids."""
    x = rand(2, 3, 10, 12, seed=7)
    node = N("RoiAlign", ["x", "rois", "idx"], ["y"], mode=mode, coordinate_transformation_mode=coord,
             output_height=3, output_width=4, sampling_ratio=sampling, spatial_scale=0.9)
    feeds = {"x": x, "rois": ROIS, "idx": np.array([0, 1, 1, 0], np.int64)}
    checked = check([node], feeds, ["y"], opset=16, rtol=1e-4)
    assert checked.kernels == {f"f32-roialign-{mode}"}


def test_roialign_opset10_samples_as_output_half_pixel_and_bad_batch_index_traps() -> None:
    x, idx = rand(2, 2, 8, 8, seed=8), np.array([1, 0, 1, 0], np.int64)
    nodes = [N("RoiAlign", ["x", "rois", "idx"], ["y"], output_height=2, output_width=2)]
    check(nodes, {"x": x, "rois": ROIS, "idx": idx}, ["y"], opset=10, rtol=1e-4)
    model = make_model(nodes, {"x": x, "rois": ROIS, "idx": idx}, {"y": np.zeros((4, 2, 2, 2), np.float32)},
                       opset=16)
    with built(model) as cm:
        with pytest.raises(InferenceTrap):
            cm.predict({"x": x, "rois": ROIS, "idx": np.array([0, 2, 0, 0], np.int64)})


# -- Col2Im --------------------------------------------------------------------------------------------
COL2IM = [  # image, block, strides, dilations, pads
    ([5, 5], [2, 3], None, None, None),
    ([7, 6], [3, 2], [2, 1], [1, 2], [1, 0, 2, 1]),
    ([3, 4, 5], [1, 2, 2], [1, 2, 1], None, [0, 1, 0, 0, 1, 1]),
]


def _col2im_input(image, block, strides, dilations, pads, n: int = 2, c: int = 3) -> np.ndarray:
    r = len(image)
    strides, dilations, pads = strides or [1] * r, dilations or [1] * r, pads or [0] * 2 * r
    blocks = [(image[d] + pads[d] + pads[d + r] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
              for d in range(r)]
    return rand(n, c * int(np.prod(block)), int(np.prod(blocks)), seed=r)


@pytest.mark.parametrize("i", range(len(COL2IM)))
def test_col2im_constant_shapes(i: int) -> None:
    image, block, strides, dilations, pads = COL2IM[i]
    attrs = {k: v for k, v in (("strides", strides), ("dilations", dilations), ("pads", pads)) if v}
    data = _col2im_input(image, block, strides, dilations, pads)
    checked = check([N("Col2Im", ["x", "image", "block"], ["y"], **attrs)], {"x": data}, ["y"],
                    inits={"image": np.array(image, np.int64), "block": np.array(block, np.int64)}, opset=18)
    assert checked.kernels == {"f32-col2im"}


def test_col2im_run_time_shapes_read_and_checked() -> None:
    """image_shape and block_shape fed at run time (the output declared): the block shape is read by the
    module, so 1x5 and 5x1 blocks (both 5 columns of 5 values on a 5x5 image) each give onnxruntime's
    answer from one build; a block or image shape that does not fit traps."""
    data = rand(1, 2 * 5, 5, seed=9)
    feeds = [{"x": data, "image": np.array([5, 5], np.int64), "block": np.array(b, np.int64)}
             for b in ([1, 5], [5, 1])]
    nodes = [N("Col2Im", ["x", "image", "block"], ["y"])]
    got = check(nodes, feeds, ["y"], opset=18).got
    assert not np.array_equal(got[0]["y"], got[1]["y"])
    model = make_model(nodes, feeds[0], {"y": got[0]["y"]}, opset=18)
    with built(model) as cm:
        for bad in ({"block": np.array([2, 2], np.int64)}, {"block": np.array([1, 6], np.int64)},
                    {"image": np.array([4, 6], np.int64)}):
            with pytest.raises(InferenceTrap):
                cm.predict({**feeds[0], **bad})


def test_col2im_int64_data_and_mismatched_constant_block_refused() -> None:
    """Integers sum exactly (onnxruntime has float Col2Im only: the ONNX reference says what is right)."""
    data = np.arange(2 * 4 * 4, dtype=np.int64).reshape(1, 8, 4)
    inits = {"image": np.array([3, 3], np.int64), "block": np.array([2, 2], np.int64)}
    node = N("Col2Im", ["x", "image", "block"], ["y"])
    model = make_model([node], {"x": data}, {"y": np.zeros((1, 2, 3, 3), np.int64)}, inits, 18)
    with built(model) as cm:
        got = cm.predict({"x": data})["y"]
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": data})[0])
    assert got.dtype == np.int64 and got[0, 0, 1, 1] == 3 + 6 + 9 + 12  # one value from each block
    bad = {**inits, "block": np.array([2, 3], np.int64)}
    model = make_model([node], {"x": data}, {"y": np.zeros((1, 2, 3, 3), np.int64)}, bad, 18)
    with pytest.raises(ShapeError, match="Col2Im_y: block_shape \\[2, 3\\] does not fit"):
        CuvilModel.load(model)


def test_bool_col2im_is_refused_naming_the_dtype() -> None:
    data = np.ones((1, 4, 4), bool)
    inits = {"image": np.array([3, 3], np.int64), "block": np.array([2, 2], np.int64)}
    model = make_model([N("Col2Im", ["x", "image", "block"], ["y"], name="c2i")], {"x": data},
                       {"y": np.zeros((1, 1, 3, 3), bool)}, inits, 18)
    with pytest.raises(UnsupportedOperator, match="'Col2Im' at node 'c2i'.*bool"):
        CuvilModel.load(model)


def test_constant_inputs_fold_at_import() -> None:
    """AffineGrid, Col2Im, MaxUnpool and ReverseSequence of constants are folded by their numpy
    references (no kernel of theirs runs), to onnxruntime's numbers."""
    seq = rand(4, 3, seed=20)
    inits = {"theta": rand(1, 2, 3, seed=21), "size": np.array([1, 1, 3, 4], np.int64),
             "cols": rand(1, 8, 6, seed=22), "image": np.array([3, 4], np.int64),
             "block": np.array([2, 2], np.int64), "pooled": rand(1, 2, 2, 2, seed=23),
             "ind": _pool_indices((1, 2, 2, 2), 2, 24), "seq": seq, "lens": np.array([3, 0, 4], np.int64)}
    nodes = [N("AffineGrid", ["theta", "size"], ["grid"]), N("Col2Im", ["cols", "image", "block"], ["img"]),
             N("MaxUnpool", ["pooled", "ind"], ["unpooled"], kernel_shape=[2, 2], strides=[2, 2]),
             N("ReverseSequence", ["seq", "lens"], ["rev"]),
             *(N("Add", [v, "z"], [f"{v}_out"]) for v in ("grid", "img", "unpooled", "rev"))]
    outs = [f"{v}_out" for v in ("grid", "img", "unpooled", "rev")]
    checked = check(nodes, {"z": np.ones((1,), np.float32)}, outs, inits=inits, opset=20)
    assert not any(k.split("-")[1] in ("affinegrid", "col2im", "maxunpool", "reversesequence")
                   for k in checked.kernels), checked.kernels


# -- DeformConv ----------------------------------------------------------------------------------------
DEFORM = [  # x shape, w shape, attrs, bias, mask
    ((1, 2, 6, 7), (3, 2, 3, 3), {}, False, False),
    ((2, 4, 7, 6), (4, 2, 3, 2), {"group": 2, "offset_group": 2, "pads": [1, 0, 1, 1], "strides": [2, 1],
                                  "dilations": [1, 2]}, True, True),
    ((1, 4, 5, 5), (2, 4, 2, 2), {"offset_group": 4, "pads": [1, 1, 1, 1]}, True, False),
]


@pytest.mark.parametrize("i", range(len(DEFORM)))
def test_deform_conv(i: int) -> None:
    """Offsets up to +-3 pixels (samples past the border read zeros), run-time weights."""
    xs, ws, attrs, bias, mask = DEFORM[i]
    kh, kw = ws[2:]
    pads, strides = attrs.get("pads", [0] * 4), attrs.get("strides", [1, 1])
    dil = attrs.get("dilations", [1, 1])
    oh = (xs[2] + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xs[3] + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    og = attrs.get("offset_group", 1)
    feeds = {"x": rand(*xs, seed=i), "w": rand(*ws, seed=i + 1),
             "off": uniform(xs[0], og * kh * kw * 2, oh, ow, seed=i + 2, lo=-3, hi=3)}
    if bias:
        feeds["b"] = rand(ws[0], seed=i + 3)
    if mask:
        feeds["m"] = uniform(xs[0], og * kh * kw, oh, ow, seed=i + 4, lo=0, hi=1)
    ins = ["x", "w", "off", "b" if bias else "", "m" if mask else ""]
    while not ins[-1]:
        ins.pop()
    node = N("DeformConv", ins, ["y"], **attrs)
    checked = check([node], feeds, ["y"], opset=19, rtol=1e-4, atol=1e-4)
    assert checked.kernels == {"f32-deformconv"}


def test_deform_conv_zero_offsets_is_a_convolution() -> None:
    x, w, b = rand(1, 3, 6, 6, seed=4), rand(4, 3, 3, 3, seed=5), rand(4, seed=6)
    off = np.zeros((1, 18, 4, 4), np.float32)
    model = make_model([N("DeformConv", ["x", "w", "off", "b"], ["y"])], {"x": x, "off": off},
                       {"y": np.zeros((1, 4, 4, 4), np.float32)}, {"w": w, "b": b}, opset=19)
    with built(model) as cm:
        got = cm.predict({"x": x, "off": off})["y"]
    conv = make_model([N("Conv", ["x", "w", "b"], ["y"])], {"x": x}, {"y": got}, {"w": w, "b": b})
    with built(conv) as cm:
        np.testing.assert_allclose(got, cm.predict({"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_deform_conv_3d_is_refused() -> None:
    x, w = rand(1, 1, 3, 3, 3), rand(1, 1, 2, 2, 2)
    off = np.zeros((1, 24, 2, 2, 2), np.float32)
    with pytest.raises(UnsupportedOperator, match="'DeformConv' at node 'dc'.*3-D"):
        CuvilModel.load(make_model([N("DeformConv", ["x", "w", "off"], ["y"], name="dc")],
                                   {"x": x, "w": w, "off": off}, {"y": np.zeros((1, 1, 2, 2, 2), np.float32)},
                                   opset=19))


# -- MaxUnpool -----------------------------------------------------------------------------------------
def _pool_indices(shape: tuple[int, ...], kernel: int, seed: int) -> np.ndarray:
    """Flat indices into an (N, C, H, W) tensor of one position inside each kernel x kernel window (as
    MaxPool's Indices output holds them)."""
    n, c, h, w = shape
    rng = np.random.default_rng(seed)
    ys = np.arange(h)[:, None] * kernel + rng.integers(0, kernel, (h, w))
    xs = np.arange(w)[None, :] * kernel + rng.integers(0, kernel, (h, w))
    plane = (h * kernel) * (w * kernel)
    base = (np.arange(n * c) * plane).reshape(n, c, 1, 1)
    return (base + ys * (w * kernel) + xs).astype(np.int64)


def test_maxunpool_without_and_with_output_shape() -> None:
    x = rand(2, 3, 3, 4, seed=11)
    ind = _pool_indices(x.shape, 2, 12)
    node = N("MaxUnpool", ["x", "ind"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    checked = check([node], {"x": x, "ind": ind}, ["y"], opset=11, rtol=0, atol=0)
    assert checked.kernels == {"f32-maxunpool"}
    assert np.count_nonzero(checked.got[0]["y"]) == x.size
    shape = np.array([2, 3, 6, 8], np.int64)  # the shape the geometry gives, fed at run time
    check([N("MaxUnpool", ["x", "ind", "shape"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
          {"x": x, "ind": ind, "shape": shape}, ["y"], opset=11, rtol=0, atol=0)


@pytest.mark.parametrize("spatial", [(5,), (2, 3, 2)])
def test_maxunpool_1d_and_3d_with_pads(spatial: tuple[int, ...]) -> None:
    """Kernel 3, stride 2, pads 1 on each side: (n - 1) * 2 + 3 - 2 positions per axis, the indices any
    distinct ones of them."""
    r = len(spatial)
    x = rand(1, 2, *spatial, seed=r)
    out = [(d - 1) * 2 + 1 for d in spatial]
    plane = int(np.prod(out))
    ind = np.stack([np.random.default_rng(c).permutation(plane)[:x[0, 0].size] + c * plane for c in range(2)])
    node = N("MaxUnpool", ["x", "ind"], ["y"], kernel_shape=[3] * r, strides=[2] * r, pads=[1] * 2 * r)
    check([node], {"x": x, "ind": ind.reshape(x.shape).astype(np.int64)}, ["y"], opset=11, rtol=0, atol=0)


def test_maxunpool_larger_output_shape_places_the_unpooled_block_first_and_bad_index_traps() -> None:
    """As the ONNX reference and its node case: indices address the (4, 4) unpooled shape, which sits at
    the top left of the (5, 5) output (onnxruntime reads them as positions in the (5, 5) one instead)."""
    x = np.array([[[[5, 6], [7, 8]]]], np.float32)
    ind = np.array([[[[5, 7], [13, 15]]]], np.int64)
    model = make_model([N("MaxUnpool", ["x", "ind", "shape"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                       {"x": x, "ind": ind}, {"y": np.zeros((1, 1, 5, 5), np.float32)},
                       {"shape": np.array([1, 1, 5, 5], np.int64)}, opset=11)
    want = np.zeros((1, 1, 5, 5), np.float32)
    want[0, 0, 1, 1], want[0, 0, 1, 3], want[0, 0, 3, 1], want[0, 0, 3, 3] = 5, 6, 7, 8
    with built(model) as cm:
        np.testing.assert_array_equal(cm.predict({"x": x, "ind": ind})["y"], want)
        with pytest.raises(InferenceTrap):
            cm.predict({"x": x, "ind": np.array([[[[5, 7], [13, 16]]]], np.int64)})
    node = N("MaxUnpool", ["x", "ind", "shape"], ["y"], kernel_shape=[2, 2], strides=[2, 2], name="mu")
    small = make_model([node], {"x": x, "ind": ind}, {"y": np.zeros((1, 1, 3, 3), np.float32)},
                       {"shape": np.array([1, 1, 3, 3], np.int64)}, 11)
    with pytest.raises(UnsupportedOperator, match="'MaxUnpool' at node 'mu'.*smaller"):
        CuvilModel.load(small)


# -- ReverseSequence -----------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_axis", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_reverse_sequence(batch_axis: int, dtype) -> None:
    x = (rand(4, 5, 3, seed=13) * 10).astype(dtype)
    batch = x.shape[batch_axis]
    lens = np.array([5, 0, 2, 4][:batch] if batch_axis == 0 else [1, 4, 3, 4, 2], np.int64)
    node = N("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=1 - batch_axis)
    checked = check([node], {"x": x, "lens": lens}, ["y"], opset=10, rtol=0, atol=0)
    assert checked.kernels == {f"{np.dtype(dtype).kind}{np.dtype(dtype).itemsize * 8}-reversesequence"}
    assert not np.array_equal(checked.got[0]["y"], x)


def test_reverse_sequence_too_long_traps_and_equal_axes_refused() -> None:
    x, lens = rand(3, 4), np.array([1, 2, 3, 4], np.int64)
    node = N("ReverseSequence", ["x", "lens"], ["y"])
    with built(make_model([node], {"x": x, "lens": lens}, {"y": x}, opset=10)) as cm:
        with pytest.raises(InferenceTrap):
            cm.predict({"x": x, "lens": np.array([1, 2, 4, 0], np.int64)})
    same = N("ReverseSequence", ["x", "lens"], ["y"], name="rs", batch_axis=0, time_axis=0)
    with pytest.raises(UnsupportedOperator, match="'ReverseSequence' at node 'rs'"):
        CuvilModel.load(make_model([same], {"x": x, "lens": lens[:3]}, {"y": x}, opset=10))
