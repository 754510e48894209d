"""TFLite's sequence cells onto the IR's ``rnn`` (``ops/rnn.py``): UNIDIRECTIONAL_SEQUENCE_LSTM and _RNN,
BIDIRECTIONAL_SEQUENCE_LSTM and _RNN (what Keras LSTM and SimpleRNN layers convert to), float32.

TFLite keeps one tensor per gate (input, forget, cell, output) and one bias per gate; the IR stacks the
gates in ONNX order (input, output, forget, cell) and splits the bias into input and recurrent halves (the
recurrent half is zero here). Peepholes (one diagonal per gate) are the IR's ``p``. The state inputs are
variable tensors: a run starts them at zero, as a fresh interpreter does (LiteRT then carries the final
state into its next invoke until ``reset_all_variables``; a compiled model starts every run afresh).
Refused, naming the input or option: CIFG (no input gate), projection, layer norm, auxiliary inputs, cell
and projection clipping, diagonal recurrent weights, quantized (hybrid) weights; an LSTM's activation
must be TANH (the IR's LSTM runs tanh), an RNN's TANH or RELU. The single-step LSTM and RNN, whose states
live on between invokes, reuse these weights as a sequence of one (``convert_cells.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.graph import Value
from ...ops.rnn import GATES
from .layout import identity
from .registry import TflContext, converter

#: FusedActivationFunction -> the RNN cell's activation
_RNN_ACTS = {1: "relu", 4: "tanh"}
_TANH = 4
#: TFLite's gate tensors (input, forget, cell, output) in the IR's order (input, output, forget, cell);
#: its peepholes (input, forget, output) in the IR's (input, output, forget)
GATE_ORDER = {"lstm": (0, 3, 1, 2), "rnn": (0,)}
_PEEP_ORDER = (0, 2, 1)


@dataclass(frozen=True)
class Direction:
    """Where one direction's tensors sit among the operator's inputs (per gate, in TFLite's order)."""

    w: tuple[int, ...]
    r: tuple[int, ...]
    b: tuple[int, ...]
    state: tuple[int, ...]  # variable tensors: h (and an LSTM's c)
    peep: tuple[int, ...] = ()


@dataclass(frozen=True)
class Layout:
    """One operator's inputs: its directions, and the inputs the IR cannot take (refused when present)."""

    cell: str
    dirs: tuple[Direction, ...]
    refused: tuple[tuple[int, str], ...]


def lstm_layout(firsts: tuple[int, ...], states: tuple[int, ...],
                refused: tuple[tuple[int, str], ...]) -> Layout:
    """An LSTM whose directions' 17 tensors each start at ``firsts`` (input-to-input weights), with the
    (h, c) variable tensors of each at ``states``."""
    dirs = tuple(Direction(tuple(range(f, f + 4)), tuple(range(f + 4, f + 8)), tuple(range(f + 11, f + 15)),
                            (s, s + 1), tuple(range(f + 8, f + 11))) for f, s in zip(firsts, states))
    projection = tuple((f + k, what) for f in firsts for k, what in ((15, "projection weights"),
                                                                      (16, "projection bias")))
    return Layout("lstm", dirs, projection + refused)


def _aux(first: int, last: int) -> tuple[tuple[int, str], ...]:
    """The auxiliary input (stacked cells) at ``first``, its weights up to ``last``."""
    return tuple((i, "auxiliary weights" if i > first else "auxiliary input") for i in range(first, last + 1))


LAYOUTS = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": lstm_layout((1,), (18,), tuple((i, "layer norm coefficients")
                                                             for i in range(20, 24))),
    "BIDIRECTIONAL_SEQUENCE_LSTM": lstm_layout((1, 18), (35, 37), _aux(39, 47)),
    "UNIDIRECTIONAL_SEQUENCE_RNN": Layout("rnn", (Direction((1,), (2,), (3,), (4,)),), ()),
    "BIDIRECTIONAL_SEQUENCE_RNN": Layout("rnn", (Direction((1,), (2,), (3,), (4,)),
                                                  Direction((5,), (6,), (7,), (8,))), _aux(9, 11)),
}


def float_const(ctx: TflContext, i: int, shape: tuple[int, ...]) -> np.ndarray:
    """Constant input i, a float32 tensor of ``shape`` (an int8 one would run LiteRT's hybrid kernel)."""
    if not ctx.has_input(i):
        raise ctx.unsupported(f"input {i} is required")
    dtype = ctx.sg.tensors[ctx.op.inputs[i]].dtype
    if dtype != "float32":
        raise ctx.unsupported(f"input {i} is {dtype}: only float32 weights are supported (not hybrid)")
    v = ctx.const(i)
    if v.shape != shape:
        raise ctx.unsupported(f"input {i} has shape {list(v.shape)}, not {list(shape)}")
    return v.astype(np.float32)


def cell_activation(ctx: TflContext, cell: str) -> list[str]:
    """The IR's ``acts`` for one direction (an LSTM's are its defaults: tanh)."""
    code = int(ctx.options["FusedActivationFunction"])
    if cell == "lstm":
        if code != _TANH:
            raise ctx.unsupported(f"fused activation {code}: the LSTM cell runs TANH only")
        return []
    if code not in _RNN_ACTS:
        raise ctx.unsupported(f"fused activation {code}: the RNN cell runs TANH or RELU")
    return [_RNN_ACTS[code]]


