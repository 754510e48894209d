"""``rnn``: ONNX LSTM, GRU and RNN (attrs ``cell`` lstm/gru/rnn, ``hidden``, ``direction`` forward/
reverse/bidirectional, ``lbr`` = GRU linear_before_reset, ``acts`` = the RNN cell's activation per
direction: tanh, relu or sigmoid; LSTM and GRU run their default activations).

Inputs x [T, B, I], W [dirs, gates*H, I], R [dirs, gates*H, H], B [dirs, 2*gates*H], then the optional
ones of ``OPTIONAL`` each flagged by ``has_<name>``: h0 [dirs, B, H], (LSTM) c0, lens [B] int32 (each
sequence's length; absent: all T) and (LSTM) the peepholes p [dirs, 3H]. Outputs Y [T, dirs, B, H], Y_h
[dirs, B, H] and (LSTM) Y_c. Constant W, R and B are transposed and packed into GEMM panels at build time;
when any of them is a run-time tensor, ``f32_rnn_pack`` lays all three out in scratch at the start of each
direction (one pass over the weights per run) and the same cell kernel runs. Each direction is one
kernel call whose time loop runs in wasm.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import ACTS, act_numpy
from .gemm import NR, pack_b_panels, pad_to
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

GATES = {"lstm": 4, "gru": 3, "rnn": 1}
#: optional inputs after x, W, R and B, in this order (each present when its ``has_<name>`` attr is set)
OPTIONAL = ("h0", "c0", "lens", "p")
#: activations the plain RNN cell applies (``act_apply`` of common.c)
RNN_ACTS = ("tanh", "relu", "sigmoid")
Item = TypeVar("Item")


def _dims(node: Node) -> tuple[int, int, int, int, int]:
    """(T, B, I, H, dirs)."""
    t, b, i = node.inputs[0].type.shape
    return t, b, i, node.attrs["hidden"], 2 if node.attrs["direction"] == "bidirectional" else 1


def optional_inputs(node: Node, items: Sequence[Item]) -> dict[str, Item | None]:
    """The optional inputs among ``items`` (the node's inputs, or their arrays when folding) by name."""
    rest = iter(items[4:])
    return {k: next(rest) if node.attrs.get(f"has_{k}") else None for k in OPTIONAL}


def _infer(node: Node) -> list[TensorType]:
    if len(node.inputs[0].type.shape) != 3:
        raise ShapeError(f"{node.name}: rnn input must be [T, B, I], got {node.inputs[0].type.shape}")
    t, b, i, h, d = _dims(node)
    cell = node.attrs["cell"]
    g = GATES[cell]
    ws, rs, bs = (v.type.shape for v in node.inputs[1:4])
    if ws != (d, g * h, i) or rs != (d, g * h, h) or bs != (d, 2 * g * h):
        raise ShapeError(f"{node.name}: rnn weights {ws} / {rs} / bias {bs} do not fit {d} direction(s) x "
                         f"{g} gates x hidden {h}, input {i}")
    want = {"h0": ((d, b, h), "float32"), "c0": ((d, b, h), "float32"), "lens": ((b,), "int32"),
            "p": ((d, 3 * h), "float32")}
    for k, v in optional_inputs(node, node.inputs).items():
        if v is not None and (v.type.shape, v.type.dtype) != want[k]:
            raise ShapeError(f"{node.name}: rnn {k} of type {v.type}, not {want[k][1]}{list(want[k][0])}")
    acts = node.attrs.get("acts", [])
    if any(v.type.dtype != "float32" for v in node.inputs[1:4]) or \
            (cell == "rnn" and (len(acts) != d or any(a not in RNN_ACTS for a in acts))):
        raise ShapeError(f"{node.name}: rnn of {[v.type.dtype for v in node.inputs[1:4]]} weights, "
                         f"activations {acts}")
    state = TensorType((d, b, h), "float32")
    return [TensorType((t, d, b, h), "float32"), state] + ([state] if cell == "lstm" else [])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _step(node: Node, d: int, gx: np.ndarray, hp: np.ndarray, cp: np.ndarray, r: np.ndarray, rb: np.ndarray,
          p: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One step's new (h, c) from the input projection gx (x W^T + Wb), the ONNX spec's equations."""
    cell = node.attrs["cell"]
    if cell == "rnn":
        return act_numpy(gx + hp @ r.T + rb, (node.attrs["acts"][d], 0.0, 0.0)), cp
    if cell == "lstm":
        gi, go, gf, gc = np.split(gx + hp @ r.T + rb, 4, axis=-1)
        pi, po, pf = np.split(p, 3) if p is not None else (0.0, 0.0, 0.0)
        c = _sigmoid(gf + pf * cp) * cp + _sigmoid(gi + pi * cp) * np.tanh(gc)
        return _sigmoid(go + po * c) * np.tanh(c), c
    rz, rr, rh = np.split(r, 3)
    bz, br, bh = np.split(rb, 3)
    xz, xr, xh = np.split(gx, 3, axis=-1)
    z = _sigmoid(xz + hp @ rz.T + bz)
    rg = _sigmoid(xr + hp @ rr.T + br)
    rec = rg * (hp @ rh.T + bh) if node.attrs["lbr"] else (rg * hp) @ rh.T + bh
    return (1 - z) * np.tanh(xh + rec) + z * hp, cp


def _fold(node: Node, args) -> list[np.ndarray]:
    """Reference recurrence (float64): steps past a sequence's length keep its state and write zeros."""
    t_len, b, _, h, dirs = _dims(node)
    x, w, r, bias = (a.astype(np.float64) for a in args[:4])
    opt = optional_inputs(node, args)
    h0, c0 = (np.zeros((dirs, b, h)) if opt[k] is None else opt[k].astype(np.float64) for k in ("h0", "c0"))
    lens = np.full(b, t_len) if opt["lens"] is None else opt["lens"].astype(np.int64)
    ys, hs, cs = np.zeros((t_len, dirs, b, h)), [], []
    for d in range(dirs):
        hp, cp = h0[d], c0[d]
        wb, rb = np.split(bias[d], 2)
        p = None if opt["p"] is None else opt["p"][d].astype(np.float64)
        steps = range(t_len - 1, -1, -1) if node.attrs["direction"] == "reverse" or d == 1 else range(t_len)
        for t in steps:
            live = (t < lens)[:, None]
            hn, cn = _step(node, d, x[t] @ w[d].T + wb, hp, cp, r[d], rb, p)
            hp, cp = np.where(live, hn, hp), np.where(live, cn, cp)
            ys[t, d] = np.where(live, hn, 0.0)
        hs.append(hp)
        cs.append(cp)
    out = [ys, np.stack(hs)] + ([np.stack(cs)] if node.attrs["cell"] == "lstm" else [])
    return [a.astype(np.float32) for a in out]


def _panels(n: int, k: int) -> int:
    """Floats of a [k, n] GEMM B operand in 8-column panels."""
    return -(-n // NR) * NR * k


def _runtime_layout(node: Node) -> list[int] | None:
    """Float offsets in scratch of what ``f32_rnn_pack`` writes (W panels, R panels, a GRU's R_h panels,
    bias, hbias) and the end, where the cell's own scratch begins; None when W, R and B are constants."""
    if all(v.is_const for v in node.inputs[1:4]):
        return None
    _, _, i, h, _ = _dims(node)
    gh = GATES[node.attrs["cell"]] * h
    gru = node.attrs["cell"] == "gru"
    sizes = [_panels(gh, i), _panels(2 * h if gru else gh, h), _panels(h, h) if gru else 0, _panels(gh, 1),
             _panels(h, 1) if gru else 0]
    return [int(v) for v in np.cumsum([0, *sizes])]


def _scratch(node: Node) -> int:
    t, b, _, h, _ = _dims(node)
    g = GATES[node.attrs["cell"]]
    layout = _runtime_layout(node)
    packed = layout[-1] if layout else 0
    return (packed + t * b * g * h + b * g * h + 2 * b * h + (b * h if g == 3 else 0)) * 4


def _emit(node: Node, ctx: EmitContext) -> str:
    t, b, i, h, dirs = _dims(node)
    cell, lbr = node.attrs["cell"], int(bool(node.attrs.get("lbr")))
    gh = GATES[cell] * h
    x, w, r, bias = node.inputs[:4]
    opt = optional_inputs(node, node.inputs)
    y, yh = node.outputs[:2]
    yc = node.outputs[2] if cell == "lstm" else None
    ctx.use_kernel(f"f32-{cell}-{min(b, 4)}x8")
    layout = _runtime_layout(node)
    scratch = ctx.scratch()
    lines = []
    for d in range(dirs):
        if layout is not None:  # run-time weights: packed into scratch, then the same cell kernel
            wp, rp, rh, bp, hb, work = (f"{scratch} + {off}" for off in layout)
            lines.append(f"f32_rnn_pack({GATES[cell]}, {i}, {h}, {lbr}, {ctx.ptr(w)} + {d * gh * i}, "
                         f"{ctx.ptr(r)} + {d * gh * h}, {ctx.ptr(bias)} + {d * 2 * gh}, {wp}, {rp}, {rh}, "
                         f"{bp}, {hb});")
        else:
            wd, rd = w.const[d].astype(np.float32), r.const[d].astype(np.float32)
            wb, rb = np.split(bias.const[d].astype(np.float32), 2)
            wp, work = ctx.weight(pack_b_panels(wd.T)), scratch
            if cell == "gru":
                bp = ctx.weight(pad_to(wb + np.concatenate([rb[:2 * h], np.zeros(h, np.float32) if lbr
                                                            else rb[2 * h:]]), NR))
                rp, rh = (ctx.weight(pack_b_panels(part.T)) for part in (rd[:2 * h], rd[2 * h:]))
                hb = ctx.weight(pad_to(rb[2 * h:], NR))
            else:
                bp, rp = ctx.weight(pad_to(wb + rb, NR)), ctx.weight(pack_b_panels(rd.T))
        rev = int(node.attrs["direction"] == "reverse" or d == 1)
        st = d * b * h  # element offset of this direction in Y_h / h0 / Y's [dirs, B, H] block
        h0, c0 = (f"{ctx.ptr(v)} + {st}" if v is not None else "0" for v in (opt["h0"], opt["c0"]))
        lens = ctx.ptr(opt["lens"]) if opt["lens"] is not None else "0"
        outs = f"{ctx.ptr(y)} + {st}, {dirs * b * h}, {ctx.ptr(yh)} + {st}"
        common = f"{t}, {b}, {i}, {h}, {ctx.ptr(x)}, {wp}, {bp}"
        if cell == "lstm":
            p = f"{ctx.ptr(opt['p'])} + {d * 3 * h}" if opt["p"] is not None else "0"
            lines.append(f"f32_lstm({common}, {rp}, {h0}, {c0}, {lens}, {p}, {outs}, {ctx.ptr(yc)} + {st}, "
                         f"{rev}, {work});")
        elif cell == "gru":
            lines.append(f"f32_gru({common}, {rp}, {rh}, {hb}, {h0}, {lens}, {outs}, {lbr}, {rev}, {work});")
        else:
            act = f"(Act){{{ACTS[node.attrs['acts'][d]]}, 0.0f, 0.0f}}"
            lines.append(f"f32_rnn({common}, {rp}, {h0}, {lens}, {outs}, {act}, {rev}, {work});")
    return "\n".join(lines)


register(OpDef("rnn", _infer, _fold, _emit,
               kernels=("f32-unary", "f32-gemm", "f32-bmm", "f32-rnn"), scratch=_scratch, dtypes=F32))
