"""Transformer-era ops against onnxruntime (1 thread, rtol = atol = 1e-4): batched MatMul, LayerNorm and
GELU (ops and decomposed patterns), fused attention, Gather with run-time ids, comparisons, logic,
Where, Einsum, TopK, ArgMax/ArgMin, CumSum, Hardmax, integer/bool movement, vision-head ops."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel
from tests.support.ort_check import check_with_ort

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def node(op: str, ins: list[str], out: str | list[str], **attrs) -> onnx.NodeProto:
    outs = [out] if isinstance(out, str) else out
    return helper.make_node(op, ins, outs, name=outs[0], **attrs)


def kernels_by_op(cm: CuvilModel) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in cm.graph.nodes:
        if n.name in cm.compiled.program.kernels_used:
            out.setdefault(n.op, []).append(cm.compiled.program.kernels_used[n.name])
    return out


def test_batched_matmul_broadcast_constant_and_transposed_b():
    nodes = [
        node("MatMul", ["a4", "b4"], "bh"),  # [2,3,5,8] x [2,3,8,6]
        node("MatMul", ["a4", "b3"], "bcast"),  # [2,3,5,8] x [3,8,6]: B broadcast over dim 0
        node("MatMul", ["a3", "w3"], "const_b"),  # constant 3D B packed at build time
        node("Transpose", ["bt"], "btt", perm=[0, 2, 1]),
        node("MatMul", ["a3", "btt"], "trans_b"),  # K^T-style: transpose folds into the matmul
        node("MatMul", ["a2", "b3"], "a_bcast"),
    ]  # [5,8] x [3,8,6]
    shapes = {
        "a4": [2, 3, 5, 8],
        "b4": [2, 3, 8, 6],
        "b3": [3, 8, 6],
        "a3": [3, 5, 8],
        "bt": [3, 6, 8],
        "a2": [5, 8],
    }
    feeds = {k: rand(*s, seed=i) for i, (k, s) in enumerate(shapes.items())}
    cm = check_with_ort(nodes, feeds, ["bh", "bcast", "const_b", "trans_b", "a_bcast"],
                        inits={"w3": rand(3, 8, 6, seed=1)}).model
    assert cm.graph.op_counts().get("transpose", 0) == 0
    assert "f32_bmm(" in cm.compiled.program.source and cm.compiled.program.source.count("f32_bmm(") == 6


@pytest.mark.parametrize("decomposed", [False, True])
def test_layernorm_op_and_pattern(decomposed: bool):
    g, b = rand(32, seed=3) + 1, rand(32, seed=4)
    if decomposed:
        nodes = [
            node("ReduceMean", ["x"], "mu", axes=[-1]),
            node("Sub", ["x", "mu"], "d"),
            node("Pow", ["d", "two"], "d2"),
            node("ReduceMean", ["d2"], "var", axes=[-1]),
            node("Add", ["var", "eps"], "ve"),
            node("Sqrt", ["ve"], "sd"),
            node("Div", ["d", "sd"], "n"),
            node("Mul", ["n", "g"], "ng"),
            node("Add", ["ng", "b"], "y"),
        ]
        consts = {"two": np.float32(2), "eps": np.float32(1e-5), "g": g, "b": b}
    else:
        nodes = [node("LayerNormalization", ["x", "g", "b"], "y", axis=-1, epsilon=1e-5)]
        consts = {"g": g, "b": b}
    cm = check_with_ort(nodes, {"x": rand(2, 7, 32) * 3 + 1}, ["y"], inits=consts).model
    assert cm.graph.op_counts() == {"layernorm": 1}


@pytest.mark.parametrize("form", ["op", "op_tanh", "erf", "tanh"])
def test_gelu_op_and_patterns(form: str):
    opset = 20 if form.startswith("op") else 17
    if form == "op":
        nodes, consts = [node("Gelu", ["x"], "y")], {}
    elif form == "op_tanh":
        nodes, consts = [node("Gelu", ["x"], "y", approximate="tanh")], {}
    elif form == "erf":
        nodes = [
            node("Div", ["x", "sqrt2"], "u"),
            node("Erf", ["u"], "e"),
            node("Add", ["e", "one"], "e1"),
            node("Mul", ["x", "e1"], "xe"),
            node("Mul", ["xe", "half"], "y"),
        ]
        consts = {"sqrt2": np.float32(math.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    else:
        nodes = [
            node("Pow", ["x", "three"], "x3"),
            node("Mul", ["x3", "k"], "kx3"),
            node("Add", ["x", "kx3"], "in"),
            node("Mul", ["in", "c"], "u"),
            node("Tanh", ["u"], "t"),
            node("Add", ["t", "one"], "t1"),
            node("Mul", ["half", "x"], "hx"),
            node("Mul", ["hx", "t1"], "y"),
        ]
        consts = {
            "three": np.float32(3),
            "k": np.float32(0.044715),
            "c": np.float32(math.sqrt(2 / math.pi)),
            "one": np.float32(1),
            "half": np.float32(0.5),
        }
    cm = check_with_ort(nodes, {"x": rand(3, 37) * 3}, ["y"], inits=consts, opset=opset).model
    assert cm.graph.op_counts() == {"gelu": 1}


@pytest.mark.parametrize("mask_shape", [None, [2, 1, 1, 24], [24, 24]])
def test_attention_fused(mask_shape):
    """Q K^T / sqrt(d) (+ mask) -> softmax -> V, heads split/merged by transposes: one attention node."""
    b, s, h, d = 2, 24, 3, 8
    nodes = [
        node("Reshape", ["q_in", "shp"], "q_r"),
        node("Transpose", ["q_r"], "q", perm=[0, 2, 1, 3]),
        node("Reshape", ["k_in", "shp"], "k_r"),
        node("Transpose", ["k_r"], "kt", perm=[0, 2, 3, 1]),
        node("Reshape", ["v_in", "shp"], "v_r"),
        node("Transpose", ["v_r"], "v", perm=[0, 2, 1, 3]),
        node("MatMul", ["q", "kt"], "qk"),
        node("Mul", ["qk", "scale"], "s"),
    ]
    shapes = {n: [b, s, h * d] for n in ("q_in", "k_in", "v_in")}
    last = "s"
    if mask_shape:
        nodes.append(node("Add", ["s", "mask"], "sm"))
        shapes["mask"] = mask_shape
        last = "sm"
    nodes += [
        node("Softmax", [last], "p", axis=-1),
        node("MatMul", ["p", "v"], "ctx"),
        node("Transpose", ["ctx"], "ctx_t", perm=[0, 2, 1, 3]),
        node("Reshape", ["ctx_t", "out_shp"], "y"),
    ]
    consts = {
        "shp": np.array([b, s, h, d], np.int64),
        "out_shp": np.array([b, s, h * d], np.int64),
        "scale": np.float32(1 / math.sqrt(d)),
    }
    feeds = {k: rand(*sh, seed=i) for i, (k, sh) in enumerate(shapes.items())}
    if mask_shape:
        feeds["mask"] = np.where(rand(*mask_shape, seed=9) > 0.5, -10000.0, 0.0).astype(np.float32)
    cm = check_with_ort(nodes, feeds, ["y"], inits=consts).model
    assert cm.graph.op_counts() == {"attention": 1, "reshape": 4}


@pytest.mark.parametrize("ids_type", [I64, I32])
def test_gather_runtime_ids(ids_type: int):
    nodes = [node("Gather", ["emb", "ids"], "rows"), node("Gather", ["x", "ids"], "cols", axis=1)]
    ids = np.array([[3, 0, 9], [-1, 4, 4]], onnx.helper.tensor_dtype_to_np_dtype(ids_type))
    check_with_ort(nodes, {"ids": ids, "x": rand(2, 10, 3)}, ["rows", "cols"], inits={"emb": rand(10, 6)})


def test_compare_logic_where_and_int_movement():
    nodes = [
        node("Equal", ["i", "j"], "eq"),
        node("Less", ["x", "y"], "lt"),
        node("Greater", ["x", "zero"], "gt"),
        node("LessOrEqual", ["x", "y"], "le"),
        node("GreaterOrEqual", ["i", "j"], "ge"),
        node("Not", ["lt"], "not"),
        node("And", ["lt", "gt"], "and"),
        node("Or", ["eq", "gt"], "or"),
        node("Xor", ["lt", "gt"], "xor"),
        node("Where", ["gt", "x", "ninf"], "where"),
        node("Expand", ["eq", "eshape"], "bool_expand"),
        node("Transpose", ["i"], "i64_t", perm=[1, 0]),
        node("Concat", ["i", "i"], "i64_cat", axis=1),
        node("Cast", ["i"], "i_f", to=F),
        node("Cast", ["x"], "x_i32", to=I32),
        node("Cast", ["gt"], "gt_i64", to=I64),
    ]
    rng = np.random.default_rng(0)
    feeds = {"i": rng.integers(-2, 3, (4, 5)), "j": rng.integers(-2, 3, 5), "x": rand(4, 5) * 3, "y": rand(5)}
    consts = {"zero": np.float32(0), "ninf": np.float32(-1e9), "eshape": np.array([3, 4, 5], np.int64)}
    check_with_ort(nodes, feeds, [n.output[0] for n in nodes], inits=consts)


def test_einsum_topk_argmax_cumsum_hardmax():
    nodes = [
        node("Einsum", ["q", "k"], "scores", equation="bhid,bhjd->bhij"),
        node("Einsum", ["p", "k"], "ctx", equation="bhij,bhjd->bhid"),
        node("Einsum", ["a", "w"], "proj", equation="bsd,de->bse"),
        node("TopK", ["x", "kk"], ["vals", "idx"], axis=-1),
        node("TopK", ["x", "kk"], ["svals", "sidx"], axis=0, largest=0),
        node("ArgMax", ["x"], "amax", axis=1),
        node("ArgMin", ["x"], "amin", axis=0, keepdims=0),
        node("CumSum", ["x", "ax1"], "cs"),
        node("CumSum", ["x", "ax0"], "cs_rev", exclusive=1, reverse=1),
        node("Hardmax", ["x"], "hm"),
    ]
    shapes = {
        "q": [1, 2, 5, 4],
        "k": [1, 2, 6, 4],
        "p": [1, 2, 5, 6],
        "a": [2, 3, 4],
        "x": [5, 7],
    }
    consts = {
        "w": rand(4, 6),
        "kk": np.array([3], np.int64),
        "ax1": np.array(1, np.int64),
        "ax0": np.array(0, np.int64),
    }
    feeds = {k: rand(*s, seed=i) for i, (k, s) in enumerate(shapes.items())}
    check_with_ort(nodes, feeds, [o for n in nodes for o in n.output], inits=consts)


def test_vision_head_ops():
    nodes = [
        node("DepthToSpace", ["x"], "d2s", blocksize=2),
        node("DepthToSpace", ["x"], "d2s_crd", blocksize=2, mode="CRD"),
        node("SpaceToDepth", ["x"], "s2d", blocksize=2),
        node("InstanceNormalization", ["x", "sc", "bi"], "inorm", epsilon=1e-5),
        node("PRelu", ["x", "slope"], "prelu"),
        node("Softplus", ["x"], "softplus"),
        node("Elu", ["x"], "elu", alpha=0.7),
        node("Selu", ["x"], "selu"),
        node("Softsign", ["x"], "softsign"),
        node("Mish", ["x"], "mish"),
        node("Sigmoid", ["x"], "sig"),
        node("Mul", ["x", "sig"], "silu"),
        node("Shrink", ["x"], "shrink", lambd=0.6, bias=0.1),
        node("ThresholdedRelu", ["x"], "trelu"),
        node("Celu", ["x"], "celu", alpha=1.5),
        node("GroupNormalization", ["x", "gsc", "gbi"], "gnorm", num_groups=2, epsilon=1e-5),
    ]
    consts = {
        "sc": rand(8, seed=1) + 1,
        "bi": rand(8, seed=2),
        "slope": rand(8, 1, 1, seed=3) * 0.3,
        "gsc": rand(8, seed=4) + 1,
        "gbi": rand(8, seed=5),
    }
    outs = [n.output[0] for n in nodes if n.output[0] != "sig"]
    cm = check_with_ort(nodes, {"x": rand(1, 8, 4, 6) * 2}, outs, inits=consts, opset=21).model
    assert "f32-vsilu-4" in kernels_by_op(cm)["epilogue_act"]  # x * sigmoid(x) -> one fused activation


@pytest.mark.parametrize("flag", [True, False])
def test_if_with_build_time_condition_is_inlined(flag: bool):
    """Shape-dependent If (as exporters write for optional paths): the condition folds, the taken
    branch's nodes join the graph and may read outer values."""

    def branch(op: str) -> onnx.GraphProto:
        out = helper.make_tensor_value_info(f"{op}_out", F, [2, 3])
        return helper.make_graph(
            [node(op, ["x", "c"], f"{op}_out")],
            op,
            [],
            [out],
            [numpy_helper.from_array(np.float32(2.0), "c")],
        )

    nodes = [
        node("Shape", ["x"], "shape"),
        node("ReduceSum", ["shape"], "n", keepdims=0),
        node("Equal", ["n", "five" if flag else "six"], "cond"),
        helper.make_node("If", ["cond"], ["y"], then_branch=branch("Add"), else_branch=branch("Mul")),
    ]
    consts = {"five": np.array(5, np.int64), "six": np.array(6, np.int64)}
    cm = check_with_ort(nodes, {"x": rand(2, 3)}, ["y"], inits=consts).model
    assert len(cm.graph.nodes) == 1  # only the taken branch's Add or Mul runs
