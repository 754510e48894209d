"""Elementwise math, softmax, reductions, LRN and Cast against onnxruntime (one small model per test)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cuvil_edge import CuvilModel
from cuvil_edge.errors import CuvilError
from tests.support.ort_check import check_with_ort, make_model

RNG_SEED = 0


def _kernels(cm: CuvilModel) -> dict[str, str]:
    """Kernel per output value name (node names may be uniquified)."""
    k = cm.compiled.program.kernels_used
    return {n.outputs[0].name: k[n.name] for n in cm.graph.nodes if n.name in k}


def _randn(*shape: int, positive: bool = False) -> np.ndarray:
    x = np.random.default_rng(RNG_SEED + len(shape) + sum(shape)).standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.1 if positive else x


def node(op: str, ins: list[str], out: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ins, [out], name=out, **attrs)


def test_binary_kinds_and_broadcasting():
    f = np.float32
    consts = {"ch": _randn(3, 1, 1), "s": np.array(1.7, f), "two": np.array(2.0, f), "half": np.array(0.5, f),
              "three": np.array(3.0, f), "minus1": np.array(-1.0, f), "one": np.array(1.0, f),
              "e": np.array([0.3, 1.7, 2.0, -0.5, 2.5], f), "ei": np.array([2.0, 3.0, 1.0, 0.0, -2.0], f)}
    nodes = [
        node("Add", ["x", "row"], "row_add"),           # [2,3,4,5] + [5]
        node("Sub", ["x", "col"], "col_sub"),           # [2,3,4,5] - [4,1]
        node("Mul", ["x", "ch"], "ch_mul"),             # per-channel scale
        node("Div", ["x", "s"], "scalar_div"),          # vector-scalar
        node("Sub", ["s", "x"], "scalar_rsub"),         # scalar-vector
        node("Div", ["ch", "pos"], "ch_rdiv"),          # [3,1,1] / [2,3,4,5]
        node("Max", ["col", "row"], "both_max"),        # [4,1] vs [5]: both sides broadcast
        node("Sub", ["col", "row"], "both_sub"),
        node("Min", ["p", "x"], "rank_min"),            # [3,4,5] vs [2,3,4,5]
        node("Mul", ["row", "col"], "row_col_mul"),
        node("Pow", ["x", "two"], "pow2"), node("Pow", ["pos", "half"], "pow_half"),
        node("Pow", ["x", "three"], "pow3"), node("Pow", ["pos", "minus1"], "pow_m1"),
        node("Pow", ["x", "one"], "pow1"), node("Pow", ["pos", "e"], "pow_vec"),
        node("Pow", ["x", "ei"], "pow_int_neg_base"), node("Pow", ["pos", "x"], "pow_runtime"),
        node("Max", ["x", "p", "row"], "max3"), node("Min", ["x", "p"], "min2"),
        node("Sum", ["x", "p", "col"], "sum3"), node("Mean", ["x", "p", "row"], "mean3"),
    ]
    inputs = {"x": [2, 3, 4, 5], "pos": [2, 3, 4, 5], "row": [5], "col": [4, 1], "p": [3, 4, 5]}
    feeds = {k: _randn(*s) for k, s in inputs.items()}
    feeds["pos"] = _randn(2, 3, 4, 5, positive=True)
    cm = check_with_ort(nodes, feeds, [n.output[0] for n in nodes], inits=consts).model
    k = _kernels(cm)
    assert (k["ch_mul"], k["scalar_rsub"], k["ch_rdiv"]) == ("f32-vaffinec-4", "f32-vrsubc-4", "f32-vrdivc-4")
    assert (k["pow2"], k["pow_half"], k["pow3"], k["pow_m1"]) == \
        ("f32-vsquare-4", "f32-vsqrt-4", "f32-vcube-4", "f32-vreciprocal-4")
    assert k["pow_vec"] == "f32-vpow-4"


def test_per_channel_scale_and_shift_merge_into_one_affine_pass():
    nodes = [node("Mul", ["x", "a"], "m"), node("Add", ["m", "b"], "y")]
    consts = {"a": _randn(16, 1, 1), "b": _randn(16, 1, 1)}
    cm = check_with_ort(nodes, {"x": _randn(1, 16, 7, 9)}, ["y"], inits=consts).model
    assert cm.graph.op_counts() == {"channel_affine": 1}
    src = cm.compiled.program.source
    assert src.count("f32_channel_affine(") == 2 and "f32_vmulc(" not in src  # definition + one call


def test_row_broadcast_runs_as_one_vector_scalar_pass():
    nodes = [node("Mul", ["x", "a"], "y")]
    consts = {"a": _randn(16, 1)}
    cm = check_with_ort(nodes, {"x": _randn(16, 63)}, ["y"], inits=consts).model
    src = cm.compiled.program.source
    assert "f32_vmulc(16, 63," in src and "for (int i0" not in src


def test_fused_activation_and_in_place():
    nodes = [node("Add", ["x", "y"], "a"), node("Relu", ["a"], "r"),
             node("Mul", ["r", "x"], "m"), node("Sigmoid", ["m"], "s")]
    feeds = {"x": _randn(2, 8, 6), "y": _randn(8, 1)}
    cm = check_with_ort(nodes, feeds, ["s"]).model
    assert cm.graph.op_counts() == {"binary_f32": 2}
    assert [n.attrs["act"][0] for n in cm.graph.nodes] == ["relu", "sigmoid"]
    plan = cm.compiled.program.plan
    a, m = cm.graph.nodes
    assert plan.offset(m.outputs[0]) == plan.offset(a.outputs[0])  # mul ran in place over add's output


def test_unary_ops():
    ops = ["Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Erf", "Floor", "Ceil", "Round", "Sign"]
    positive = {"Log", "Sqrt", "Reciprocal"}
    nodes = [node(op, ["p" if op in positive else "x"], op.lower()) for op in ops]
    x = _randn(3, 5, 7) * 3
    x[0, 0, :4] = [0.5, -2.5, 0.0, 1.5]  # Round is half-to-even, Sign(0) = 0
    feeds = {"x": x, "p": _randn(3, 5, 7, positive=True)}
    cm = check_with_ort(nodes, feeds, [n.output[0] for n in nodes]).model
    assert _kernels(cm)["erf"] == "f32-verf-4"


@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_axes(opset):
    nodes = [node("Softmax", ["x"], "s_axis1", axis=1), node("Softmax", ["x"], "s_last", axis=-1),
             node("LogSoftmax", ["x"], "ls_axis1", axis=1), node("LogSoftmax", ["x"], "ls_axis2", axis=2),
             node("Softmax", ["x"], "s_default"), node("Softmax", ["big"], "s_big", axis=-1)]
    feeds = {"x": _randn(2, 5, 3, 6) * 4, "big": _randn(3, 37) * 50}
    outs = [n.output[0] for n in nodes]
    check_with_ort(nodes, feeds, outs, opset=opset)


def _reduce_nodes(opset: int) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray]]:
    """Reductions with (axes, keepdims[, noop]); axes as attribute or input per the op's opset rule."""
    cases = [("ReduceMean", [2, 3], 1), ("ReduceMean", [1], 0), ("ReduceSum", [0, 2], 1),
             ("ReduceSum", [-1], 0), ("ReduceMax", [1, 3], 0), ("ReduceMin", [3], 1), ("ReduceProd", [1], 1),
             ("ReduceSumSquare", [2, 3], 0), ("ReduceL1", [0, 1, 2, 3], 1), ("ReduceL2", [1, 2], 1),
             ("ReduceMean", None, 0), ("ReduceSum", [2], 1)]
    nodes, consts = [], {}
    for i, (op, axes, keep) in enumerate(cases):
        out = f"{op.lower()}_{i}"
        as_input = opset >= (13 if op == "ReduceSum" else 18)
        if axes is None or not as_input:
            attrs = {} if axes is None else {"axes": axes}
            nodes.append(node(op, ["x"], out, keepdims=keep, **attrs))
        else:
            consts[f"axes_{i}"] = np.array(axes, np.int64)
            nodes.append(node(op, ["x", f"axes_{i}"], out, keepdims=keep))
    if opset >= 18:
        nodes.append(node("ReduceMax", ["x"], "noop", noop_with_empty_axes=1))
    return nodes, consts


