"""ONNX Loop and If with run-time conditions, built here with onnx.helper, compiled to wasm, run in
wasmtime and compared with onnxruntime: carried state and scan outputs, early exit, If inside and outside
a loop, a decoder that runs a data-dependent number of steps, threaded modules, and the import errors."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import GraphVerificationError, UnsupportedOperator
from cuvil_edge.frontend.onnx import import_onnx
from cuvil_edge.ir import TensorType, Value
from cuvil_edge.passes import verify
from runtime_wasm.errors import InferenceTrap
from tests.support.ort_check import check_with_ort

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
#: the shared check with this file's defaults: one thread unless a test says otherwise, closer tolerances
check = partial(check_with_ort, threads=1, rtol=1e-5, atol=1e-6)


def vi(name: str, elem: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
          inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "control", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def const(name: str, value: object, dtype: object = np.float32) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
        np.asarray(value, dtype=dtype), name))


def body_graph(nodes: list[onnx.NodeProto], carried: list[tuple[str, int, list[int]]],
               outputs: list[tuple[str, int, list[int] | None]]) -> onnx.GraphProto:
    ins = [vi("i", I64, []), vi("cond_in", B, []), *(vi(n, t, s) for n, t, s in carried)]
    return helper.make_graph(nodes, "body", ins, [vi(n, t, s) for n, t, s in outputs])


def test_loop_carried_state_and_scan_outputs() -> None:
    """Fixed trip count: y <- y * 0.5 + x each step, every step's 2*y scanned; lengths are exact."""
    body = body_graph(
        [const("half", 0.5), helper.make_node("Mul", ["y", "half"], ["yh"]),
         helper.make_node("Add", ["yh", "x"], ["y_out"]), helper.make_node("Add", ["y_out", "y_out"], ["s"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        [("y", F, [3])], [("cond_out", B, []), ("y_out", F, [3]), ("s", F, [3])])
    m = model([const("M", 5, np.int64), helper.make_node("Loop", ["M", "", "y0"], ["y", "scan"], body=body)],
              [vi("x", F, [3]), vi("y0", F, [3])], [vi("y", F, [3]), vi("scan", F, [5, 3])])
    rng = np.random.default_rng(0)
    got = check(m, [{"x": rng.standard_normal(3).astype(np.float32),
                     "y0": rng.standard_normal(3).astype(np.float32)} for _ in range(3)]).got
    assert got[0]["scan"].shape == (5, 3) and "scan:length" not in got[0]


def early_exit_model() -> onnx.ModelProto:
    """While sum(y) < limit (at most 8 steps): y <- y * 1.5 + x, y scanned; the condition is computed in
    the body and before the loop, so some inputs run no step at all."""
    body = body_graph(
        [const("k", 1.5), helper.make_node("Mul", ["y", "k"], ["yk"]),
         helper.make_node("Add", ["yk", "x"], ["y_out"]),
         helper.make_node("ReduceSum", ["y_out"], ["sum"], keepdims=0),
         helper.make_node("Less", ["sum", "limit"], ["cond_out"])],
        [("y", F, [4])], [("cond_out", B, []), ("y_out", F, [4]), ("y_scan", F, [4])])
    body.node.append(helper.make_node("Identity", ["y_out"], ["y_scan"]))
    return model([const("M", 8, np.int64), helper.make_node("ReduceSum", ["y0"], ["s0"], keepdims=0),
                  helper.make_node("Less", ["s0", "limit"], ["c0"]),
                  helper.make_node("Loop", ["M", "c0", "y0"], ["y", "ys"], body=body)],
                 [vi("x", F, [4]), vi("y0", F, [4]), vi("limit", F, [])],
                 [vi("y", F, [4]), vi("ys", F, ["n", 4])])


def early_exit_feeds() -> list[dict[str, np.ndarray]]:
    ones = np.ones(4, np.float32)
    return [{"x": ones, "y0": ones * 0.1, "limit": np.array(v, np.float32)} for v in (-1.0, 5.0, 30.0, 1e9)]


def test_loop_early_exit_returns_the_real_length() -> None:
    got = check(early_exit_model(), early_exit_feeds()).got
    lengths = [int(g["ys:length"]) for g in got]
    assert lengths[0] == 0 and lengths[-1] == 8 and 0 < lengths[1] < lengths[2] < 8, lengths
    assert got[0]["ys"].shape == (8, 4)  # allocated for the bound


def test_loop_runs_the_same_on_two_threads() -> None:
    one = check(early_exit_model(), early_exit_feeds()).got
    two = check(early_exit_model(), early_exit_feeds(), threads=2).got
    for a, b in zip(one, two):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def if_node(cond: str, out: str) -> onnx.NodeProto:
    """cond ? x * 2 : x - 1 (both branches read x from the enclosing scope)."""
    then = helper.make_graph([const("two", 2.0), helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                             [vi("t", F, [4])])
    other = helper.make_graph([const("one", 1.0), helper.make_node("Sub", ["x", "one"], ["e"])], "else", [],
                              [vi("e", F, [4])])
    return helper.make_node("If", [cond], [out], then_branch=then, else_branch=other)


def test_if_with_a_run_time_condition() -> None:
    m = model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), const("z", 0.0),
               helper.make_node("Greater", ["s", "z"], ["c"]), if_node("c", "y")],
              [vi("x", F, [4])], [vi("y", F, [4])])
    x = np.arange(4, dtype=np.float32)
    got = check(m, [{"x": x}, {"x": -x}]).got
    assert not np.array_equal(got[0]["y"], got[1]["y"] * -1)  # the two inputs took different branches


def test_if_inside_a_loop_picks_a_branch_per_iteration() -> None:
    """Each step takes the If's then-branch on even iterations, else on odd ones (x is carried)."""
    body = body_graph(
        [const("two_i", 2, np.int64), helper.make_node("Mod", ["i", "two_i"], ["r"]),
         const("zero", 0, np.int64),
         helper.make_node("Equal", ["r", "zero"], ["even"]), if_node("even", "x_out"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["x_out"], ["xs"])],
        [("x", F, [4])], [("cond_out", B, []), ("x_out", F, [4]), ("xs", F, [4])])
    m = model([helper.make_node("Loop", ["M", "", "x0"], ["x", "xs"], body=body, name="loop")],
              [vi("M", I64, []), vi("x0", F, [4])], [vi("x", F, [4]), vi("xs", F, ["n", 4])])
    x0 = np.array([1, -2, 3, 0.5], np.float32)
    got = check(m, [{"M": np.array(n, np.int64), "x0": x0} for n in (0, 3, 5, 6)],
                max_trip_count={"loop": 6}).got
    assert [int(g["xs:length"]) for g in got] == [0, 3, 5, 6]


def test_a_run_time_trip_count_past_the_bound_stops_at_the_bound() -> None:
    """The documented cap: M = 9 with a bound of 6 runs 6 steps, and ``:length`` says so."""
    body = body_graph([const("one", 1.0), helper.make_node("Add", ["x", "one"], ["x_out"]),
                       helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                       helper.make_node("Identity", ["x_out"], ["xs"])],
                      [("x", F, [2])], [("cond_out", B, []), ("x_out", F, [2]), ("xs", F, [2])])
    m = model([helper.make_node("Loop", ["M", "", "x0"], ["x", "xs"], body=body, name="count")],
              [vi("M", I64, []), vi("x0", F, [2])], [vi("x", F, [2]), vi("xs", F, ["n", 2])])
    with CuvilModel.load(m, max_trip_count={"count": 6}).optimize(targets=[Target()]) as cm:
        got = cm.predict({"M": np.array(9, np.int64), "x0": np.zeros(2, np.float32)})
    assert int(got["xs:length"]) == 6 and got["x"].tolist() == [6.0, 6.0]
    assert got["xs"][:, 0].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def decoder_model() -> onnx.ModelProto:
    """Greedy decoding: next = argmax(emb[token] @ W + state), state carried and updated; stops at the end
    token (0) or after M steps; the tokens are a scan output."""
    rng = np.random.default_rng(3)
    emb = onnx.numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "emb")
    w = onnx.numpy_helper.from_array(rng.standard_normal((5, 6)).astype(np.float32), "w")
    body = body_graph(
        [helper.make_node("Gather", ["emb", "tok"], ["e"], axis=0),
         helper.make_node("MatMul", ["e", "w"], ["l"]),
         helper.make_node("Add", ["l", "state"], ["logits"]),
         helper.make_node("ArgMax", ["logits"], ["tok_out"], axis=1, keepdims=0),
         const("decay", 0.5), helper.make_node("Mul", ["state", "decay"], ["state_out"]),
         const("end", [0], np.int64), helper.make_node("Equal", ["tok_out", "end"], ["is_end"]),
         helper.make_node("Not", ["is_end"], ["go"]), helper.make_node("Squeeze", ["go"], ["cond_out"]),
         helper.make_node("Identity", ["tok_out"], ["tokens"])],
        [("tok", I64, [1]), ("state", F, [1, 6])],
        [("cond_out", B, []), ("tok_out", I64, [1]), ("state_out", F, [1, 6]), ("tokens", I64, [1])])
    return model([helper.make_node("Loop", ["M", "", "tok0", "state0"], ["tok", "state", "tokens"], body=body,
                                   name="decode")],
                 [vi("M", I64, []), vi("tok0", I64, [1]), vi("state0", F, [1, 6])],
                 [vi("tokens", I64, ["n", 1]), vi("state", F, [1, 6])], [emb, w])


