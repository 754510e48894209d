"""The trigonometric and hyperbolic ops (ONNX Sin ... Atanh) on the vector kernels: within 4e-7 relative
of numpy's float64 answer across each function's domain (a few float32 ulp: Cephes' polynomials with
Cody-Waite reduction, no libm in the module), and the special values (+-0, +-inf, nan, the domain edges)
as numpy gives them, on the SIMD128 and relaxed tiers of this host's family."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from cuvil_edge import CuvilModel, Target
from runtime_wasm.variants import probe_host

#: op -> (numpy reference, domain sampled, special inputs)
OPS = {
    "Sin": (np.sin, (-100, 100), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30]),
    "Cos": (np.cos, (-100, 100), [0.0, np.inf, np.nan]),
    "Tan": (np.tan, (-1.5, 1.5), [0.0, -0.0, np.inf, np.nan]),
    "Asin": (np.arcsin, (-1, 1), [1.0, -1.0, 1.5, np.nan, 0.0]),
    "Acos": (np.arccos, (-1, 1), [1.0, -1.0, -1.5, np.nan]),
    "Atan": (np.arctan, (-50, 50), [np.inf, -np.inf, np.nan, -0.0, 1e30]),
    "Sinh": (np.sinh, (-10, 10), [np.inf, -np.inf, np.nan, -0.0, 100.0]),
    "Cosh": (np.cosh, (-10, 10), [np.inf, -np.inf, np.nan, 0.0, -100.0]),
    "Asinh": (np.arcsinh, (-3000, 3000), [np.inf, -np.inf, np.nan, -0.0, 1e30]),
    "Acosh": (np.arccosh, (1, 3000), [1.0, 0.5, np.inf, np.nan, 1e30]),
    "Atanh": (np.arctanh, (-0.999, 0.999), [1.0, -1.0, 2.0, np.nan, -0.0]),
}
N = 2048


@pytest.fixture(scope="module", params=["simd128", "relaxed"])
def tier(request) -> str:
    return request.param


@pytest.mark.parametrize("op", sorted(OPS))
def test_trig_ops_match_numpy_to_a_few_ulp(op: str, tier: str) -> None:
    ref, (lo, hi), specials = OPS[op]
    x = np.concatenate([np.linspace(lo, hi, N - len(specials)), specials]).astype(np.float32)
    io = [helper.make_tensor_value_info(name, 1, [N]) for name in "xy"]
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", io[:1], io[1:])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    with CuvilModel.load(model).optimize(targets=[Target(tier, probe_host().family)]) as m:
        y = m.predict({"x": x})["y"]
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
        finite = np.isfinite(want.astype(np.float32))  # cosh(100) is finite in float64, inf in float32
    rel = np.abs(y[finite] - want[finite]) / np.maximum(np.abs(want[finite]), np.finfo(np.float32).tiny)
    assert rel.max() <= 4e-7, (op, float(x[finite][rel.argmax()]), float(rel.max()))
    with np.errstate(over="ignore"):  # cosh(100) overflows float32: inf, as the module gives
        np.testing.assert_array_equal(y[~finite], want[~finite].astype(np.float32))  # nan where nan, +-inf
    assert np.array_equal(np.signbit(y[x == 0]), np.signbit(want[x == 0]))  # odd functions keep -0
