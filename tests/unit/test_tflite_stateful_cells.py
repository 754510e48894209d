"""TFLite's single-step cells whose state lives on between invokes in variable tensors (LSTM, RNN, SVDF): each
model of ``tests.support.tflite_rnn.step_model`` is compiled and run step after step in wasmtime against one
LiteRT interpreter invoked as many times (its variable tensors carried the same way), outputs and states
alike; ``reset_state()`` then matches a fresh interpreter. What the cells cannot run is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from cuvil_edge import CuvilModel
from cuvil_edge.errors import UnsupportedOperator
from cuvil_edge.frontend.tflite import import_tflite
from cuvil_edge.frontend.tflite.coverage import builtin_coverage
from cuvil_edge.frontend.tflite.reader import read_tflite
from tests.support.tflite_rnn import RELU, STEP_CASES, step_model

TOL = {"rtol": 1e-4, "atol": 1e-5}


class LiteRT:
    """One interpreter invoked step after step: its output, and the value each variable tensor holds."""

    def __init__(self, model: bytes) -> None:
        self.it = Interpreter(model_content=model, num_threads=1)
        self.it.allocate_tensors()
        sg = read_tflite(model).subgraphs[0]
        self.states = {t.name: t.index for t in sg.tensors if t.is_variable}

    def step(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        self.it.set_tensor(self.it.get_input_details()[0]["index"], x)
        self.it.invoke()
        return (self.it.get_tensor(self.it.get_output_details()[0]["index"]),
                {name: self.it.get_tensor(i) for name, i in self.states.items()})


def _steps(model: CuvilModel, ref: LiteRT, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Each step's output, checked (with the states it leaves) against the interpreter's."""
    outs = []
    for k, x in enumerate(xs):
        want, states = ref.step(x)
        got = model.predict({"x": x})["y"]
        np.testing.assert_allclose(got, want, **TOL, err_msg=f"step {k}")
        for name, value in states.items():
            np.testing.assert_allclose(model.instance.state_views[name], value, **TOL, err_msg=f"{name} {k}")
        outs.append(got)
    return outs


@pytest.mark.parametrize("case", sorted(STEP_CASES))
def test_steps_carry_state_like_one_litert_interpreter_and_reset_like_a_fresh_one(case: str) -> None:
    op, kw = STEP_CASES[case]
    data, xs = step_model(op, **kw)
    model = CuvilModel.load(data)
    try:
        assert sorted(s.name for s in model.spec.states) == sorted(LiteRT(data).states)
        assert [t.name for t in model.spec.inputs] == ["x"] and [t.name for t in model.spec.outputs] == ["y"]
        first = _steps(model, LiteRT(data), [xs[0]] * 2 + xs[1:])  # >= 3 steps, the first input twice
        if kw.get("memory") != 1:  # an SVDF of one step of memory forgets it all each step
            assert not np.allclose(first[0], first[1])  # the same input, another state: the state counts
        model.reset_state()
        again = _steps(model, LiteRT(data), xs[:2])  # a fresh interpreter: zero states
        np.testing.assert_array_equal(again[0], first[0])
    finally:
        model.close()
    graph = import_tflite(data)
    assert [n.op for n in graph.nodes].count("rnn") == (op != "SVDF")  # a step: the sequence cell's rnn


def test_projection_clip_and_layer_norm_take_effect() -> None:
    """The projection reaches ProjClip and stays within it, in both; layer norm runs as a node of its own."""
    data, xs = step_model("LSTM", **STEP_CASES["lstm_projection_clipped"][1])
    ref, model = LiteRT(data), CuvilModel.load(data)
    try:
        for ys in ([ref.step(x)[0] for x in xs], [model.predict({"x": x})["y"] for x in xs]):
            assert np.abs(np.stack(ys)).max() == pytest.approx(0.15)
    finally:
        model.close()
    assert "layernorm" in [n.op for n in import_tflite(step_model("LSTM", layer_norm=True)[0]).nodes]


@pytest.mark.parametrize(("op", "kw", "match"), [
    ("LSTM", {"kernel": 1}, "kernel type 1 \\(BASIC"),
    ("LSTM", {"clip": (3.0, 0.0)}, "option CellClip"),
    ("LSTM", {"edit": {1: -1, 5: -1, 12: -1}}, "input 1 .*CIFG"),
    ("LSTM", {"layer_norm": True, "peephole": True}, "layer norm with peepholes"),
    ("LSTM", {"layer_norm": True, "edit": {21: -1}}, "inputs \\[20, 21, 22, 23\\] \\(layer norm"),
    ("LSTM", {"edit": {2: -2}}, "input 2 is int8.*hybrid"),
    ("LSTM", {"act": RELU}, "fused activation 1"),
    ("LSTM", {"edit": {18: 0}}, "input 18 \\(a state\\) must be a variable tensor"),
    ("RNN", {"act": 3}, "fused activation 3"),
    ("RNN", {"edit": {4: -1}}, "input 4 \\(a state\\) must be a variable tensor"),
    ("SVDF", {"edit": {1: -2}}, "input 1 is int8.*hybrid"),
    ("SVDF", {"rank": 3, "edit": {2: 3}}, "rank 3 with time weights"),
])
def test_what_the_cells_cannot_run_is_refused_by_name(op: str, kw: dict, match: str) -> None:
    data, _ = step_model(op, **kw)
    with pytest.raises(UnsupportedOperator, match=match) as err:
        import_tflite(data)
    assert err.value.op_type == op


def test_the_single_step_cells_count_as_supported() -> None:
    c = builtin_coverage()
    assert {"LSTM", "RNN", "SVDF"} <= set(c.supported)
    assert not any({"LSTM", "RNN", "SVDF"} & set(ops) for ops in c.left_out.values())
