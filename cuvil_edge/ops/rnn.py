"""``rnn``: ONNX LSTM and GRU (attrs ``cell`` lstm/gru, ``hidden``, ``direction`` forward/reverse/
bidirectional, ``lbr`` = GRU linear_before_reset) with default activations and a fixed sequence length.

Inputs x [T, B, I], W [dirs, gates*H, I], R [dirs, gates*H, H], B [dirs, 2*gates*H] (all constant), then
optional run-time h0 [dirs, B, H] and (LSTM) c0, flagged by ``has_h0`` / ``has_c0``. Outputs Y
[T, dirs, B, H], Y_h [dirs, B, H] and (LSTM) Y_c. Weights are transposed and packed into GEMM panels
at build time; each direction is one kernel call whose time loop runs in wasm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .gemm import NR, pack_b_panels, pad_to
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

GATES = {"lstm": 4, "gru": 3}


def _dims(node: Node) -> tuple[int, int, int, int, int]:
    """(T, B, I, H, dirs)."""
    t, b, i = node.inputs[0].type.shape
    return t, b, i, node.attrs["hidden"], 2 if node.attrs["direction"] == "bidirectional" else 1


def _infer(node: Node) -> list[TensorType]:
    if len(node.inputs[0].type.shape) != 3:
        raise ShapeError(f"{node.name}: rnn input must be [T, B, I], got {node.inputs[0].type.shape}")
    t, b, i, h, d = _dims(node)
    g = GATES[node.attrs["cell"]]
    ws, rs = node.inputs[1].type.shape, node.inputs[2].type.shape
    if ws != (d, g * h, i) or rs != (d, g * h, h):
        raise ShapeError(f"{node.name}: rnn weights {ws} / {rs} do not fit {d} direction(s) x {g} gates "
                         f"x hidden {h}, input {i}")
    state = TensorType((d, b, h), "float32")
    return [TensorType((t, d, b, h), "float32"), state] + ([state] if node.attrs["cell"] == "lstm" else [])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _fold(node: Node, args) -> list[np.ndarray]:
    """Reference recurrence (float64), the ONNX spec's equations."""
    t_len, b, _, h, dirs = _dims(node)
    x, w, r, bias = (a.astype(np.float64) for a in args[:4])
    rest = list(args[4:])
    h0 = rest.pop(0) if node.attrs["has_h0"] else np.zeros((dirs, b, h))
    c0 = rest.pop(0) if node.attrs.get("has_c0") else np.zeros((dirs, b, h))
    lstm = node.attrs["cell"] == "lstm"
    ys, hs, cs = np.zeros((t_len, dirs, b, h)), [], []
    for d in range(dirs):
        hp, cp = h0[d].astype(np.float64), c0[d].astype(np.float64)
        wb, rb = np.split(bias[d], 2)
        steps = range(t_len - 1, -1, -1) if node.attrs["direction"] == "reverse" or d == 1 else range(t_len)
        for t in steps:
            gx = x[t] @ w[d].T + wb
            if lstm:
                gi, go, gf, gc = np.split(gx + hp @ r[d].T + rb, 4, axis=-1)
                cp = _sigmoid(gf) * cp + _sigmoid(gi) * np.tanh(gc)
                hp = _sigmoid(go) * np.tanh(cp)
            else:
                rz, rr, rh = np.split(r[d], 3)
                bz, br, bh = np.split(rb, 3)
                xz, xr, xh = np.split(gx, 3, axis=-1)
                z = _sigmoid(xz + hp @ rz.T + bz)
                rg = _sigmoid(xr + hp @ rr.T + br)
                rec = rg * (hp @ rh.T + bh) if node.attrs["lbr"] else (rg * hp) @ rh.T + bh
                n = np.tanh(xh + rec)
                hp = (1 - z) * n + z * hp
            ys[t, d] = hp
        hs.append(hp)
        cs.append(cp)
    out = [ys, np.stack(hs)] + ([np.stack(cs)] if lstm else [])
    return [a.astype(np.float32) for a in out]


def _scratch(node: Node) -> int:
    t, b, _, h, _ = _dims(node)
    g = GATES[node.attrs["cell"]]
    return (t * b * g * h + b * g * h + 2 * b * h + (b * h if g == 3 else 0)) * 4


def _emit(node: Node, ctx: EmitContext) -> str:
    t, b, i, h, dirs = _dims(node)
    cell, lbr = node.attrs["cell"], int(bool(node.attrs.get("lbr")))
    x, w, r, bias = node.inputs[:4]
    rest = list(node.inputs[4:])
    h0 = rest.pop(0) if node.attrs["has_h0"] else None
    c0 = rest.pop(0) if node.attrs.get("has_c0") else None
    y, yh = node.outputs[:2]
    yc = node.outputs[2] if cell == "lstm" else None
    ctx.use_kernel(f"f32-{cell}-{min(b, 4)}x8")
    lines = []
    for d in range(dirs):
        wd, rd = w.const[d].astype(np.float32), r.const[d].astype(np.float32)
        wb, rb = np.split(bias.const[d].astype(np.float32), 2)
        rev = int(node.attrs["direction"] == "reverse" or d == 1)
        st = d * b * h  # element offset of this direction in Y_h / h0 / Y's [dirs, B, H] block
        state = [f"{ctx.ptr(v)} + {st}" if v is not None else "0" for v in (h0, c0)]
        outs = (f"{ctx.ptr(y)} + {st}, {dirs * b * h}, {ctx.ptr(yh)} + {st}")
        common = f"{t}, {b}, {i}, {h}, {ctx.ptr(x)}, {ctx.weight(pack_b_panels(wd.T))}"
        if cell == "lstm":
            lines.append(f"f32_lstm({common}, {ctx.weight(pad_to(wb + rb, NR))}, "
                         f"{ctx.weight(pack_b_panels(rd.T))}, {state[0]}, {state[1]}, {outs}, "
                         f"{ctx.ptr(yc)} + {st}, {rev}, {ctx.scratch()});")
        else:
            in_bias = wb + np.concatenate([rb[:2 * h], np.zeros(h, np.float32) if lbr else rb[2 * h:]])
            rzr, rh = (ctx.weight(pack_b_panels(part.T)) for part in (rd[:2 * h], rd[2 * h:]))
            lines.append(f"f32_gru({common}, {ctx.weight(pad_to(in_bias, NR))}, {rzr}, {rh}, "
                         f"{ctx.weight(pad_to(rb[2 * h:], NR))}, {state[0]}, {outs}, {lbr}, {rev}, "
                         f"{ctx.scratch()});")
    return "\n".join(lines)


register(OpDef("rnn", _infer, _fold, _emit,
               kernels=("f32-unary", "f32-gemm", "f32-rnn"), scratch=_scratch, dtypes=F32))
