"""RandomUniform, RandomNormal, their Like forms, Bernoulli and Multinomial (``convert_random.py``): draws
from Philox4x32-10 keyed by the node's seed, the run counter a persistent state.

The bits' oracle is Philox4x32-10 itself, written here in numpy and held to Random123's known answers,
then the documented mapping to numbers: every module variant (x86 and ARM, SIMD128 and relaxed) and every
fresh instance gives exactly those numbers, run after run. No generator reproduces another's values, so
the distributions are held by their statistics: mean and variance within 5 standard errors, the
Kolmogorov-Smirnov distance under its 0.1% critical value, frequencies within 5 standard errors, and
onnxruntime's Bernoulli and Multinomial by the same bounds on the same inputs (their semantics: 1 with
probability p, classes by unnormalized log-probabilities).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from cuvil_edge import ALL_TARGETS, CuvilModel, Target, UnsupportedOperator
from cuvil_edge.errors import QuantizationError
from cuvil_edge.here import instantiate_here
from cuvil_edge.oracle import ort_session
from tests.support.ort_check import make_model

TARGET = [Target("relaxed", "x86")]
_MASK = np.uint64(0xFFFFFFFF)


def philox(ctr: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 of each row of ``ctr`` ([n, 4] uint32) under ``key``: Random123's reference."""
    c = ctr.astype(np.uint64)
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(0x9E3779B9)) & _MASK, (k1 + np.uint64(0xBB67AE85)) & _MASK
        p0, p1 = c[:, 0] * np.uint64(0xD2511F53), c[:, 2] * np.uint64(0xCD9E8D57)
        c = np.stack([(p1 >> np.uint64(32)) ^ c[:, 1] ^ k0, p1 & _MASK,
                      (p0 >> np.uint64(32)) ^ c[:, 3] ^ k1, p0 & _MASK], axis=1)
    return c.astype(np.uint32)


def words(blocks: int, seed: float, run: int, draw: int = 0) -> np.ndarray:
    """The words of a seeded node's first ``blocks`` blocks in run ``run``: counter (block, draw, run)."""
    ctr = np.zeros((blocks, 4), np.uint32)
    ctr[:, 0], ctr[:, 1], ctr[:, 2], ctr[:, 3] = np.arange(blocks), draw, run & 0xFFFFFFFF, run >> 32
    return philox(ctr, (int(np.float32(seed).view(np.uint32)), 0))


def u53(w: np.ndarray) -> np.ndarray:
    """[0, 1) from the word pairs (hi, lo) of ``w`` [n, 2]."""
    bits = (w[:, 0].astype(np.uint64) << np.uint64(21)) | (w[:, 1].astype(np.uint64) >> np.uint64(11))
    return bits.astype(np.float64) * 2.0**-53


