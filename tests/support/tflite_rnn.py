"""Small TFLite models of the sequence cells (UNIDIRECTIONAL_ and BIDIRECTIONAL_SEQUENCE_LSTM and _RNN) and
of the single-step ones (LSTM, RNN, SVDF), written with ``tflite_builder`` as TFLite lays them out (one
tensor per gate, the states variable tensors), with seeded weights and inputs:
``tests/unit/test_tflite_rnn.py`` and ``test_tflite_stateful_cells.py`` check them against LiteRT, and
``test_tflite.py`` counts them among the models every converter must be run by."""

from __future__ import annotations

import numpy as np

from tests.support.tflite_builder import TfliteBuilder

T, B, N_IN, H = 5, 2, 3, 4  # steps, batch, input width, hidden size
RELU, TANH = 1, 4
STEPS = 4  # invokes of a single-step model
OPTIONS = {"UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptions",
           "BIDIRECTIONAL_SEQUENCE_LSTM": "BidirectionalSequenceLSTMOptions",
           "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
           "BIDIRECTIONAL_SEQUENCE_RNN": "BidirectionalSequenceRNNOptions"}


class _Cell:
    """One sequence-cell operator being written: seeded weights (scaled so the gates do not saturate)."""

    def __init__(self, seed: int) -> None:
        self.b = TfliteBuilder()
        self.rng = np.random.default_rng(seed)

    def const(self, *shape: int) -> int:
        weights = (self.rng.standard_normal(shape) * 0.5).astype(np.float32)
        return self.b.const(f"c{len(self.b.tensors)}", weights)

    def state(self, width: int = H) -> int:
        return self.b.tensor(f"state{len(self.b.tensors)}", (B, width), variable=True)

    def lstm_direction(self, peephole: bool, proj: int = 0) -> list[int]:
        """TFLite's 17 tensors of one LSTM direction: weights and recurrent weights per gate (input, forget,
        cell, output), peepholes, biases, the projection to ``proj`` (none when 0) and its bias."""
        w = [self.const(H, N_IN) for _ in range(4)] + [self.const(H, proj or H) for _ in range(4)]
        peep = [self.const(H) if peephole else -1 for _ in range(3)]
        projection = [self.const(proj, H), self.const(proj)] if proj else [-1, -1]
        return w + peep + [self.const(H) for _ in range(4)] + projection

    def rnn_direction(self) -> list[int]:
        return [self.const(H, N_IN), self.const(H, H), self.const(H), self.state()]


def cell_model(op: str, *, time_major: bool, act: int = TANH, merge: bool = False, peephole: bool = False,
               edit: dict[int, int] | None = None) -> tuple[bytes, np.ndarray]:
    """The model of one ``op`` on input x ([T, B, I] or [B, T, I]) and its seeded input; ``edit``: input
    index -> tensor (-1 drops it, ``-2`` puts an int8 copy of it there)."""
    c = _Cell(seed=len(op) + 2 * time_major + merge)
    seq = (T, B) if time_major else (B, T)
    x = c.b.tensor("x", (*seq, N_IN))
    bidi = op.startswith("BIDIRECTIONAL")
    if op.endswith("LSTM"):
        dirs = [c.lstm_direction(peephole) for _ in range(2 if bidi else 1)]
        states = [c.state() for _ in range(2 * len(dirs))]
        ins = [x, *sum(dirs, []), *states, *[-1] * (9 if bidi else 4)]
    else:
        ins = [x, *c.rnn_direction(), *(c.rnn_direction() + [-1] * 3 if bidi else [])]
    for i, t in (edit or {}).items():
        ins[i] = c.b.const("int8", np.ones((H, N_IN), np.int8), ([0.1], [0], 0)) if t == -2 else t
    options = {"FusedActivationFunction": act, "TimeMajor": time_major}
    if bidi:
        options["MergeOutputs"] = merge
    width = 2 * H if merge else H
    outs = [c.b.tensor(f"y{k}", (*seq, width)) for k in range(1 if merge or not bidi else 2)]
    c.b.op(op, ins, outs, (OPTIONS[op], options))
    return c.b.build([x], outs), c.rng.standard_normal((*seq, N_IN)).astype(np.float32)


