"""Converters for LSTM and GRU: constant weights, default activations, full-length sequences."""

from __future__ import annotations

import numpy as np

from .registry import ConvertContext, converter

_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}


@converter("LSTM", "GRU")
def rnn(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    cell = ctx.op_type.lower()
    direction = ctx.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    acts = [a.decode() if isinstance(a, bytes) else a for a in (ctx.attr("activations") or [])]
    if acts and acts != _DEFAULT_ACTS[ctx.op_type] * dirs:
        raise ctx.unsupported(f"activations {acts} (only the defaults run)")
    if ctx.attr("clip") is not None or ctx.attr("input_forget", 0) or ctx.attr("layout", 0):
        raise ctx.unsupported("clip, input_forget and layout=1 are not supported")
    w, r = ctx.const(1), ctx.const(2)
    gates, hidden = w.shape[1], int(ctx.attr("hidden_size", r.shape[-1]))
    t = x.type.shape[0]
    bias = ctx.const(3, np.zeros((dirs, 2 * gates), np.float32))
    lens = ctx.const(4)
    if lens is not None and np.any(np.asarray(lens) != t):
        raise ctx.unsupported(f"sequence_lens {np.asarray(lens).tolist()} shorter than the sequence ({t})")
    if cell == "lstm" and ctx.has_input(7) and np.any(ctx.const(7) != 0):
        raise ctx.unsupported("peephole weights")
    ins = [x, ctx.constant(w.astype(np.float32), "W"), ctx.constant(r.astype(np.float32), "R"),
           ctx.constant(np.asarray(bias, np.float32).reshape(dirs, -1), "B")]
    has_h0, has_c0 = ctx.has_input(5), cell == "lstm" and ctx.has_input(6)
    ins += [ctx.input(i) for i, has in ((5, has_h0), (6, has_c0)) if has]
    outs = ctx.emit("rnn", ins, {"cell": cell, "hidden": hidden, "direction": direction,
                                 "lbr": bool(ctx.attr("linear_before_reset", 0)), "has_h0": has_h0,
                                 "has_c0": has_c0}, n_outputs=3 if cell == "lstm" else 2)
    ctx.set_outputs(*outs)