def uniform_ref(n: int, seed: float, run: int, low: float, high: float, dtype: str) -> np.ndarray:
    """float64: 53 bits of a word pair; the others one word's top significand bits (24 float32, 11
    float16), in float64, rounded to float32, then to ``dtype``."""
    if dtype == "float64":
        return low + (high - low) * u53(words(-(-n // 2), seed, run).reshape(-1, 2))[:n]
    bits = np.finfo(dtype).nmant + 1
    u = (words(-(-n // 4), seed, run).reshape(-1)[:n] >> np.uint32(32 - bits)).astype(np.float64) * 2.0**-bits
    return (low + (high - low) * u).astype(np.float32).astype(dtype)


def normal_ref(n: int, seed: float, run: int, mean: float, scale: float) -> np.ndarray:
    w = words(-(-n // 2), seed, run)
    r, t = np.sqrt(-2.0 * np.log(1.0 - u53(w[:, :2]))), 2.0 * np.pi * u53(w[:, 2:])
    return mean + scale * np.stack([r * np.cos(t), r * np.sin(t)], axis=1).reshape(-1)[:n]


def build(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: dict[str, tuple[int, list]],
          targets: list[Target] = TARGET) -> CuvilModel:
    """A model of ``nodes`` at opset 22, ``outputs`` by (ONNX type, shape), built for ``targets``."""
    graph = helper.make_graph(nodes, "random", [helper.make_tensor_value_info(
        k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, t, s) for k, (t, s) in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    return CuvilModel.load(model).optimize(targets=targets)


def ks_distance(x: np.ndarray, cdf) -> float:
    """Kolmogorov-Smirnov distance between the sample ``x`` and the distribution ``cdf``."""
    x = np.sort(x.astype(np.float64).reshape(-1))
    f, n = cdf(x), len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


KS_CRIT = 1.95  # / sqrt(n): the 0.1% critical value


def test_philox_reference_gives_random123s_known_answers() -> None:
    zeros, ones = np.zeros((1, 4), np.uint32), np.full((1, 4), 0xFFFFFFFF, np.uint32)
    pi = np.array([[0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344]], np.uint32)
    assert philox(zeros, (0, 0)).tolist() == [[0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]]
    assert philox(ones, (0xFFFFFFFF,) * 2).tolist() == [[0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]]
    assert philox(pi, (0xA4093822, 0x299F31D0)).tolist() == [[0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]]


def test_every_variant_and_fresh_instance_draws_the_same_philox_stream() -> None:
    nodes = [helper.make_node("RandomUniform", [], ["u"], shape=[3, 333], seed=5.0, low=-2.0, high=3.0),
             helper.make_node("RandomUniform", [], ["d"], shape=[7, 3], seed=5.5, dtype=TensorProto.DOUBLE),
             helper.make_node("RandomNormal", [], ["n"], shape=[1001], seed=7.0, mean=1.0, scale=2.0)]
    cm = build(nodes, {}, {"u": (TensorProto.FLOAT, [3, 333]), "d": (TensorProto.DOUBLE, [7, 3]),
                           "n": (TensorProto.FLOAT, [1001])}, targets=list(ALL_TARGETS))
    runs = []
    for variant in cm.spec.variants:
        for _ in range(2):  # two fresh instances of each module
            inst = instantiate_here(cm.compiled, variant)
            runs.append([inst.predict({}) for _ in range(3)])
    for run, got in enumerate(runs[0]):
        u, d = uniform_ref(999, 5.0, run, -2.0, 3.0, "float32"), uniform_ref(21, 5.5, run, 0, 1, "float64")
        np.testing.assert_array_equal(got["u"], u.reshape(3, 333))
        np.testing.assert_array_equal(got["d"], d.reshape(7, 3))
        np.testing.assert_allclose(got["n"], normal_ref(1001, 7.0, run, 1.0, 2.0), rtol=1e-6, atol=1e-6)
        assert got["u"].dtype == np.float32 and got["d"].dtype == np.float64
    for other in runs[1:]:  # bit for bit, normals included
        for a, b in zip(runs[0], other):
            assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(runs[0][0]["n"], runs[0][1]["n"])  # the stream moves on


def test_reset_restarts_the_stream_and_seeds_key_it() -> None:
    nodes = [helper.make_node("RandomNormalLike", ["x"], ["a"], seed=1.0),
             helper.make_node("RandomNormalLike", ["x"], ["b"], seed=1.0),  # same seed: same numbers
             helper.make_node("RandomNormalLike", ["x"], ["c"], seed=2.0),
             helper.make_node("RandomNormalLike", ["x"], ["d"], name="unseeded"),
             helper.make_node("RandomNormalLike", ["x"], ["e"], name="unseeded_too")]
    x = np.zeros((4, 8), np.float32)
    cm = build(nodes, {"x": x}, {k: (TensorProto.FLOAT, [4, 8]) for k in "abcde"})
    first, second = cm.predict({"x": x}), cm.predict({"x": x})
    np.testing.assert_array_equal(first["a"], first["b"])
    assert len({first[k].tobytes() for k in "acde"} | {second["a"].tobytes()}) == 5
    cm.reset_state()
    again = cm.predict({"x": x})
    assert all(np.array_equal(again[k], first[k]) for k in first)


def test_draws_have_their_distributions() -> None:
    n, low, high, mean, scale = 200_000, -1.5, 2.5, 0.5, 3.0
    nodes = [helper.make_node("RandomUniform", [], ["u"], shape=[n], seed=11.0, low=low, high=high),
             helper.make_node("RandomUniform", [], ["d"], shape=[n], seed=12.0, dtype=TensorProto.DOUBLE),
             helper.make_node("RandomNormal", [], ["z"], shape=[n], seed=13.0, mean=mean, scale=scale),
             helper.make_node("RandomNormal", [], ["zd"], shape=[n], seed=14.0, dtype=TensorProto.DOUBLE)]
    cm = build(nodes, {}, {"u": (TensorProto.FLOAT, [n]), "d": (TensorProto.DOUBLE, [n]),
                           "z": (TensorProto.FLOAT, [n]), "zd": (TensorProto.DOUBLE, [n])})
    got = cm.predict({})
    se = 5 / math.sqrt(n)
    for name, lo, hi in (("u", low, high), ("d", 0.0, 1.0)):
        u = got[name].astype(np.float64)
        assert lo <= u.min() and u.max() < hi
        w = hi - lo
        assert abs(u.mean() - (lo + hi) / 2) < se * w / math.sqrt(12)
        assert abs(u.var() - w * w / 12) < se * w * w * math.sqrt(1 / 180)  # sd of (u - m)^2: w^2 / sqrt(180)
        assert ks_distance(u, lambda t, lo=lo, w=w: (t - lo) / w) < KS_CRIT / math.sqrt(n)
    erf = np.vectorize(math.erf)
    for name, m, s in (("z", mean, scale), ("zd", 0.0, 1.0)):
        z = got[name].astype(np.float64)
        assert abs(z.mean() - m) < se * s and abs(z.var() - s * s) < se * s * s * math.sqrt(2)
        assert ks_distance(z, lambda t, m=m, s=s: 0.5 * (1 + erf((t - m) / (s * math.sqrt(2))))) \
            < KS_CRIT / math.sqrt(n)


def test_float16_draws_keep_their_type_and_range() -> None:
    x = np.zeros((64, 64), np.float16)
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["u"], seed=3.0),  # float16 from the input
             helper.make_node("RandomNormal", [], ["z"], shape=[4096], seed=4.0, dtype=TensorProto.FLOAT16)]
    cm = build(nodes, {"x": x}, {"u": (TensorProto.FLOAT16, [64, 64]), "z": (TensorProto.FLOAT16, [4096])})
    got = cm.predict({"x": x})
    assert got["u"].dtype == np.float16 and got["z"].dtype == np.float16
    assert 0 <= got["u"].min() and got["u"].max() < 1
    assert len(np.unique(got["u"])) > 1500  # 11 bits: 2048 levels
    np.testing.assert_array_equal(got["u"], uniform_ref(4096, 3.0, 0, 0.0, 1.0, "float16").reshape(64, 64))


def test_bernoulli_draws_one_with_probability_p_as_the_onnx_reference() -> None:
    """1 with probability p, as the operator's text and ONNX's reference say (and torch.bernoulli, which
    exporters write as it); its ONNX function, ``Greater(u, p)``, and onnxruntime, which runs that
    function, give 1 with probability 1 - p."""
    n = 40_000
    p = np.repeat(np.array([[0.0], [1.0], [0.3]], np.float32), n, axis=1)
    nodes = [helper.make_node("Bernoulli", ["p"], ["y"], seed=2.0),
             helper.make_node("Bernoulli", ["p"], ["i"], seed=2.0, dtype=TensorProto.INT64)]
    cm = build(nodes, {"p": p}, {"y": (TensorProto.FLOAT, [3, n]), "i": (TensorProto.INT64, [3, n])})
    got = cm.predict({"p": p})
    y = got["y"]
    assert y.dtype == np.float32 and got["i"].dtype == np.int64
    np.testing.assert_array_equal(got["i"], y.astype(np.int64))  # one seed: the same draws
    assert (y[0] == 0).all() and (y[1] == 1).all()
    bound = 5 * math.sqrt(0.3 * 0.7 / n)
    assert abs(y[2].mean() - 0.3) < bound
    model = make_model([helper.make_node("Bernoulli", ["p"], ["y"], seed=1.0)], {"p": p}, {"y": y}, opset=15)
    theirs = ReferenceEvaluator(model).run(None, {"p": p})[0]
    assert (theirs[0] == 0).all() and (theirs[1] == 1).all() and abs(theirs[2].mean() - 0.3) < bound


def test_multinomial_samples_by_unnormalized_log_probabilities() -> None:
    n = 30_000
    probs = np.array([[0.1, 0.2, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25]])
    with np.errstate(divide="ignore"):
        x = (np.log(probs) + 3.0).astype(np.float32)  # unnormalized; class 3 of row 0 never drawn
    nodes = [helper.make_node("Multinomial", ["x"], ["s"], seed=9.0, sample_size=n),
             helper.make_node("Multinomial", ["x"], ["l"], seed=10.0, sample_size=n, dtype=TensorProto.INT64)]
    cm = build(nodes, {"x": x}, {"s": (TensorProto.INT32, [2, n]), "l": (TensorProto.INT64, [2, n])})
    got = cm.predict({"x": x})
    assert got["s"].dtype == np.int32 and got["l"].dtype == np.int64
    model = make_model([helper.make_node("Multinomial", ["x"], ["s"], sample_size=n)], {"x": x},
                       {"s": np.zeros((2, n), np.int32)}, opset=15)
    theirs = ort_session(model).run(None, {"x": x})[0]
    for samples in (got["s"], got["l"], theirs):
        assert samples.shape == (2, n) and samples.min() >= 0 and samples.max() < 4
        freq = np.stack([np.bincount(row, minlength=4) / n for row in samples])
        assert (np.abs(freq - probs) < 5 * np.sqrt(probs * (1 - probs) / n) + 1e-12).all()


def test_what_stays_refused() -> None:
    body = helper.make_graph(
        [helper.make_node("RandomUniform", [], ["r"], shape=[2], seed=1.0, name="in_body"),
         helper.make_node("Identity", ["c"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])
    loop = helper.make_node("Loop", ["n", "cond"], ["rs"], body=body)
    graph = helper.make_graph([loop], "g", [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                                            helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("rs", TensorProto.FLOAT, [None, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    with pytest.raises(UnsupportedOperator, match="RandomUniform.*in_body.*every iteration"):
        CuvilModel.load(model, max_trip_count={loop.name or "Loop_rs": 4}).optimize(targets=TARGET)
    inf = helper.make_node("RandomNormal", [], ["z"], shape=[2], scale=float("inf"), name="wide")
    with pytest.raises(UnsupportedOperator, match="wide.*non-finite"):
        build([inf], {}, {"z": (TensorProto.FLOAT, [2])})
    cube = helper.make_node("Multinomial", ["x"], ["s"], name="cube")
    with pytest.raises(UnsupportedOperator, match="cube.*batch, classes"):
        build([cube], {"x": np.zeros((1, 2, 3), np.float32)}, {"s": (TensorProto.INT32, [1, 1])})
    x = np.zeros((2, 2), np.float32)
    like = helper.make_node("RandomUniformLike", ["x"], ["y"])
    drawn = CuvilModel.load(make_model([like], {"x": x}, {"y": x}))
    with pytest.raises(QuantizationError, match="stateful"):
        drawn.optimize(precision="int8-dynamic", targets=TARGET)


def test_node_cases_on_random_ops_are_counted_as_random() -> None:
    from tests.conformance.node_cases import run_case

    for name in ("test_bernoulli_seed", "test_bernoulli_double_expanded"):
        outcome, detail = run_case(name)
        assert outcome == "random", (name, detail)
