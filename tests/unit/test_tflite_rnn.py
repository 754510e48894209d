"""TFLite's sequence cells (UNIDIRECTIONAL_ and BIDIRECTIONAL_SEQUENCE_LSTM and _RNN) on the IR's rnn: each
model of ``tests.support.tflite_rnn`` (the flatbuffer builder: one tensor per gate, the states as variable
tensors) is compiled, run in wasmtime and compared with a fresh LiteRT interpreter on seeded inputs, in both
time layouts; what the IR's cell cannot run (CIFG, projection, layer norm, other activations, hybrid weights,
auxiliary inputs) is refused naming the input or option."""

from __future__ import annotations

import numpy as np
import pytest

from cuvil_edge import CuvilModel
from cuvil_edge.errors import UnsupportedOperator
from cuvil_edge.frontend.tflite import import_tflite
from cuvil_edge.frontend.tflite.coverage import builtin_coverage
from tests.support.tflite_builtins import litert
from tests.support.tflite_rnn import CASES, RELU, cell_model


@pytest.mark.parametrize("case", sorted(CASES))
def test_sequence_cells_match_litert(case: str) -> None:
    op, kw = CASES[case]
    model, x = cell_model(op, **kw)
    want = litert(model, [x])  # a fresh interpreter: its variable states start at zero
    compiled = CuvilModel.load(model)
    for _ in range(2):  # every run starts from zero states
        got = compiled.predict({"x": x})
        assert sorted(got) == sorted(want)
        for name, ref in want.items():
            assert got[name].shape == ref.shape, name
            np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5, err_msg=name)
    assert [n.op for n in import_tflite(model).nodes].count("rnn") == 1


@pytest.mark.parametrize(("op", "kw", "match"), [
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"edit": {1: -1, 5: -1, 12: -1}}, "input 1 .*CIFG"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"edit": {16: 3}}, "input 16 \\(projection weights\\)"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"edit": {20: 12}}, "input 20 \\(layer norm coefficients\\)"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"act": RELU}, "fused activation 1"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"edit": {2: -2}}, "input 2 is int8.*hybrid"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"peephole": True, "edit": {10: -1}}, "peepholes"),
    ("BIDIRECTIONAL_SEQUENCE_LSTM", {"edit": {33: 3}}, "input 33 \\(projection weights\\)"),
    ("BIDIRECTIONAL_SEQUENCE_RNN", {"edit": {9: 0}}, "input 9 \\(auxiliary input\\)"),
    ("UNIDIRECTIONAL_SEQUENCE_RNN", {"act": 3}, "fused activation 3"),
])
def test_what_the_cell_cannot_run_is_refused_by_name(op: str, kw: dict, match: str) -> None:
    model, _ = cell_model(op, time_major=True, **kw)
    with pytest.raises(UnsupportedOperator, match=match) as err:
        import_tflite(model)
    assert err.value.op_type == op


def test_the_sequence_cells_count_as_supported() -> None:
    c = builtin_coverage()
    assert {"UNIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_LSTM",
            "BIDIRECTIONAL_SEQUENCE_RNN"} <= set(c.supported)  # single-step: test_tflite_stateful_cells
