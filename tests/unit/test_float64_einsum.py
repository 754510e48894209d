"""float64 at run time in double precision (MatMul, Gemm, Softmax, ReduceLogSum(Exp): the ``f64-math``
kernels) and Einsum's general equations, against onnxruntime on seeded inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from cuvil_edge import CuvilModel
from cuvil_edge.errors import CuvilError
from tests.support.ort_check import check_with_ort, make_model

#: far tighter than float32 can meet: the float64 ops must run in double precision
RTOL, ATOL = 1e-11, 1e-300


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def node(op: str, ins: list[str], out: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ins, [out], name=out, **attrs)


def test_float64_matmul_gemm_softmax_and_log_reductions_in_double():
    r = _rng(1)
    t = -np.linspace(0, 740, 64)  # softmax of [0, t]: exp(t) / (1 + exp(t)), down to subnormals
    feeds = {"a": r.standard_normal((2, 3, 5, 7)), "b": r.standard_normal((3, 7, 6)),
             "bt": r.standard_normal((2, 1, 6, 7)), "g": r.standard_normal((7, 4)),
             "gw": r.standard_normal((5, 7)), "gc": r.standard_normal((5,)),
             "pair": np.stack([np.zeros_like(t), t], 1),
             "big": r.standard_normal((3, 4, 5)) * 300,
             "tiny": np.logspace(-320, 300, 40).reshape(40, 1)}
    nodes = [
        node("MatMul", ["a", "b"], "mm_bcast"),                    # batch broadcast [2,3] x [3]
        node("Transpose", ["bt"], "bt_t", perm=[0, 1, 3, 2]),
        node("MatMul", ["a", "bt_t"], "mm_trans_b"),               # folded into trans_b
        node("MatMul", ["a", "w"], "mm_const_b"),                  # a constant B stays float64
        node("Gemm", ["g", "gw", "gc"], "gemm", transA=1, transB=1, alpha=0.5, beta=2.0),
        node("Softmax", ["pair"], "softmax", axis=1),
        node("LogSoftmax", ["big"], "logsoftmax_cols", axis=1),
        node("ReduceLogSumExp", ["big"], "lse", axes=[0, 2], keepdims=0),
        node("ReduceLogSum", ["tiny"], "log_sum", axes=[1], keepdims=1),
    ]
    inits = {"w": r.standard_normal((7, 3))}
    res = check_with_ort(nodes, feeds, [n.output[0] for n in nodes if n.op_type != "Transpose"], inits=inits,
                         opset=17, rtol=RTOL, atol=ATOL)
    assert {"f64-gemm-2x4", "f64-softmax-1", "f64-logsoftmax-1", "f64-vexp-1", "f64-vlog-1"} <= res.kernels
    assert all(v.dtype == np.float64 for v in res.got[0].values())


EINSUM = [  # (equation, operand shapes)
    ("i,i", [(5,), (5,)]),                          # implicit output: a scalar
    ("ij->i", [(3, 4)]),                            # a sum
    ("...ii->...i", [(3, 5, 5)]),                   # batched diagonals
    ("ii", [(4, 4)]),                               # trace
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("i,j->ij", [(3,), (4,)]),                      # outer product
    ("ij,jk->k", [(3, 4), (4, 5)]),                 # i summed before the contraction
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),     # three operands
    ("...ij,...jk", [(2, 1, 3, 4), (1, 5, 4, 2)]),  # ellipsis broadcast, implicit output
    ("bji,bjk->kbi", [(2, 3, 4), (2, 3, 5)]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_einsum_equations(dtype):
    r = _rng(2)
    nodes, feeds = [], {}
    for i, (eq, shapes) in enumerate(EINSUM):
        names = [f"x{i}_{j}" for j in range(len(shapes))]
        feeds.update({n: r.standard_normal(s).astype(dtype) for n, s in zip(names, shapes)})
        nodes.append(node("Einsum", names, f"e{i}", equation=eq))
    tol = (RTOL, 1e-12) if dtype == np.float64 else (1e-4, 1e-5)
    res = check_with_ort(nodes, feeds, [n.output[0] for n in nodes], opset=17, rtol=tol[0], atol=tol[1])
    for i, (eq, shapes) in enumerate(EINSUM):  # and numpy agrees on every shape
        want = np.einsum(eq, *(feeds[f"x{i}_{j}"] for j in range(len(shapes))))
        assert res.got[0][f"e{i}"].shape == want.shape, eq


def test_integer_einsum_and_log_sum_exp_stay_refused():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    mm = make_model([node("Einsum", ["x", "y"], "z", equation="ij,kj->ik")], {"x": x, "y": x}, ["z"])
    mm.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", onnx.TensorProto.INT32, [3, 3]))
    with pytest.raises(CuvilError, match=r"Einsum.*matmul runs on float32, float64 only, not int32"):
        CuvilModel.load(mm)
    lse = make_model([node("ReduceLogSumExp", ["x"], "z", axes=[1])], {"x": x}, ["z"])
    lse.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", onnx.TensorProto.INT32, [3, 1]))
    with pytest.raises(CuvilError, match=r"ReduceLogSumExp on int32 at run time \(float32 and float64"):
        CuvilModel.load(lse)


def test_float64_unary_ops_run_in_double():
    """Exp, Log and the exact ones (Neg, Abs, Sqrt, Floor, Ceil, Round half to even, Reciprocal, Sign)
    in double: equal to onnxruntime's at 1e-15, NaN, -0.0 and 1e-300 included."""
    ops = ["Neg", "Abs", "Sqrt", "Floor", "Ceil", "Round", "Reciprocal", "Sign", "Exp", "Log"]
    x = np.array([0.5, 1.5, 2.5, -0.5, -0.0, 3.3, 1e-300, np.nan, 700.0, 2.0 ** 60])
    checked = check_with_ort([node(o, ["x"], o.lower()) for o in ops], {"x": x}, [o.lower() for o in ops],
                             rtol=1e-15, atol=0.0)
    assert {k for k in checked.kernels if k.startswith("f64-v")} == {f"f64-v{o.lower()}-1" for o in ops}