def test_decoder_runs_a_data_dependent_number_of_steps() -> None:
    rng = np.random.default_rng(1)
    feeds = []
    for k in range(6):
        state = np.zeros((1, 6), np.float32)
        state[0, k] = 50.0  # steers the first steps: k == 0 ends at once
        tok0 = np.array([int(rng.integers(1, 6))])
        feeds.append({"M": np.array(10, np.int64), "tok0": tok0, "state0": state})
    got = check(m := decoder_model(), feeds, max_trip_count={"decode": 12}).got
    lengths = {int(g["tokens:length"]) for g in got}
    assert 1 in lengths and len(lengths) > 1, lengths  # some stop at the first step, others later
    assert check(m, feeds[:2], threads=2, max_trip_count={"decode": 12}).got[1]["tokens"].tolist() == \
        got[1]["tokens"].tolist()


def test_loop_without_a_bound_fails_at_import_naming_the_node() -> None:
    with pytest.raises(UnsupportedOperator, match=r"'Loop' at node 'decode'.*max_trip_count") as exc:
        CuvilModel.load(decoder_model())
    assert exc.value.node == "decode" and exc.value.op_type == "Loop"


def test_if_whose_branches_disagree_on_shape_fails_at_import() -> None:
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [vi("t", F, [4])])
    other = helper.make_graph([const("e", [1.0, 2.0])], "else", [], [vi("e", F, [2])])
    m = model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), const("z", 0.0),
               helper.make_node("Greater", ["s", "z"], ["c"]),
               helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="pick")],
              [vi("x", F, [4])], [vi("y", F, ["n"])])
    with pytest.raises(UnsupportedOperator, match="'If' at node 'pick'.*branches return different types"):
        CuvilModel.load(m)


