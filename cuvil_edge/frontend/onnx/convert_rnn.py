"""Converters for LSTM, GRU and RNN (``ops/rnn.py``): weights constant or run-time tensors, LSTM/GRU with
their default activations, RNN with tanh, relu or sigmoid per direction, sequence_lens, initial states,
LSTM peepholes, and layout 1 (batch first: transposed around the op)."""

from __future__ import annotations

import numpy as np

from ...ir.graph import Value
from ...ops.rnn import GATES, OPTIONAL, RNN_ACTS
from .registry import ConvertContext, converter

_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


def _activations(ctx: ConvertContext, dirs: int) -> list[str]:
    """The RNN cell's activation per direction (lowercase, ``RNN_ACTS``); LSTM and GRU take only their
    defaults (an empty list)."""
    acts = ctx.texts("activations")
    if ctx.op_type != "RNN":
        if acts and acts != _DEFAULT_ACTS[ctx.op_type] * dirs:
            raise ctx.unsupported(f"activations {acts} (only the defaults run)")
        return []
    acts = [a.lower() for a in acts or _DEFAULT_ACTS["RNN"] * dirs]
    if len(acts) != dirs or any(a not in RNN_ACTS for a in acts):
        raise ctx.unsupported(f"activations {acts} for {dirs} direction(s) (one each of Tanh, Relu, Sigmoid)")
    return acts


def _param(ctx: ConvertContext, i: int, dtype: str, default: np.ndarray | None = None) -> Value | None:
    """Input ``i`` as the op takes it: a constant made ``dtype`` (``default`` when absent), or a run-time
    tensor, which must be ``dtype`` already."""
    if not ctx.has_input(i):
        return None if default is None else ctx.constant(default, f"in{i}")
    v = ctx.input(i)
    if v.is_const:
        return ctx.constant(v.const.astype(dtype), f"in{i}")
    if v.type.dtype != dtype:
        raise ctx.unsupported(f"run-time input {i} ({ctx.proto.input[i]!r}) of type {v.type.dtype}, "
                              f"not {dtype}")
    return v


def _transpose(ctx: ConvertContext, v: Value, perm: list[int], tag: str) -> Value:
    return ctx.emit1("transpose", [v], {"perm": perm}, name=f"{ctx.name}/{tag}")


@converter("LSTM", "GRU", "RNN")
def rnn(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    cell = ctx.op_type.lower()
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.unsupported(f"direction {direction!r}")
    dirs = 2 if direction == "bidirectional" else 1
    acts = _activations(ctx, dirs)
    if ctx.attr("clip") is not None or ctx.attr("input_forget", 0):
        raise ctx.unsupported("clip and input_forget are not supported")
    batch_first = bool(ctx.attr("layout", 0))
    if len(x.type.shape) != 3 or len(ctx.input(1).type.shape) != 3 or len(ctx.input(2).type.shape) != 3:
        raise ctx.unsupported(f"input {x.type.shape} and weights of rank 3 are required")
    if batch_first:
        x = _transpose(ctx, x, [1, 0, 2], "x")
    t, b = x.type.shape[:2]
    hidden = int(ctx.attr("hidden_size", ctx.input(2).type.shape[-1]))
    gh = GATES[cell] * hidden
    ins = [x, _param(ctx, 1, "float32"), _param(ctx, 2, "float32"),
           _param(ctx, 3, "float32", np.zeros((dirs, 2 * gh), np.float32))]
    states = {"h0": _param(ctx, 5, "float32"), "c0": _param(ctx, 6, "float32") if cell == "lstm" else None}
    if batch_first:  # [B, dirs, H] -> [dirs, B, H]
        states = {k: v if v is None else _transpose(ctx, v, [1, 0, 2], k) for k, v in states.items()}
    lens = _param(ctx, 4, "int32")
    if lens is not None and lens.is_const and np.all(lens.const == t):
        lens = None  # every sequence runs the whole length
    peep = _param(ctx, 7, "float32") if cell == "lstm" else None
    if peep is not None and peep.is_const and not peep.const.any():
        peep = None
    optional = {**states, "lens": lens, "p": peep}
    ins += [optional[k] for k in OPTIONAL if optional[k] is not None]
    attrs = {"cell": cell, "hidden": hidden, "direction": direction,
             "lbr": bool(ctx.attr("linear_before_reset", 0)), "acts": acts,
             **{f"has_{k}": v is not None for k, v in optional.items()}}
    outs = ctx.emit("rnn", ins, attrs, n_outputs=3 if cell == "lstm" else 2)
    if batch_first:  # Y [T, dirs, B, H] -> [B, T, dirs, H]; states [dirs, B, H] -> [B, dirs, H]
        outs = [_transpose(ctx, outs[0], [2, 0, 1, 3], "y")] + [
            _transpose(ctx, v, [1, 0, 2], f"state{k}") for k, v in enumerate(outs[1:])]
    ctx.set_outputs(*outs)