@pytest.mark.parametrize("opset", [13, 18])
def test_reductions(opset):
    nodes, consts = _reduce_nodes(opset)
    x = (_randn(2, 3, 4, 5) * 0.5 + 1.0).astype(np.float32)
    check_with_ort(nodes, {"x": x}, [n.output[0] for n in nodes], inits=consts, opset=opset)


def test_lrn():
    nodes = [node("LRN", ["x"], "lrn5", size=5, alpha=1e-2, beta=0.75, bias=2.0),
             node("LRN", ["x"], "lrn3", size=3, alpha=3e-2, beta=0.5)]
    check_with_ort(nodes, {"x": _randn(2, 7, 5, 3) * 3}, ["lrn5", "lrn3"])


def test_cast_runtime_and_folded():
    nodes = [
        node("Mul", ["x", "ten"], "x10"),
        node("Cast", ["x10"], "as_i32", to=TensorProto.INT32),
        node("Cast", ["as_i32"], "back", to=TensorProto.FLOAT),
        node("Cast", ["x10"], "as_i64", to=TensorProto.INT64),
        node("Cast", ["x"], "as_bool", to=TensorProto.BOOL),
        node("Cast", ["as_bool"], "bool_f", to=TensorProto.FLOAT),
        node("Cast", ["x"], "same", to=TensorProto.FLOAT),
        node("Cast", ["k"], "k16", to=TensorProto.FLOAT16),
        node("Cast", ["k16"], "k32", to=TensorProto.FLOAT),
        node("Add", ["x", "k32"], "plus_k"),
        node("Shape", ["x"], "shape"), node("Cast", ["shape"], "shape_f", to=TensorProto.FLOAT),
        node("Mul", ["x", "shape_f"], "times_shape"),
        # integer shape arithmetic folds with ONNX semantics: Div truncates toward zero
        node("Sub", ["shape", "seven"], "shape_m7"), node("Div", ["shape_m7", "two_i"], "shape_div"),
        node("Cast", ["shape_div"], "shape_div_f", to=TensorProto.FLOAT),
        node("Add", ["x", "shape_div_f"], "plus_div"),
    ]
    x = _randn(2, 4, 3)
    x[0, 0, :2] = 0.0
    consts = {"ten": np.array(10.0, np.float32), "k": np.array([0.1, 2.5, -3.3], np.float32),
              "seven": np.array(7, np.int64), "two_i": np.array(2, np.int64)}
    outs = ["back", "as_i64", "bool_f", "same", "plus_k", "times_shape", "plus_div"]
    cm = check_with_ort(nodes, {"x": x}, outs, inits=consts).model
    assert cm.graph.op_counts()["cast"] == 5  # the float16 round trip and Shape -> Cast folded


def test_legacy_broadcast_attribute_is_rejected():
    """Opset < 7 'broadcast'/'axis' attrs: the ONNX checker names them (opset < 7 models are refused)."""
    m = make_model([node("Add", ["x", "y"], "z")], {"x": _randn(2, 3), "y": _randn(3)}, {"z": _randn(2, 3)})
    m.graph.node[0].attribute.append(helper.make_attribute("broadcast", 1))
    with pytest.raises(CuvilError, match="broadcast"):
        CuvilModel.load(m)
