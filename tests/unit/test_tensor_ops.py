"""Data movement, pooling and resize against onnxruntime, plus shape-chain folding and the layout pass.

Each model bundles several ops (one build each) and every output is compared with onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import UnsupportedOperator
from cuvil_edge.frontend.onnx import import_onnx
from tests.support.ort_check import check_with_ort, make_model

F32 = TensorProto.FLOAT


def check(nodes: list, inputs: dict[str, np.ndarray], outputs: list[str], opset: int = 13,
          inits: dict[str, np.ndarray] | None = None) -> CuvilModel:
    """The shared check, then the same graph with its inputs as initializers: it folds completely at
    import and gives onnxruntime's numbers too (checks every op's ``fold``)."""
    checked = check_with_ort(nodes, inputs, outputs, inits=inits, opset=opset)
    want = checked.want[0]
    folded = import_onnx(make_model(nodes, {}, want, {**(inits or {}), **inputs}, opset))
    for name, v in zip(outputs, folded.outputs):
        assert v.is_const, f"{name} did not fold"
        assert v.const.shape == want[name].shape, name
        np.testing.assert_allclose(v.const, want[name], rtol=1e-4, atol=1e-4, err_msg=f"{name} (folded)")
    return checked.model


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


N = helper.make_node


def test_transpose_concat_slice_split() -> None:
    x, z = rand(2, 3, 5, 6), rand(2, 4, 5, 6, seed=1)
    nodes = [
        N("Transpose", ["x"], ["nhwc"], perm=[0, 2, 3, 1]),
        N("Transpose", ["nhwc"], ["back"], perm=[0, 3, 1, 2]),  # NHWC -> NCHW via the 4x4 kernel
        N("Transpose", ["x"], ["gen"], perm=[2, 0, 3, 1]),
        N("Transpose", ["x"], ["inner"], perm=[1, 0, 2, 3]),  # contiguous rows
        N("Concat", ["x", "z", "x"], ["cat"], axis=1),
        N("Concat", ["x", "x"], ["cat_last"], axis=-1),
        N("Slice", ["x", "st", "en", "ax", "sp"], ["sl"]),
        N("Slice", ["x", "st2", "en2"], ["sl2"]),
        N("Split", ["z", "parts"], ["s0", "s1", "s2"], axis=3),
    ]
    inits = {"st": i64(-1, 1), "en": i64(-100, 6), "ax": i64(2, 3), "sp": i64(-2, 2),
             "st2": i64(0, 1, 0, 0), "en2": i64(2, 3, 5, 9999), "parts": i64(1, 2, 3)}
    outs = ["nhwc", "back", "gen", "inner", "cat", "cat_last", "sl", "sl2", "s0", "s1", "s2"]
    check(nodes, {"x": x, "z": z}, outs, inits=inits)


def test_int32_movement() -> None:
    x = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    nodes = [N("Transpose", ["x"], ["t"], perm=[2, 1, 0]), N("Concat", ["x", "x"], ["c"], axis=0)]
    check(nodes, {"x": x}, ["t", "c"])


def test_old_opset_forms() -> None:
    x = rand(4, 6, 7)
    nodes = [N("Slice", ["x"], ["sl"], starts=[1, -3], ends=[3, 100], axes=[0, 2]),
             N("Split", ["x"], ["a", "b"], axis=1, split=[2, 4]),
             N("Split", ["x"], ["e0", "e1"], axis=0),
             N("Pad", ["x"], ["p"], pads=[0, 1, 2, 1, 0, -1], value=1.5)]
    check(nodes, {"x": x}, ["sl", "a", "b", "e0", "e1", "p"], opset=9)


def test_split_num_outputs_and_pad_axes() -> None:
    x = rand(2, 3, 7, 5)
    nodes = [N("Split", ["x"], ["q0", "q1", "q2"], axis=2, num_outputs=3),
             N("Pad", ["x", "pads", "cv", "axes"], ["pc"], mode="constant"),
             N("Pad", ["x", "pads", "", "axes"], ["pr"], mode="reflect"),
             N("Pad", ["x", "pads2"], ["pe"], mode="edge"),
             N("Pad", ["x", "pads3"], ["pn"], mode="reflect")]  # negative pads crop
    inits = {"pads": i64(2, 1, 3, 2), "cv": np.array(-2.0, np.float32), "axes": i64(2, -1),
             "pads2": i64(0, 1, 3, 0, 0, 0, 1, 4), "pads3": i64(0, 0, -1, 2, 0, 0, 2, -2)}
    check(nodes, {"x": x}, ["q0", "q1", "q2", "pc", "pr", "pe", "pn"], opset=18, inits=inits)


def test_pad_wrap() -> None:
    check([N("Pad", ["x", "pads"], ["y"], mode="wrap")], {"x": rand(1, 2, 4, 5)}, ["y"], opset=19,
          inits={"pads": i64(0, 0, 2, 3, 0, 0, 1, 4)})


def test_expand_tile_gather() -> None:
    x, v = rand(3, 1, 5), rand(4, 1, seed=2)
    nodes = [N("Expand", ["x", "shp"], ["ex"]),
             N("Expand", ["v", "shp2"], ["ev"]),
             N("Tile", ["x", "reps"], ["ti"]),
             N("Gather", ["x", "idx"], ["g0"], axis=2),
             N("Gather", ["x", "idx2"], ["g1"], axis=0)]
    inits = {"shp": i64(2, 3, 4, 5), "shp2": i64(4, 6), "reps": i64(2, 3, 1),
             "idx": np.array([[4, -1], [0, 2]], np.int64), "idx2": np.array(1, np.int64)}
    check(nodes, {"x": x, "v": v}, ["ex", "ev", "ti", "g0", "g1"], inits=inits)


def test_shape_chain_folds() -> None:
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape, plus ConstantOfShape / Range weight builders
    x = rand(2, 3, 4)
    nodes = [N("Shape", ["x"], ["s"]),
             N("Gather", ["s", "zero"], ["n"], axis=0),
             N("Unsqueeze", ["n", "ax0"], ["n1"]),
             N("Concat", ["n1", "minus1"], ["target"], axis=0),
             N("Reshape", ["x", "target"], ["flat"]),
             N("Shape", ["flat"], ["fs"]),
             N("Slice", ["fs", "one", "two"], ["w"]),
             N("ConstantOfShape", ["w"], ["fill"], value=helper.make_tensor("v", F32, [1], [0.5])),
             N("Range", ["r0", "r1", "r2"], ["rng"]),
             N("Unsqueeze", ["fill", "ax0"], ["fill2"]),
             N("Concat", ["flat", "fill2"], ["y"], axis=0),
             N("Concat", ["rng", "rng"], ["rr"], axis=0)]
    inits = {"zero": np.array(0, np.int64), "ax0": i64(0), "minus1": i64(-1), "one": i64(1), "two": i64(2),
             "r0": np.float32(1.0), "r1": np.float32(4.0), "r2": np.float32(0.5)}
    cm = check(nodes, {"x": x}, ["y", "rr"], inits=inits)
    counts = cm.graph.op_counts()
    assert "gather" not in counts and "constant_of_shape" not in counts and "range" not in counts
    assert counts.get("concat", 0) == 1  # only the run-time concat with x is left


def test_light_models_fold_constant_of_shape_weights() -> None:
    from pathlib import Path

    light = Path(onnx.__file__).parent / "backend/test/data/light"
    for name in ("light_squeezenet.onnx", "light_shufflenet.onnx"):
        counts = import_onnx(light / name).op_counts()
        assert "constant_of_shape" not in counts, name
        assert counts.get("conv", 0) > 0, name


def test_runtime_gather_indices() -> None:
    """Embedding lookups: the indices arrive at run time (int64, negative ones count from the end)."""
    ids = np.array([[0, 4], [-1, 2]], np.int64)
    cm = check([N("Gather", ["x", "i"], ["y"])], {"x": rand(5, 3), "i": ids}, ["y"])
    assert cm.graph.op_counts() == {"gather": 1}


def test_layout_pass() -> None:
    x = rand(2, 3, 4, 5)
    nodes = [N("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
             N("Transpose", ["a"], ["b"], perm=[0, 3, 1, 2]),  # pair cancels
             N("Relu", ["b"], ["y"]),
             N("Transpose", ["x"], ["c"], perm=[1, 0, 2, 3]),
             N("Transpose", ["c"], ["d"], perm=[0, 2, 1, 3]),  # pair merges into one
             N("Reshape", ["x", "s"], ["u"]),
             N("Transpose", ["u"], ["v"], perm=[1, 0, 2, 3]),  # only a size-1 dim moves: a reshape
             N("Slice", ["x", "zero", "big"], ["w"]),  # full slice
             N("Relu", ["w"], ["ww"])]
    inits = {"s": i64(1, 6, 4, 5), "zero": i64(0), "big": i64(1 << 40)}
    cm = check(nodes, {"x": x}, ["y", "d", "v", "ww"], inits=inits)
    assert cm.graph.op_counts().get("transpose", 0) == 1
    assert "slice" not in cm.graph.op_counts()


POOLS = [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[2, 3], strides=[2, 1], dilations=[2, 2], pads=[1, 0, 0, 2])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[3, 3], auto_pad="SAME_UPPER")),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 2], strides=[2, 2], pads=[0, 1, 1, 0], ceil_mode=1,
                         count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_LOWER")),
    # ceil_mode where the last window would start in the end padding: it is dropped
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                         count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], auto_pad="VALID")),
]


def test_pool_2d() -> None:
    x = rand(1, 3, 11, 13)
    nodes = [N(op, ["x"], [f"y{i}"], **attrs) for i, (op, attrs) in enumerate(POOLS)]
    nodes += [N("GlobalAveragePool", ["x"], ["ga"]), N("GlobalMaxPool", ["x"], ["gm"])]
    check(nodes, {"x": x}, [f"y{i}" for i in range(len(POOLS))] + ["ga", "gm"], opset=19)


def test_pool_1d_and_old_opset() -> None:
    x = rand(2, 3, 17)
    nodes = [N("MaxPool", ["x"], ["m"], kernel_shape=[3], strides=[2], pads=[1, 1]),
             N("AveragePool", ["x"], ["a"], kernel_shape=[4], strides=[1], pads=[2, 1], count_include_pad=1),
             N("GlobalAveragePool", ["x"], ["g"])]
    check(nodes, {"x": x}, ["m", "a", "g"], opset=9)


def test_maxpool_indices_of_integers_unsupported() -> None:
    """MaxPool's Indices output runs on float32 (tests/unit/test_loop_pool_scatter.py): int8 is refused."""
    x = np.arange(16, dtype=np.int8).reshape(1, 1, 4, 4)
    outs = {"y": np.zeros((1, 1, 3, 3), np.int8), "i": np.zeros((1, 1, 3, 3), np.int64)}
    model = make_model([N("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])], {"x": x}, outs, opset=13)
    with pytest.raises(UnsupportedOperator, match="indices of int8"):
        CuvilModel.load(model)


RESIZE_NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
RESIZE_COORD = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]


def test_resize_nearest_modes() -> None:
    x = rand(1, 2, 5, 7)
    nodes, outs = [], []
    for i, nm in enumerate(RESIZE_NEAREST):
        for j, cm in enumerate(RESIZE_COORD):
            scales = "up" if (i + j) % 2 else "down"
            nodes.append(N("Resize", ["x", "", scales], [f"n{i}{j}"], mode="nearest", nearest_mode=nm,
                           coordinate_transformation_mode=cm))
            outs.append(f"n{i}{j}")
    nodes.append(N("Resize", ["x", "", "", "sizes"], ["sz"], mode="nearest"))
    inits = {"up": np.array([1, 1, 2.5, 1.6], np.float32), "down": np.array([1, 1, 0.6, 0.5], np.float32),
             "sizes": i64(1, 2, 9, 3)}
    check(nodes, {"x": x}, outs + ["sz"], opset=13, inits=inits)


def test_resize_linear_modes() -> None:
    x = rand(2, 3, 6, 8)
    modes = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"]
    nodes = [N("Resize", ["x", "", "sc" if k % 2 else "", "" if k % 2 else "sizes"], [f"l{k}"], mode="linear",
               coordinate_transformation_mode=m) for k, m in enumerate(modes)]
    nodes.append(N("Resize", ["x", "", "sc2"], ["ax"], mode="linear", axes=[3, 2]))
    inits = {"sc": np.array([1, 1, 2.0, 0.75], np.float32), "sizes": i64(2, 3, 11, 5),
             "sc2": np.array([1.5, 2.0], np.float32)}
    check(nodes, {"x": x}, [f"l{k}" for k in range(len(modes))] + ["ax"], opset=19, inits=inits)


def test_resize_old_opsets() -> None:
    x = rand(1, 2, 4, 5)
    sc = np.array([1, 1, 2, 3], np.float32)
    for op, opset, mode in (("Resize", 10, "nearest"), ("Resize", 10, "linear"), ("Upsample", 9, "nearest"),
                            ("Resize", 11, "linear")):
        inits = {"roi": np.zeros(0, np.float32), "sc": sc} if opset == 11 else {"sc": sc}
        check([N(op, ["x", *inits], ["y"], mode=mode)], {"x": x}, ["y"], opset=opset, inits=inits)
    check([N("Upsample", ["x"], ["y"], mode="linear", scales=[1.0, 1.0, 2.0, 1.5])], {"x": x}, ["y"], opset=7)


def test_resize_tf_half_pixel_for_nearest() -> None:
    # onnxruntime and the onnx reference both dropped this mode: expected indices worked out by hand,
    # source coordinate (o + 0.5) / scale; H: 5 -> 8 (scale 1.6); W has scale 1, which maps one to one
    x = rand(1, 2, 5, 4)
    rows = {"floor": [0, 0, 1, 2, 2, 3, 4, 4], "ceil": [1, 1, 2, 3, 3, 4, 4, 4],
            "round_prefer_floor": [0, 1, 2, 2, 3, 3, 4, 4], "round_prefer_ceil": [0, 1, 2, 2, 3, 3, 4, 4]}
    for nm in rows:
        model = make_model([N("Resize", ["x", "", "sc"], ["y"], mode="nearest", nearest_mode=nm,
                              coordinate_transformation_mode="tf_half_pixel_for_nearest")],
                           {"x": x}, {"y": np.zeros((1, 2, 8, 4), np.float32)},
                           {"sc": np.array([1, 1, 1.6, 1], np.float32)}, opset=13)
        got = CuvilModel.load(model).optimize(targets=[Target()]).predict(x)["y"]
        np.testing.assert_array_equal(got, x[:, :, rows[nm]], err_msg=nm)