CASES = {
    "lstm": ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"time_major": False}),
    "lstm_time_major_peephole": ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"time_major": True, "peephole": True}),
    "rnn_tanh": ("UNIDIRECTIONAL_SEQUENCE_RNN", {"time_major": False}),
    "rnn_relu_time_major": ("UNIDIRECTIONAL_SEQUENCE_RNN", {"time_major": True, "act": RELU}),
    "bilstm_merged_time_major": ("BIDIRECTIONAL_SEQUENCE_LSTM", {"time_major": True, "merge": True}),
    "bilstm_two_outputs": ("BIDIRECTIONAL_SEQUENCE_LSTM", {"time_major": False, "peephole": True}),
    "birnn_two_outputs_time_major": ("BIDIRECTIONAL_SEQUENCE_RNN", {"time_major": True}),
    "birnn_merged_relu": ("BIDIRECTIONAL_SEQUENCE_RNN", {"time_major": False, "merge": True, "act": RELU}),
}


def step_model(op: str, *, act: int = TANH, peephole: bool = False, proj: int = 0, layer_norm: bool = False,
               clip: tuple[float, float] = (0.0, 0.0), kernel: int = 0, rank: int = 2, memory: int = 3,
               edit: dict[int, int] | None = None) -> tuple[bytes, list[np.ndarray]]:
    """The single-step ``op`` (LSTM, RNN, SVDF) on x [B, I], its states variable tensors, and seeded inputs
    for ``STEPS`` invokes. LSTM: ``proj`` the projection's width, ``clip`` (CellClip, ProjClip), ``kernel``
    the kernel type; SVDF: ``rank`` filters per unit (H units), ``memory`` steps; ``edit``: as
    ``cell_model``'s."""
    c = _Cell(seed=len(op) + 3 * peephole + proj + 5 * layer_norm + rank + memory)
    x = c.b.tensor("x", (B, N_IN))
    width = proj or H
    if op == "LSTM":
        ins = [x, *c.lstm_direction(peephole, proj), c.state(width), c.state(),
               *([c.const(H) for _ in range(4)] if layer_norm else [])]
        options = ("LSTMOptions", {"FusedActivationFunction": act, "CellClip": clip[0], "ProjClip": clip[1],
                                   "KernelType": kernel})
    elif op == "RNN":
        ins, options = [x, *c.rnn_direction()], ("RNNOptions", {"FusedActivationFunction": act})
    else:
        ins = [x, c.const(H * rank, N_IN), c.const(H * rank, memory), c.const(H), c.state(H * rank * memory)]
        options = ("SVDFOptions", {"Rank": rank, "FusedActivationFunction": act})
    for i, t in (edit or {}).items():
        ins[i] = c.b.const("int8", np.ones((H, N_IN), np.int8), ([0.1], [0], 0)) if t == -2 else t
    y = c.b.tensor("y", (B, width))
    c.b.op(op, ins, [y], options)
    return c.b.build([x], [y]), [c.rng.standard_normal((B, N_IN)).astype(np.float32) for _ in range(STEPS)]


STEP_CASES = {
    "lstm": ("LSTM", {}),
    "lstm_peephole": ("LSTM", {"peephole": True}),
    "lstm_projection_clipped": ("LSTM", {"proj": 3, "clip": (0.0, 0.15)}),
    "lstm_projection_same_width_peephole": ("LSTM", {"proj": H, "peephole": True}),
    "lstm_layer_norm": ("LSTM", {"layer_norm": True}),
    "lstm_layer_norm_projection": ("LSTM", {"layer_norm": True, "proj": 5}),
    "rnn_tanh": ("RNN", {}),
    "rnn_relu": ("RNN", {"act": RELU}),
    "svdf_rank1": ("SVDF", {"rank": 1, "memory": 4}),
    "svdf_rank2_relu": ("SVDF", {"rank": 2, "act": RELU}),
    "svdf_memory1": ("SVDF", {"rank": 1, "memory": 1, "act": 0}),
}


def rnn_models() -> list[bytes]:
    """The model of every case (for the converter-coverage check)."""
    return [cell_model(op, **kw)[0] for op, kw in CASES.values()] + \
        [step_model(op, **kw)[0] for op, kw in STEP_CASES.values()]
