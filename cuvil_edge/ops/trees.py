"""``trees``: a decision-tree ensemble (ONNX-ML TreeEnsemble, TreeEnsembleRegressor) over the rows of a
``[N, F]`` float tensor, giving ``[N, targets]``.

attrs (one normalised form for every ONNX-ML spelling, see ``frontend/onnx/convert_ml.py``):
``nodes``: per branch node (feature, mode, value, true ref, false ref, missing goes true), a ref being a node
index (>= 0) or a leaf (``-1 - leaf``); ``modes`` are ``MODES`` indexes, and a ``member`` node's value is
the start of its set in ``members`` (its count in ``member_counts``); ``leaves``: per leaf its
(target, weight) pairs; ``roots``: one ref per tree; ``aggregate`` (``sum``, ``average``, ``min``, ``max``),
``base`` (added per target after aggregating; empty: none), ``post`` (``none``, ``logistic``, ``softmax``),
``targets``.

Comparisons are done in double (the splits' own precision, float32 splits exactly), as the reference does.
A target no leaf reaches keeps the aggregate's start: 0, or the output type's largest / smallest value for
min / max. The tables live in the weights blob; each row walks every tree (one C loop, thread 0).
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

MODES = ("leq", "lt", "gte", "gt", "eq", "neq", "member")
AGGREGATES = ("sum", "average", "min", "max")
_C_TEST = ("v <= s", "v < s", "v >= s", "v > s", "v == s", "v != s")
_PY_TEST = (operator.le, operator.lt, operator.ge, operator.gt, operator.eq, operator.ne)
#: e^x on one double through common.c's float32 vector exp (the module has no libm): post transforms only
_EXP = "(double)wasm_f32x4_extract_lane(v_exp(wasm_f32x4_splat((float)({}))), 0)"


def _infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    if len(x.shape) != 2 or x.dtype not in ("float32", "float64"):
        raise ShapeError(f"{node.name}: a tree ensemble over {x} (rank 2, float32 or float64)")
    return [TensorType((x.shape[0], node.attrs["targets"]), x.dtype)]


def _goes_true(mode: int, v: float, s: float, members: list[float], missing: bool) -> bool:
    if math.isnan(v) and missing:
        return True
    if MODES[mode] == "member":
        return v in members
    return bool(_PY_TEST[mode](v, s))


def _start(a: dict, dtype: np.dtype) -> float:
    return {"min": float(np.finfo(dtype).max), "max": float(np.finfo(dtype).min)}.get(a["aggregate"], 0.0)


def _finish(scores: np.ndarray, a: dict) -> np.ndarray:
    if a["aggregate"] == "average":
        scores = scores / len(a["roots"])
    if a["base"]:
        scores = scores + np.asarray(a["base"], np.float64)
    if a["post"] == "logistic":
        return 1.0 / (1.0 + np.exp(-scores))
    if a["post"] == "softmax":
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    return scores


def _fold(node: Node, args) -> list[np.ndarray]:
    (x,) = args
    a = node.attrs
    nodes, leaves, members, counts = a["nodes"], a["leaves"], a["members"], a["member_counts"]
    scores = np.full((x.shape[0], a["targets"]), _start(a, x.dtype), np.float64)
    pick = {"sum": np.add, "average": np.add, "min": np.minimum, "max": np.maximum}[a["aggregate"]]
    for r, row in enumerate(x.astype(np.float64)):
        for ref in a["roots"]:
            while ref >= 0:
                feat, mode, s, t, f, missing = nodes[ref]
                group = list(members[int(s):int(s) + counts[ref]]) if MODES[mode] == "member" else []
                ref = t if _goes_true(mode, float(row[feat]), s, group, missing) else f
            for target, w in leaves[-1 - ref]:
                scores[r, target] = pick(scores[r, target], w)
    return [_finish(scores, a).astype(x.dtype)]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    a = node.attrs
    (n, feats), k = x.type.shape, a["targets"]
    nodes = a["nodes"] or ((0, 0, 0.0, 0, 0, False),)
    col = list(zip(*nodes))
    feat = ctx.weight(np.asarray(col[0], np.int32), "int32_t")
    mode = ctx.weight(np.asarray(col[1], np.int32), "int32_t")
    split = ctx.weight(np.asarray(col[2], np.float64), "double")
    true_, false_ = (ctx.weight(np.asarray(c, np.int32), "int32_t") for c in (col[3], col[4]))
    missing = ctx.weight(np.asarray(col[5], np.int32), "int32_t")
    count = ctx.weight(np.asarray(a["member_counts"] or [0], np.int32), "int32_t")
    members = ctx.weight(np.asarray(a["members"] or [0.0], np.float64), "double")
    starts = np.cumsum([0, *(len(lf) for lf in a["leaves"])]).astype(np.int32)
    leaf_at = ctx.weight(starts, "int32_t")
    pairs = [p for lf in a["leaves"] for p in lf] or [(0, 0.0)]
    leaf_t = ctx.weight(np.asarray([t for t, _ in pairs], np.int32), "int32_t")
    leaf_w = ctx.weight(np.asarray([w for _, w in pairs], np.float64), "double")
    roots = ctx.weight(np.asarray(a["roots"], np.int32), "int32_t")
    ct = "double" if x.type.dtype == "float64" else "float"
    ctx.use_kernel(f"{dtype_code(x.type.dtype)}-trees")
    tests = "\n".join(f"        case {i}: go = {t}; break;" for i, t in enumerate(_C_TEST))
    combine = {"sum": "acc[t] += w;", "average": "acc[t] += w;", "min": "if (w < acc[t]) acc[t] = w;",
               "max": "if (w > acc[t]) acc[t] = w;"}[a["aggregate"]]
    finish = [f"    for (int t = 0; t < {k}; t++) acc[t] /= {len(a['roots'])};"] \
        if a["aggregate"] == "average" else []
    if a["base"]:
        base = ctx.weight(np.asarray(a["base"], np.float64), "double")
        finish.append(f"    for (int t = 0; t < {k}; t++) acc[t] += {base}[t];")
    if a["post"] == "logistic":
        finish.append(f"    for (int t = 0; t < {k}; t++) acc[t] = 1.0 / (1.0 + {_EXP.format('-acc[t]')});")
    elif a["post"] == "softmax":
        finish += ["    double m = acc[0], z = 0;",
                   f"    for (int t = 1; t < {k}; t++) m = acc[t] > m ? acc[t] : m;",
                   f"    for (int t = 0; t < {k}; t++) {{",
                   f"      acc[t] = {_EXP.format('acc[t] - m')}; z += acc[t];",
                   "    }",
                   f"    for (int t = 0; t < {k}; t++) acc[t] /= z;"]
    return "\n".join([
        f"const {ct} *x = {ctx.ptr(x)}; {ct} *y = {ctx.ptr(y)};",
        f"for (int r = 0; r < {n}; r++) {{",
        f"  double acc[{k}];",
        f"  for (int t = 0; t < {k}; t++) acc[t] = {_start(a, np.dtype(x.type.dtype))!r};",
        f"  for (int tree = 0; tree < {len(a['roots'])}; tree++) {{",
        f"    int ref = {roots}[tree];",
        "    while (ref >= 0) {",
        f"      double v = x[(size_t)r * {feats} + {feat}[ref]], s = {split}[ref]; int go = 0;",
        f"      if (v != v && {missing}[ref]) go = 1;",
        f"      else switch ({mode}[ref]) {{",
        tests,
        f"        default: for (int m = 0; m < {count}[ref]; m++) go |= v == {members}[(int)s + m];",
        "      }",
        f"      ref = go ? {true_}[ref] : {false_}[ref];",
        "    }",
        f"    for (int p = {leaf_at}[-1 - ref]; p < {leaf_at}[-ref]; p++) {{",
        f"      int t = {leaf_t}[p]; double w = {leaf_w}[p]; {combine}",
        "    }",
        "  }",
        *finish,
        f"  for (int t = 0; t < {k}; t++) y[(size_t)r * {k} + t] = ({ct})acc[t];",
        "}",
    ])


register(OpDef("trees", _infer, _fold, _emit))