def _check_states(ctx: TflContext, d: Direction) -> None:
    """Each state input a variable tensor, which a run starts at zero."""
    for i in d.state:
        if not ctx.has_input(i) or not ctx.sg.tensors[ctx.op.inputs[i]].is_variable:
            raise ctx.unsupported(f"input {i} (a state) must be a variable tensor")


def _peepholes(ctx: TflContext, d: Direction, h: int) -> np.ndarray | None:
    """The IR's ``p`` row of one direction (input, output, forget), None without peepholes."""
    present = [ctx.has_input(i) for i in d.peep]
    if not any(present):
        return None
    if not all(present):
        raise ctx.unsupported(f"inputs {list(d.peep)} (peepholes) must be all present or all absent")
    return np.concatenate([float_const(ctx, d.peep[g], (h,)) for g in _PEEP_ORDER])


def cell_weights(ctx: TflContext, layout: Layout, i: int, h: int, r_width: int | None = None
                 ) -> tuple[list[Value], bool]:
    """W [dirs, gates*H, I], R [dirs, gates*H, r_width] (default H; a projected LSTM's recurrent weights
    read its projection's width), B [dirs, 2*gates*H] (the recurrent half zero) and the peepholes p
    [dirs, 3H] when the cell has them; and whether it has them."""
    order = GATE_ORDER[layout.cell]
    w, r, b, p = [], [], [], []
    for d in layout.dirs:
        if layout.cell == "lstm" and not ctx.has_input(d.w[0]):
            raise ctx.unsupported(f"input {d.w[0]} (input-to-input weights) is absent: CIFG (coupled input "
                                  "and forget gates) is not supported")
        _check_states(ctx, d)
        w.append(np.concatenate([float_const(ctx, d.w[g], (h, i)) for g in order]))
        r.append(np.concatenate([float_const(ctx, d.r[g], (h, r_width or h)) for g in order]))
        b.append(np.concatenate([float_const(ctx, d.b[g], (h,)) for g in order] +
                                [np.zeros(GATES[layout.cell] * h, np.float32)]))
        p.append(_peepholes(ctx, d, h) if d.peep else None)
    has_p = any(v is not None for v in p)
    if has_p and not all(v is not None for v in p):
        raise ctx.unsupported("peepholes in one direction only")
    arrays = [w, r, b] + ([p] if has_p else [])
    return [ctx.constant(np.stack(a), name) for a, name in zip(arrays, ("w", "r", "b", "p"))], has_p


def rnn_attrs(cell: str, h: int, acts: list[str], has_p: bool, dirs: int = 1, has_h0: bool = False,
              has_c0: bool = False) -> dict:
    """The IR rnn's attrs for one of TFLite's cells (no sequence lengths: every sequence runs all T)."""
    return {"cell": cell, "hidden": h, "direction": "bidirectional" if dirs == 2 else "forward", "lbr": False,
            "acts": acts, "has_h0": has_h0, "has_c0": has_c0, "has_lens": False, "has_p": has_p}


@converter(*LAYOUTS)
def sequence_cell(ctx: TflContext) -> None:
    layout = LAYOUTS[ctx.op.op]
    for i, what in layout.refused:
        if ctx.has_input(i):
            raise ctx.unsupported(f"input {i} ({what}) is not supported")
    for key in ("CellClip", "ProjClip", "DiagonalRecurrentTensors"):
        if ctx.options.get(key):
            raise ctx.unsupported(f"option {key} = {ctx.options[key]} is not supported")
    acts = cell_activation(ctx, layout.cell) * len(layout.dirs)
    time_major = bool(ctx.options["TimeMajor"])
    if len(ctx.laid(0).perm) != 3 or ctx.sg.tensors[ctx.op.inputs[0]].dtype != "float32":
        raise ctx.unsupported("input 0 must be a float32 sequence of rank 3")
    perm = identity(3) if time_major else (1, 0, 2)  # the IR's [T, B, ...] as TFLite's tensor laid out
    x = ctx.input(0, perm)
    t, batch, n_in = x.type.shape
    h = ctx.const(layout.dirs[0].w[-1]).shape[0]  # hidden size: output-gate (an RNN's only) weights' rows
    params, has_p = cell_weights(ctx, layout, n_in, h)
    dirs = len(layout.dirs)
    attrs = rnn_attrs(layout.cell, h, acts, has_p, dirs=dirs)
    n_out = 3 if layout.cell == "lstm" else 2  # Y [T, dirs, B, H], Y_h (and Y_c), unused: no state outputs
    y = ctx.emit("rnn", [x, *params], attrs, n_outputs=n_out)[0]
    if dirs == 2 and ctx.options.get("MergeOutputs"):  # one output: forward then backward along the last axis
        y = ctx.emit1("transpose", [y], {"perm": [0, 2, 1, 3]}, f"{ctx.name}/merge")
        ctx.set_output(ctx.emit1("reshape", [y], {"shape": [t, batch, 2 * h]}, f"{ctx.name}/merged"), perm)
        return
    parts = ctx.emit("split", [y], {"axis": 1, "sizes": [1] * dirs}, f"{ctx.name}/dirs", dirs) if dirs > 1 \
        else [y]
    for k, part in enumerate(parts):
        ctx.set_output(ctx.emit1("reshape", [part], {"shape": [t, batch, h]}, f"{ctx.name}/dir{k}"), perm, k)
