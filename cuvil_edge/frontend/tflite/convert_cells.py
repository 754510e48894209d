"""TFLite's single-step cells whose state lives on between invokes in variable tensors: LSTM (the full
kernel), RNN and SVDF, float32.

LiteRT carries each state tensor from one invoke into the next (zero in a fresh interpreter and after
``reset_all_variables``); here each becomes a module state (``convert_state.variable_input``), read at the
start of a run and written at its end, which ``reset_state()`` sets back to zero. An LSTM or RNN step is
the IR's ``rnn`` over a sequence of one started from the states, on the weights of ``convert_rnn.py``.
The LSTM's extras, where a step can take them outside the cell:
- projection: the cell's h through the projection (and its bias, and ``ProjClip``), which is the output
  and the recurrent state; its recurrent weights read the projection's width, so when that is not the
  hidden size the previous state joins the step's input ([x, h] against [W | R]) and the cell's own R is 0;
- layer norm: each gate's pre-activation [x, h] [W | R]^T normalised (epsilon 1e-8, as LiteRT's) outside,
  then the cell's W is the diagonal of the coefficients and its B the gate biases, both applied after.
Refused, naming the input or option: the BASIC kernel type (one concatenated weight matrix and a fixed
layout of four outputs), CIFG, ``CellClip`` (the clipped cell would feed the cell's own output), layer
norm with peepholes (the output gate's peephole reads the updated cell inside the normalisation), hybrid
int8 weights. SVDF: the memory [B, filters * memory] shifts one step left and takes x's projection by the
feature weights in its last column; the output sums memory * time weights over each unit's ``Rank``
filters, adds the bias and applies the fused activation, as LiteRT's float kernel."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...ir.graph import Value
from ...ops.rnn import GATES
from .convert_rnn import (
    GATE_ORDER,
    LAYOUTS,
    cell_activation,
    cell_weights,
    float_const,
    lstm_layout,
    rnn_attrs,
)
from .convert_state import variable_input, write_variable
from .registry import TflContext, converter

#: the full kernel's 24 inputs: one direction's 17 at 1 (its projection, 16 and 17, taken here: none
#: refused), the states at 18 and 19, the layer norm coefficients at 20 to 23
_LSTM = replace(lstm_layout((1,), (18,), ()), refused=())
_LAYER_NORM = (20, 21, 22, 23)  # coefficients per gate, TFLite's order (input, forget, cell, output)
_PROJECTION, _PROJECTION_BIAS = 16, 17
_FULL_KERNEL = 0
_LN_EPS = 1e-8  # MeanStddevNormalization's
_RNN = LAYOUTS["UNIDIRECTIONAL_SEQUENCE_RNN"]  # the same inputs: x, W, R, B, the state at 4


def _step_input(ctx: TflContext) -> Value:
    """Input 0, one step [B, I] of float32."""
    if len(ctx.laid(0).perm) != 2 or ctx.sg.tensors[ctx.op.inputs[0]].dtype != "float32":
        raise ctx.unsupported("input 0 must be a float32 step [batch, input] of rank 2")
    return ctx.input(0)


def _seq(ctx: TflContext, v: Value, tag: str) -> Value:
    """[B, N] as the rnn's sequence of one (or its one direction's state): [1, B, N]."""
    return ctx.emit1("reshape", [v], {"shape": [1, *v.type.shape]}, f"{ctx.name}/{tag}")


def _rows(ctx: TflContext, v: Value, tag: str) -> Value:
    """The rnn's [1, B, N] state output back as TFLite's [B, N]."""
    return ctx.emit1("reshape", [v], {"shape": list(v.type.shape[1:])}, f"{ctx.name}/{tag}")


def _layer_norm(ctx: TflContext, xh: Value, wr: np.ndarray, h: int) -> tuple[Value, np.ndarray]:
    """Each gate's pre-activation xh wr^T normalised over its H units (as [1, B, 4H]), and the cell's W
    that applies the coefficients (IR gate order) after: their diagonal."""
    batch = xh.type.shape[0]
    z = ctx.emit1("gemm", [xh, ctx.constant(np.ascontiguousarray(wr.T), "wr")], name=f"{ctx.name}/gates")
    z = ctx.emit1("reshape", [z], {"shape": [batch * GATES["lstm"], h]}, f"{ctx.name}/per_gate")
    one, zero = (ctx.constant(np.full(h, v, np.float32), k) for v, k in ((1, "ln_one"), (0, "ln_zero")))
    z = ctx.emit1("layernorm", [z, one, zero], {"axis": 1, "eps": _LN_EPS}, f"{ctx.name}/normalised")
    coeff = np.concatenate([float_const(ctx, _LAYER_NORM[g], (h,)) for g in GATE_ORDER["lstm"]])
    return _seq(ctx, ctx.emit1("reshape", [z], {"shape": [batch, GATES["lstm"] * h]}), "gates_seq"), \
        np.diag(coeff)[None]


@converter("LSTM")
def lstm_step(ctx: TflContext) -> None:
    kernel = int(ctx.options.get("KernelType", _FULL_KERNEL))
    if kernel != _FULL_KERNEL:
        raise ctx.unsupported(f"kernel type {kernel} (BASIC: one concatenated weight matrix, four "
                              "outputs) is not supported, only FULL")
    if ctx.options.get("CellClip"):
        raise ctx.unsupported(f"option CellClip = {ctx.options['CellClip']} is not supported (the IR's cell "
                              "does not clip its state)")
    acts = cell_activation(ctx, "lstm")
    x = _step_input(ctx)
    batch, n_in = x.type.shape
    h = ctx.const(_LSTM.dirs[0].w[-1]).shape[0]  # output-gate weights' rows
    n_out = ctx.const(_PROJECTION).shape[0] if ctx.has_input(_PROJECTION) else h
    (w, r, b, *p), has_p = cell_weights(ctx, _LSTM, n_in, h, n_out)
    h_prev, c_prev = variable_input(ctx, 18, (batch, n_out)), variable_input(ctx, 19, (batch, h))
    norm = [ctx.has_input(i) for i in _LAYER_NORM]
    if any(norm) and not all(norm):
        raise ctx.unsupported(f"inputs {list(_LAYER_NORM)} (layer norm coefficients) must be all present or "
                              "all absent")
    if all(norm) and has_p:
        raise ctx.unsupported("layer norm with peepholes is not supported (the output gate's peephole reads "
                              "the updated cell inside its normalisation)")
    state = [_seq(ctx, h_prev, "h0")]
    if all(norm) or n_out != h:  # the recurrent product outside the cell's own R
        xh = ctx.emit1("concat", [x, h_prev], {"axis": 1}, f"{ctx.name}/xh")
        wr = np.concatenate([w.const, r.const], axis=2)
        step, w_in = _layer_norm(ctx, xh, wr[0], h) if all(norm) else (_seq(ctx, xh, "xh_seq"), wr)
        ctx.materialise(GATES["lstm"] * h * h * 4)  # the zero recurrent weights, before they are made
        w, r, state = ctx.constant(w_in.astype(np.float32), "w_in"), \
            ctx.constant(np.zeros((1, GATES["lstm"] * h, h), np.float32), "r_zero"), []
    else:
        step = _seq(ctx, x, "x_seq")
    attrs = rnn_attrs("lstm", h, acts, has_p, has_h0=bool(state), has_c0=True)
    _, y_h, y_c = ctx.emit("rnn", [step, w, r, b, *state, _seq(ctx, c_prev, "c0"), *p], attrs, n_outputs=3)
    out = _rows(ctx, y_h, "h")
    if ctx.has_input(_PROJECTION):
        out = _project(ctx, out)
    write_variable(ctx, 18, out)
    write_variable(ctx, 19, _rows(ctx, y_c, "c"))
    ctx.set_output(out)


def _project(ctx: TflContext, h: Value) -> Value:
    """The cell's output through the projection (+ its bias), clipped to +-``ProjClip`` when it is set."""
    proj = float_const(ctx, _PROJECTION, tuple(ctx.const(_PROJECTION).shape))
    ins = [h, ctx.constant(np.ascontiguousarray(proj.T), "projection")]
    if ctx.has_input(_PROJECTION_BIAS):
        ins.append(ctx.constant(float_const(ctx, _PROJECTION_BIAS, (proj.shape[0],)), "projection_bias"))
    y = ctx.emit1("gemm", ins, name=f"{ctx.name}/projected")
    clip = float(ctx.options.get("ProjClip") or 0.0)
    if clip > 0:
        y = ctx.emit1("epilogue_act", [y], {"act": ("clip", -clip, clip)}, f"{ctx.name}/proj_clip")
    return y


