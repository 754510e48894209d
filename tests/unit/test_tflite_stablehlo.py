"""WHILE and the StableHLO builtins: each model of ``tests.support.tflite_stablehlo`` (written with the
flatbuffer builder, no TensorFlow) is compiled, run in wasmtime and compared with LiteRT's interpreter on the
same seeded inputs; a WHILE still going at its bound traps instead of hanging; what stays unmapped (other
region bodies, partial-slice gathers and scatters, a loop whose values change type) is refused naming the op,
the node and why."""

from __future__ import annotations

import numpy as np
import pytest

from cuvil_edge import CuvilModel
from cuvil_edge.errors import UnsupportedOperator
from cuvil_edge.frontend.tflite import import_tflite
from cuvil_edge.frontend.tflite.coverage import builtin_coverage
from runtime_wasm.errors import InferenceTrap
from tests.support.tflite_builder import TfliteBuilder
from tests.support.tflite_builtins import Ops, assert_matches_litert, litert
from tests.support.tflite_stablehlo import (
    CASES,
    WHILE,
    counted_while,
    endless_while,
    gather_options,
    region,
    scatter_options,
)

MAPPED = ("WHILE", "STABLEHLO_PAD", "DILATE", "REDUCE_WINDOW", "STABLEHLO_REDUCE_WINDOW", "STABLEHLO_GATHER",
          "STABLEHLO_SCATTER", "STABLEHLO_COMPOSITE")


def _check(model: bytes, feeds: list[np.ndarray], compiled: CuvilModel | None = None) -> None:
    want = litert(model, feeds)
    got = (compiled or CuvilModel.load(model)).predict(feeds)
    assert_matches_litert(got, want)


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_litert(case: str) -> None:
    c = CASES[case]()
    _check(c.model, c.feeds)


def test_while_runs_the_trip_count_given_at_run_time() -> None:
    """One compiled module, trip counts 0 (the body never runs), 1 and 7: the count is read at run time."""
    c = counted_while()
    model = CuvilModel.load(c.model)
    assert [n.op for n in model.graph.nodes].count("loop") == 1
    for n in (0, 1, 7):
        _check(c.model, [c.feeds[0], np.array(n, np.int32), c.feeds[2]], model)


def test_a_while_still_going_at_its_bound_traps_instead_of_hanging() -> None:
    model = CuvilModel.load(endless_while())
    np.testing.assert_array_equal(model.predict([np.array(-5, np.int32)])["y"], -5)  # never starts
    with pytest.raises(InferenceTrap):
        model.predict([np.array(0, np.int32)])


def test_the_mapped_builtins_are_counted() -> None:
    c = builtin_coverage()
    assert set(MAPPED) <= set(c.supported)
    assert not set(MAPPED) & {op for ops in c.left_out.values() for op in ops}


def _refused(model: bytes, op: str, match: str) -> None:
    with pytest.raises(UnsupportedOperator, match=match) as err:
        import_tflite(model)
    assert err.value.op_type == op


def test_a_reduction_body_other_than_one_combining_op_is_refused_naming_it() -> None:
    o = Ops()
    x = o.b.tensor("x", (4, 4))
    y = o.op("STABLEHLO_REDUCE_WINDOW", [x, o.const(np.array(0, np.float32))], (2, 2), options=(
        "StablehloReduceWindowOptions", {"WindowDimensions": np.array([2, 2], np.int64),
                                         "WindowStrides": np.array([2, 2], np.int64),
                                         "BodySubgraphIndex": 1}))
    _refused(o.b.build([x], [y], subgraphs=(region(o.b, "SUB"),)), "STABLEHLO_REDUCE_WINDOW",
             r"body subgraph 1 runs \['SUB'\]")


def test_a_partial_slice_gather_is_refused_naming_its_dimension_numbers() -> None:
    """A dynamic_slice written as a gather (2 of 6 rows at the index) does not reduce to gather_nd."""
    o = Ops()
    x, i = o.b.tensor("x", (6, 4)), o.b.tensor("i", (1,), "int32")
    y = o.op("STABLEHLO_GATHER", [x, i], (2, 4), options=gather_options([0, 1], [], [0], 1, [2, 4]))
    _refused(o.b.build([x, i], [y]), "STABLEHLO_GATHER", r"SliceSizes=\[2, 4\].*whole slices")


def test_a_scatter_whose_update_computation_is_not_one_op_is_refused() -> None:
    o = Ops()
    x, i, u = o.b.tensor("x", (5, 3)), o.b.tensor("i", (2, 1), "int32"), o.b.tensor("u", (2, 3))
    y = o.op("STABLEHLO_SCATTER", [x, i, u], (5, 3), options=scatter_options([1], [0], [0], 1, 1))
    _refused(o.b.build([x, i, u], [y], subgraphs=(region(o.b, "STABLEHLO_DIVIDE"),)), "STABLEHLO_SCATTER",
             r"update computation subgraph 1 runs \['STABLEHLO_DIVIDE'\]")


def test_a_while_whose_values_change_type_is_refused() -> None:
    """A body that grows its value (a TF loop with shape invariants relaxed): static types only."""
    b = TfliteBuilder()
    x, y = b.tensor("x", (2,)), b.tensor("y", (2,))
    b.op("WHILE", [x], [y], WHILE)
    cond = b.subgraph()
    cx, t, go = cond.tensor("cx", (2,)), cond.tensor("t", (2,), "bool"), cond.tensor("go", (), "bool")
    cond.op("LESS", [cx, cond.const("z", np.zeros(2, np.float32))], [t])
    cond.op("REDUCE_ANY", [t, cond.const("ax", np.array([0], np.int32))], [go],
            ("ReducerOptions", {"KeepDims": False}))
    body = b.subgraph()
    bx, nx = body.tensor("bx", (2,)), body.tensor("nx", (4,))
    body.op("CONCATENATION", [bx, bx], [nx], ("ConcatenationOptions", {"Axis": 0}))
    _refused(b.build([x], [y], subgraphs=((cond, [cx], [go]), (body, [bx], [nx]))), "WHILE",
             r"turns \['float32\[2\]'\] into \['float32\[4\]'\]")
