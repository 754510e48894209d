"""Small TFLite models (``tflite_builder``, no TensorFlow) that run WHILE and the StableHLO builtins the
ai-edge-torch and JAX paths write (pads with interior padding, DILATE, windowed reductions, gathers,
scatters, composites), each with seeded inputs: ``tests/unit/test_tflite_stablehlo.py`` checks them
against LiteRT, and ``test_tflite.py`` counts them among the models every converter must be run by."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flatbuffers import flexbuffers

from tests.support.tflite_builder import TfliteBuilder
from tests.support.tflite_builtins import Case, Ops

I64 = np.int64
#: WHILE's options table, its cond and body in subgraphs 1 and 2
WHILE = ("WhileOptions", {"CondSubgraphIndex": 1, "BodySubgraphIndex": 2})


def _scalar(b: TfliteBuilder, name: str, value: np.generic) -> int:
    t = b.const(name, np.asarray(value))
    b.tensors[t].shape = ()
    return t


def counted_while() -> Case:
    """``while i < n: i += 1; x = x * x * 0.5 + c`` with n a run-time input, and a value the body passes
    through unchanged (captured, not carried)."""
    b = TfliteBuilder()
    i, n, x = b.tensor("i", (), "int32"), b.tensor("n", (), "int32"), b.tensor("x", (2, 3))
    outs = [b.tensor("i_out", (), "int32"), b.tensor("n_out", (), "int32"), b.tensor("x_out", (2, 3))]
    b.op("WHILE", [i, n, x], outs, WHILE)
    cond = b.subgraph()
    ci, cn, cx = cond.tensor("ci", (), "int32"), cond.tensor("cn", (), "int32"), cond.tensor("cx", (2, 3))
    go = cond.tensor("go", (), "bool")
    cond.op("LESS", [ci, cn], [go])
    body = b.subgraph()
    bi, bn, bx = body.tensor("bi", (), "int32"), body.tensor("bn", (), "int32"), body.tensor("bx", (2, 3))
    ni = body.tensor("ni", (), "int32")
    sq, half, nx = (body.tensor(name, (2, 3)) for name in ("sq", "half", "nx"))
    body.op("ADD", [bi, _scalar(body, "one", np.int32(1))], [ni], ("AddOptions", {}))
    body.op("MUL", [bx, bx], [sq], ("MulOptions", {}))
    body.op("MUL", [sq, _scalar(body, "k", np.float32(0.5))], [half], ("MulOptions", {}))
    body.op("ADD", [half, body.const("c", np.linspace(-0.3, 0.3, 6, dtype=np.float32).reshape(2, 3))], [nx],
            ("AddOptions", {}))
    model = b.build([i, n, x], outs,
                    subgraphs=((cond, [ci, cn, cx], [go]), (body, [bi, bn, bx], [ni, bn, nx])))
    rng = np.random.default_rng(11)
    return Case(model, [np.array(0, np.int32), np.array(4, np.int32),
                        rng.uniform(-1, 1, (2, 3)).astype(np.float32)])


def endless_while() -> bytes:
    """``while x >= 0: x = x + 1``: never ends on a non-negative input."""
    b = TfliteBuilder()
    x, y = b.tensor("x", (), "int32"), b.tensor("y", (), "int32")
    b.op("WHILE", [x], [y], WHILE)
    cond = b.subgraph()
    cx, go = cond.tensor("cx", (), "int32"), cond.tensor("go", (), "bool")
    cond.op("GREATER_EQUAL", [cx, _scalar(cond, "zero", np.int32(0))], [go])
    body = b.subgraph()
    bx, nx = body.tensor("bx", (), "int32"), body.tensor("nx", (), "int32")
    body.op("ADD", [bx, _scalar(body, "one", np.int32(1))], [nx], ("AddOptions", {}))
    return b.build([x], [y], subgraphs=((cond, [cx], [go]), (body, [bx], [nx])))


def pads() -> Case:
    """STABLEHLO_PAD with edge, negative (cropping) and interior padding, on float32 and int32; DILATE."""
    o = Ops()
    x, k = o.b.tensor("x", (2, 3, 4)), o.b.tensor("k", (3, 5), "int32")
    out = [o.op("STABLEHLO_PAD", [x, o.const(np.array(-1.5, np.float32))], (4, 6, 8), options=(
        "StablehloPadOptions", {"EdgePaddingLow": np.array([1, 0, -1], I64),
                                "EdgePaddingHigh": np.array([1, 1, 2], I64),
                                "InteriorPadding": np.array([0, 1, 1], I64)})),
           o.op("STABLEHLO_PAD", [k, o.const(np.array(7, np.int32))], (5, 7), "int32", options=(
               "StablehloPadOptions", {"EdgePaddingLow": np.array([2, -2], I64),
                                       "EdgePaddingHigh": np.array([0, 0], I64),
                                       "InteriorPadding": np.array([0, 1], I64)})),
           o.op("DILATE", [x, o.ints(2, 1, 3), o.const(np.array(0.25, np.float32))], (3, 3, 10))]
    rng = np.random.default_rng(12)
    return Case(o.b.build([x, k], out), [rng.standard_normal((2, 3, 4)).astype(np.float32),
                                         rng.integers(-9, 9, (3, 5)).astype(np.int32)])


def region(b: TfliteBuilder, op: str, dtype: str = "float32") -> tuple[TfliteBuilder, list[int], list[int]]:
    """A reduction region: ``op`` of two scalars."""
    g = b.subgraph()
    a, c, y = g.tensor("a", (), dtype), g.tensor("c", (), dtype), g.tensor("y", (), dtype)
    g.op(op, [a, c], [y])
    return g, [a, c], [y]


def _window_options(window: list[int], strides: list[int], base: list[int], dilations: list[int],
                    padding: list[int], body: int) -> tuple[str, dict]:
    return ("StablehloReduceWindowOptions", {
        "WindowDimensions": np.array(window, I64), "WindowStrides": np.array(strides, I64),
        "BaseDilations": np.array(base, I64), "WindowDilations": np.array(dilations, I64),
        "Padding": np.array(padding, I64), "BodySubgraphIndex": body})


def reduce_windows() -> Case:
    """STABLEHLO_REDUCE_WINDOW as a max pool (-inf init, padded) and as a sum with a base and a window
    dilation and a non-identity init; REDUCE_WINDOW (the TFLite form) as a min and an int32 product."""
    o = Ops()
    x, k = o.b.tensor("x", (1, 7, 6, 2)), o.b.tensor("k", (4, 5), "int32")
    neg_inf = o.const(np.array(-np.inf, np.float32))
    out = [o.op("STABLEHLO_REDUCE_WINDOW", [x, neg_inf], (1, 4, 3, 2), options=_window_options(
        [1, 3, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1, 1, 0, 0, 0], 1)),
           o.op("STABLEHLO_REDUCE_WINDOW", [x, o.const(np.array(0.5, np.float32))], (1, 6, 4, 2),
                options=_window_options([1, 2, 2, 1], [1, 2, 1, 1], [1, 2, 1, 1], [1, 1, 2, 1],
                                        [0, 0, 0, -1, 0, 0, 0, 0], 2))]
    out.append(o.op("REDUCE_WINDOW", [x, o.const(np.array(np.inf, np.float32)), o.ints(1, 2, 3, 1, dtype=I64),
                                      o.ints(1, 1, 3, 1, dtype=I64), o.ints(1, 3, 1, 1, dtype=I64)],
                    (1, 4, 2, 2), options=("ReduceWindowOptions", {"ReduceFunction": 3})))
    out.append(o.op("REDUCE_WINDOW", [k, o.const(np.array(1, np.int32)), o.ints(2, 2, dtype=I64),
                                      o.ints(1, 2, dtype=I64), o.ints(1, 1, dtype=I64)], (3, 2), "int32",
                    options=("ReduceWindowOptions", {"ReduceFunction": 2})))
    model = o.b.build([x, k], out, subgraphs=(region(o.b, "STABLEHLO_MAXIMUM"), region(o.b, "STABLEHLO_ADD")))
    rng = np.random.default_rng(13)
    return Case(model, [rng.standard_normal((1, 7, 6, 2)).astype(np.float32),
                        rng.integers(-3, 4, (4, 5)).astype(np.int32)])


def gather_options(offset: list[int], collapsed: list[int], start: list[int], vector_dim: int,
                    sizes: list[int]) -> tuple[str, dict]:
    return ("StablehloGatherOptions", {
        "OffsetDims": np.array(offset, I64), "CollapsedSliceDims": np.array(collapsed, I64),
        "StartIndexMap": np.array(start, I64), "IndexVectorDim": vector_dim,
        "SliceSizes": np.array(sizes, I64), "IndicesAreSorted": False})


def gathers() -> Case:
    """STABLEHLO_GATHER as ai-edge-torch writes an embedding lookup (``x[ids]``), JAX a take along axis
    1 (``x[:, ids]``, index vector dim implicit), an index tuple over two dims kept as a size-1 slice
    dim, and out-of-range ids (clamped)."""
    o = Ops()
    table, ids = o.b.tensor("table", (6, 4)), o.b.tensor("ids", (2, 3, 1), "int32")
    cols, pairs = o.b.tensor("cols", (5,), "int64"), o.b.tensor("pairs", (2, 2), "int32")
    cube = o.b.tensor("cube", (3, 4, 5))
    out = [o.op("STABLEHLO_GATHER", [table, ids], (2, 3, 4),
                options=gather_options([2], [0], [0], 2, [1, 4])),
           o.op("STABLEHLO_GATHER", [table, cols], (6, 5), options=gather_options([0], [1], [1], 1, [6, 1])),
           o.op("STABLEHLO_GATHER", [cube, pairs], (2, 4, 1), options=gather_options(
               [1, 2], [0], [0, 2], 1, [1, 4, 1]))]
    rng = np.random.default_rng(14)
    feeds = [rng.standard_normal((6, 4)).astype(np.float32), np.array([[[0], [5], [2]], [[9], [3], [-2]]],
                                                                      np.int32),
             np.array([3, 0, 3, 1, 2], np.int64), np.array([[2, 4], [0, 1]], np.int32),
             rng.standard_normal((3, 4, 5)).astype(np.float32)]
    return Case(o.b.build([table, ids, cols, pairs, cube], out), feeds)


def scatter_options(window: list[int], inserted: list[int], to_operand: list[int], vector_dim: int,
                     body: int) -> tuple[str, dict]:
    return ("StablehloScatterOptions", {
        "UpdateWindowDims": np.array(window, I64), "InsertedWindowDims": np.array(inserted, I64),
        "ScatterDimsToOperandDims": np.array(to_operand, I64), "IndexVectorDim": vector_dim,
        "UpdateComputationSubgraphIndex": body, "IndicesAreSorted": False, "UniqueIndices": False})


def scatters() -> Case:
    """STABLEHLO_SCATTER as ai-edge-torch writes ``index_put`` (rows replaced; an empty update region)
    and scatter-add with a repeated row, a JAX add along axis 1 (update window dims first), a max, and
    an out-of-range row (skipped)."""
    o = Ops()
    x, rows, upd = o.b.tensor("x", (5, 3)), o.b.tensor("rows", (4, 1), "int32"), o.b.tensor("upd", (4, 3))
    cols, cupd = o.b.tensor("cols", (2,), "int32"), o.b.tensor("cupd", (5, 2))
    put = o.b.subgraph()
    pa, pb = put.tensor("a", ()), put.tensor("b", ())
    out = [o.op("STABLEHLO_SCATTER", [x, rows, upd], (5, 3), options=scatter_options([1], [0], [0], 1, k))
           for k in (1, 2, 3)]
    out.append(o.op("STABLEHLO_SCATTER", [x, cols, cupd], (5, 3),
                    options=scatter_options([0], [1], [1], 1, 2)))
    model = o.b.build([x, rows, upd, cols, cupd], out, subgraphs=(
        (put, [pa, pb], [pb]), region(o.b, "STABLEHLO_ADD"), region(o.b, "STABLEHLO_MAXIMUM")))
    rng = np.random.default_rng(15)
    feeds = [rng.standard_normal((5, 3)).astype(np.float32), np.array([[3], [0], [3], [7]], np.int32),
             rng.standard_normal((4, 3)).astype(np.float32), np.array([2, 2], np.int32),
             rng.standard_normal((5, 2)).astype(np.float32)]
    return Case(model, feeds)


def composite() -> Case:
    """STABLEHLO_COMPOSITE ``odml.rms_norm``-like: x * rsqrt(mean(x^2) + eps) * w in its decomposition."""
    b = TfliteBuilder()
    x, y = b.tensor("x", (2, 8)), b.tensor("y", (2, 8))
    b.op("STABLEHLO_COMPOSITE", [x], [y], ("StableHLOCompositeOptions", {
        "Name": "odml.rms_norm", "DecompositionSubgraphIndex": 1, "Version": 0,
        "CompositeAttributes": np.frombuffer(flexbuffers.Dumps({"epsilon": 1e-6}), np.uint8)}))
    d = b.subgraph()
    dx = d.tensor("dx", (2, 8))
    sq, norm, out = (d.tensor(name, (2, 8)) for name in ("sq", "norm", "out"))
    mean, eps, inv = (d.tensor(name, (2, 1)) for name in ("mean", "eps", "inv"))
    d.op("MUL", [dx, dx], [sq], ("MulOptions", {}))
    d.op("MEAN", [sq, d.const("axis", np.array([1], np.int32))], [mean],
         ("ReducerOptions", {"KeepDims": True}))
    d.op("ADD", [mean, _scalar(d, "e", np.float32(1e-6))], [eps], ("AddOptions", {}))
    d.op("RSQRT", [eps], [inv])
    d.op("MUL", [dx, inv], [norm], ("MulOptions", {}))
    d.op("MUL", [norm, d.const("w", np.linspace(0.5, 1.5, 8, dtype=np.float32))], [out], ("MulOptions", {}))
    model = b.build([x], [y], subgraphs=((d, [dx], [out]),))
    return Case(model, [np.random.default_rng(16).standard_normal((2, 8)).astype(np.float32)])


#: every case, by name
CASES: dict[str, Callable[[], Case]] = {f.__name__: f for f in (
    counted_while, pads, reduce_windows, gathers, scatters, composite)}


def stablehlo_models() -> list[bytes]:
    """The models of every case (for the converter-coverage check)."""
    return [make().model for make in CASES.values()]