def test_nested_loops_capture_through_both_levels() -> None:
    """An inner loop (3 steps) inside each outer step reads the outer body's y and the model's x."""
    inner = helper.make_graph(
        [helper.make_node("Mul", ["z", "x"], ["zx"]), helper.make_node("Add", ["zx", "y"], ["z_out"]),
         helper.make_node("Identity", ["c"], ["c_out"])], "inner",
        [vi("j", I64, []), vi("c", B, []), vi("z", F, [3])], [vi("c_out", B, []), vi("z_out", F, [3])])
    body = body_graph(
        [const("three", 3, np.int64), helper.make_node("Loop", ["three", "", "y"], ["z"], body=inner),
         helper.make_node("Neg", ["z"], ["y_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["z"], ["zs"])],
        [("y", F, [3])], [("cond_out", B, []), ("y_out", F, [3]), ("zs", F, [3])])
    m = model([const("M", 4, np.int64), helper.make_node("Loop", ["M", "", "y0"], ["y", "zs"], body=body)],
              [vi("x", F, [3]), vi("y0", F, [3])], [vi("y", F, [3]), vi("zs", F, [4, 3])])
    rng = np.random.default_rng(5)
    check(m, [{"x": (rng.standard_normal(3) * 0.5).astype(np.float32),
               "y0": rng.standard_normal(3).astype(np.float32)} for _ in range(2)])


def test_a_run_time_length_scan_read_by_another_node_fails_at_import() -> None:
    m = early_exit_model()
    m.graph.node.append(helper.make_node("Relu", ["ys"], ["r"]))
    m.graph.output.append(vi("r", F, ["n", 4]))
    with pytest.raises(UnsupportedOperator, match=r"'Loop' at node 'Loop_y'.*run-time length.*'Relu_r'"):
        CuvilModel.load(m)


def test_the_verifier_checks_loop_bodies_and_names_the_loop() -> None:
    """A body node reading an outer value directly (not through a capture input) breaks the IR."""
    graph = import_onnx(early_exit_model())
    loop = next(n for n in graph.nodes if n.op == "loop")
    verify(graph)
    stray = Value("stray", TensorType((4,)))
    loop.attrs["body"].nodes[0].inputs[0] = stray
    with pytest.raises(GraphVerificationError, match=r"in loop 'Loop_y'.*reads 'stray' before it is defined"):
        verify(graph)


def test_big_body_ops_run_whole_on_thread_zero_of_a_threaded_module() -> None:
    """Body ops past the split threshold (a [64, 512] MatMul and Add) would split between threads at top
    level; inside a loop they run on thread 0 with nt = 1 (no barrier inside the body), and two threads
    give onnxruntime's result."""
    rng = np.random.default_rng(7)
    w = onnx.numpy_helper.from_array((rng.standard_normal((512, 512)) / 24).astype(np.float32), "w")
    body = body_graph(
        [helper.make_node("MatMul", ["h", "w"], ["hw"]), helper.make_node("Tanh", ["hw"], ["t"]),
         helper.make_node("Add", ["t", "x"], ["h_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        [("h", F, [64, 512])], [("cond_out", B, []), ("h_out", F, [64, 512])])
    m = model([const("M", 3, np.int64), helper.make_node("Loop", ["M", "", "h0"], ["h"], body=body),
               helper.make_node("MatMul", ["h", "w"], ["y"])],
              [vi("x", F, [64, 512]), vi("h0", F, [64, 512])], [vi("y", F, [64, 512])], [w])
    feeds = {k: rng.standard_normal((64, 512)).astype(np.float32) for k in ("x", "h0")}
    got = check(m, [feeds], threads=2, atol=1e-4).got[0]  # 512-term dot products
    with CuvilModel.load(m).optimize(targets=[Target()]) as cm:
        program = cm.compiled.program
        loop = next(n for n in cm.graph.nodes if n.op == "loop")
        assert program.parallel_nodes and loop.name not in program.parallel_nodes  # the last MatMul splits
        assert not {n.name for n in loop.attrs["body"].nodes} & set(program.parallel_nodes)
        assert np.array_equal(cm.predict(feeds)["y"], got["y"])


def test_a_carried_value_that_grows_fails_at_import() -> None:
    """Concat onto a carried value changes its shape each step: not a static-shape loop."""
    body = body_graph([helper.make_node("Concat", ["y", "y"], ["y_out"], axis=0),
                       helper.make_node("Identity", ["cond_in"], ["cond_out"])],
                      [("y", F, [2])], [("cond_out", B, []), ("y_out", F, None)])
    loop = helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body, name="grow")
    m = model([const("M", 3, np.int64), loop], [vi("y0", F, [2])], [vi("y", F, ["n"])])
    with pytest.raises(UnsupportedOperator, match=r"'Loop' at node 'grow'.*carried value 0 changes from "
                                                  r"float32\[2\] to float32\[4\]"):
        CuvilModel.load(m)


def test_carried_values_passed_through_unchanged_are_not_copied_each_step() -> None:
    """Exporters carry weights as loop state (passed through untouched): a constant one is read in place
    and a run-time one becomes a capture, so only the state that changes stays carried."""
    w = onnx.numpy_helper.from_array(np.float32([[0.5, -1], [2, 0.25]]), "w")
    body = body_graph(
        [helper.make_node("MatMul", ["h", "wc"], ["hw"]), helper.make_node("Add", ["hw", "b"], ["h_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        [("h", F, [1, 2]), ("wc", F, [2, 2]), ("b", F, [1, 2])],
        [("cond_out", B, []), ("h_out", F, [1, 2]), ("wc", F, [2, 2]), ("b", F, [1, 2])])
    m = model([const("M", 4, np.int64),
               helper.make_node("Loop", ["M", "", "h0", "w", "b0"], ["h", "w_out", "b_out"], body=body)],
              [vi("h0", F, [1, 2]), vi("b0", F, [1, 2])],
              [vi("h", F, [1, 2]), vi("w_out", F, [2, 2]), vi("b_out", F, [1, 2])], [w])
    rng = np.random.default_rng(2)
    check(m, [{k: rng.standard_normal((1, 2)).astype(np.float32) for k in ("h0", "b0")} for _ in range(2)])
    loop = next(n for n in CuvilModel.load(m).graph.nodes if n.op == "loop")
    body_ir = loop.attrs["body"]
    assert loop.attrs["n_carried"] == 1 and [v.name for v in body_ir.inputs] == ["i", "cond_in", "h", "b"]
    assert any(v.is_const for n in body_ir.nodes for v in n.inputs if n.op == "matmul" or n.op == "gemm")


def row_writer_model(width: int = 1) -> onnx.ModelProto:
    """SLANet's decoder pattern: each step slices rows ``[step, min(5, step + width))`` of a carried
    buffer, adds an update and scatters it back at ``Range(step, min(5, step + width))``; the step is a
    carried counter, so both bounds are known only at run time."""
    body = body_graph(
        [const("one", [1], np.int64), helper.make_node("Add", ["step", "one"], ["step_out"]),
         const("w", [width], np.int64), helper.make_node("Add", ["step", "w"], ["ahead"]),
         const("dim", [5], np.int64), helper.make_node("Min", ["dim", "ahead"], ["end"]),
         const("ax1", [1], np.int64), helper.make_node("Slice", ["buf", "step", "end", "ax1"], ["rows"]),
         helper.make_node("Cast", ["step_out"], ["k"], to=F), helper.make_node("Mul", ["x", "k"], ["xk"]),
         helper.make_node("Unsqueeze", ["xk", "ax1"], ["upd1"]),
         helper.make_node("Add", ["rows", "upd1"], ["upd"]),
         helper.make_node("Squeeze", ["step"], ["s0"]), helper.make_node("Squeeze", ["end"], ["e0"]),
         const("d1", 1, np.int64), helper.make_node("Range", ["s0", "e0", "d1"], ["at"]),
         const("col", [1, width, 1], np.int64), helper.make_node("Reshape", ["at", "col"], ["at3"]),
         const("reps", [2, 1, 3], np.int64), helper.make_node("Tile", ["at3", "reps"], ["at_t"]),
         helper.make_node("ScatterElements", ["buf", "at_t", "upd"], ["buf_out"], axis=1),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["at"], ["ats"])],
        [("step", I64, [1]), ("buf", F, [2, 5, 3])],
        [("cond_out", B, []), ("step_out", I64, [1]), ("buf_out", F, [2, 5, 3]), ("ats", I64, [width])])
    return model([helper.make_node("Loop", ["M", "", "step0", "buf0"], ["step", "buf", "ats"], body=body,
                                   name="rows")],
                 [vi("M", I64, []), vi("step0", I64, [1]), vi("buf0", F, [2, 5, 3]), vi("x", F, [2, 3])],
                 [vi("buf", F, [2, 5, 3]), vi("step", I64, [1]), vi("ats", I64, ["n", width])])


def row_feeds(trips: int, step0: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(trips)
    return {"M": np.array(trips, np.int64), "step0": np.array([step0], np.int64),
            "buf0": rng.standard_normal((2, 5, 3)).astype(np.float32),
            "x": rng.standard_normal((2, 3)).astype(np.float32)}


def test_slice_and_range_starting_at_the_loop_step_run_inside_the_loop() -> None:
    got = check(row_writer_model(), [row_feeds(5), row_feeds(3), row_feeds(2, step0=-5)],
                max_trip_count={"rows": 5}).got
    assert got[0]["ats"].reshape(-1).tolist() == [0, 1, 2, 3, 4]  # the range followed the step
    assert got[1]["ats:length"] == 3 and np.array_equal(got[1]["buf"][:, 3:], row_feeds(3)["buf0"][:, 3:])


def test_a_run_time_slice_longer_than_what_is_left_traps() -> None:
    """Rows [step, step + 2) have a static length of 2, which the last step (4) cannot give: the module
    traps rather than return a wrong-sized slice."""
    with CuvilModel.load(row_writer_model(width=2), max_trip_count={"rows": 5}).optimize(
            targets=[Target()]) as cm:
        ok = cm.predict(row_feeds(4))
        assert ok["ats"][:4].tolist() == [[0, 1], [1, 2], [2, 3], [3, 4]]
        with pytest.raises(InferenceTrap):
            cm.predict(row_feeds(5))


def test_a_run_time_slice_whose_length_is_unknown_fails_at_import_naming_the_node() -> None:
    m = model([helper.make_node("Slice", ["x", "s", "e"], ["y"], name="cut")],
              [vi("x", F, [5]), vi("s", I64, [1]), vi("e", I64, [1])], [vi("y", F, ["n"])])
    with pytest.raises(UnsupportedOperator, match="Slice.*cut.*not the start plus a constant"):
        import_onnx(m)