@converter("RNN")
def rnn_step(ctx: TflContext) -> None:
    acts = cell_activation(ctx, "rnn")
    x = _step_input(ctx)
    batch, n_in = x.type.shape
    h = ctx.const(_RNN.dirs[0].w[0]).shape[0]
    params, _ = cell_weights(ctx, _RNN, n_in, h)
    h_prev = variable_input(ctx, 4, (batch, h))
    y_h = ctx.emit("rnn", [_seq(ctx, x, "x_seq"), *params, _seq(ctx, h_prev, "h0")],
                   rnn_attrs("rnn", h, acts, False, has_h0=True), n_outputs=2)[1]
    out = _rows(ctx, y_h, "h")
    write_variable(ctx, 4, out)
    ctx.set_output(out)


@converter("SVDF")
def svdf(ctx: TflContext) -> None:
    x = _step_input(ctx)
    batch, n_in = x.type.shape
    rank, time_shape = int(ctx.options["Rank"]), ctx.const(2).shape
    filters, memory = time_shape if len(time_shape) == 2 else (0, 0)
    if rank < 1 or filters % rank or not memory:
        raise ctx.unsupported(f"rank {rank} with time weights {list(time_shape)}: they must be [filters, "
                              "memory], the filters units of rank filters each")
    units = filters // rank
    feature = float_const(ctx, 1, (filters, n_in))
    time = float_const(ctx, 2, (filters, memory))
    prev = variable_input(ctx, 4, (batch, filters * memory))
    fresh = ctx.emit1("gemm", [x, ctx.constant(np.ascontiguousarray(feature.T), "feature")],
                      name=f"{ctx.name}/feature")
    fresh = ctx.emit1("reshape", [fresh], {"shape": [batch, filters, 1]}, f"{ctx.name}/fresh")
    if memory > 1:  # the memory shifts left by one step; the new column comes in last
        kept = ctx.emit1("reshape", [prev], {"shape": [batch, filters, memory]}, f"{ctx.name}/memory")
        kept = ctx.emit1("slice", [kept], {"starts": [0, 0, 1], "ends": [batch, filters, memory],
                                           "steps": [1, 1, 1]}, f"{ctx.name}/kept")
        fresh = ctx.emit1("concat", [kept, fresh], {"axis": 2}, f"{ctx.name}/shifted")
    write_variable(ctx, 4, ctx.emit1("reshape", [fresh], {"shape": [batch, filters * memory]},
                                     f"{ctx.name}/state"))
    y = ctx.emit1("binary_f32", [fresh, ctx.constant(time, "time")], {"kind": "mul"}, f"{ctx.name}/timed")
    y = ctx.emit1("reshape", [y], {"shape": [batch, units, rank * memory]}, f"{ctx.name}/per_unit")
    y = ctx.emit1("reduce", [y], {"kind": "sum", "axes": [2], "keepdims": False}, f"{ctx.name}/summed")
    if ctx.has_input(3):
        y = ctx.emit1("binary_f32", [y, ctx.constant(float_const(ctx, 3, (units,)), "bias")], {"kind": "add"},
                      f"{ctx.name}/biased")
    ctx.set_output(ctx.fused(y))
