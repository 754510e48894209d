"""ReduceMax/Min/Sum/Prod at run time on integers, bool and float64 (``reduce_loop``): every axis set and
keepdims, against numpy with ONNX's rule that sums and products stay in (and wrap in) the input type."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target

TYPES = {"int32": TensorProto.INT32, "int64": TensorProto.INT64, "uint8": TensorProto.UINT8,
         "int8": TensorProto.INT8, "uint64": TensorProto.UINT64, "float64": TensorProto.DOUBLE,
         "bool": TensorProto.BOOL}
NUMPY = {"ReduceMax": np.max, "ReduceMin": np.min, "ReduceSum": np.sum, "ReduceProd": np.prod}


#: ONNX defines ReduceSum/ReduceProd on numbers only
CASES = [(d, op) for d in sorted(TYPES) for op in sorted(NUMPY)
         if d != "bool" or op in ("ReduceMax", "ReduceMin")]


@pytest.mark.parametrize(("dtype", "op"), CASES)
@pytest.mark.parametrize(("axes", "keepdims"), [([1], 1), ([0, 2], 0), ([0, 1, 2], 1)])
def test_reduce_on_other_types_matches_numpy(dtype, op, axes, keepdims) -> None:
    rng = np.random.default_rng(len(axes))
    if dtype == "bool":
        x = rng.random((2, 3, 4)) < 0.5
    elif dtype == "float64":
        x = rng.standard_normal((2, 3, 4))
    else:
        info = np.iinfo(dtype)
        x = rng.integers(max(info.min, -100), min(info.max, 100), (2, 3, 4), endpoint=True).astype(dtype)
    want = NUMPY[op](x, axis=tuple(axes), keepdims=bool(keepdims),
                     **({"dtype": x.dtype} if op in ("ReduceSum", "ReduceProd") else {})).astype(x.dtype)
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TYPES[dtype], [2, 3, 4])],
                          [helper.make_tensor_value_info("y", TYPES[dtype], list(want.shape))],
                          [numpy_helper.from_array(np.array(axes, np.int64), "axes")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with CuvilModel.load(model).optimize(targets=[Target()]) as m:
        got = m.predict({"x": x})["y"]
    assert got.dtype == want.dtype
    if dtype == "float64":  # another summation order
        np.testing.assert_allclose(got, want, rtol=1e-12)
    else:
        np.testing.assert_array_equal(got, want)
