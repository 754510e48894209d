"""``tfidf``: ONNX TfIdfVectorizer over integer token ids (rows of a 1-D or 2-D int32/int64 tensor).

attrs: ``grams`` (per n-gram length ``n``, a tuple of (tokens, output column) with the tokens sorted, so
the C code finds a gram by binary search), ``min_n``, ``max_n``, ``max_skip``, ``mode`` (``TF``, ``IDF``,
``TFIDF``), ``weights`` (one per output column, or empty), ``width`` (output columns).

What is counted follows the ONNX reference: every gram of length ``n`` in ``[min_n, max_n]`` whose items
are ``d`` apart, for ``d`` in ``1 .. max_skip + 1``; a unigram is counted at ``d = 1`` only. The pool is a
build-time table (the node's attributes), so matching costs ``log(pool)`` per candidate gram.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

Grams = tuple[tuple[tuple[tuple[int, ...], int], ...], ...]  # per n (index n - 1): (tokens, column)


def _rows(shape: Sequence[int]) -> tuple[int, int]:
    return (1, shape[0]) if len(shape) == 1 else (shape[0], shape[1])


def _infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    if len(x.shape) not in (1, 2) or x.dtype not in ("int32", "int64"):
        raise ShapeError(f"{node.name}: TfIdfVectorizer over {x} (rank 1 or 2, int32 or int64)")
    width = node.attrs["width"]
    return [TensorType((width,) if len(x.shape) == 1 else (x.shape[0], width), "float32")]


def _weigh(counts: np.ndarray, mode: str, weights: Sequence[float]) -> np.ndarray:
    w = np.asarray(weights, np.float32) if weights else np.ones(counts.shape[-1], np.float32)
    if mode == "TF":
        return counts.astype(np.float32)
    if mode == "IDF":
        return np.where(counts > 0, w, np.float32(0)).astype(np.float32)
    return (w * counts).astype(np.float32)


def _fold(node: Node, args) -> list[np.ndarray]:
    (x,) = args
    a = node.attrs
    rows, length = _rows(x.shape)
    xs = x.reshape(rows, length)
    table = [dict(g) for g in a["grams"]]
    counts = np.zeros((rows, a["width"]), np.int64)
    for r in range(rows):
        for d in range(1, a["max_skip"] + 2):
            for s in range(length):
                for n in range(max(a["min_n"], 1 if d == 1 else 2), a["max_n"] + 1):
                    if s + d * (n - 1) >= length:
                        break
                    col = table[n - 1].get(tuple(int(t) for t in xs[r, s:s + d * (n - 1) + 1:d]))
                    if col is not None:
                        counts[r, col] += 1
    return [_weigh(counts, a["mode"], a["weights"]).reshape(_infer(node)[0].shape)]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    a = node.attrs
    rows, length = _rows(x.type.shape)
    width, ct = a["width"], "int64_t" if x.type.dtype == "int64" else "int32_t"
    ctx.use_kernel(f"{dtype_code(x.type.dtype)}-tfidf")
    lines = [f"float *y = {ctx.ptr(y)}; const {ct} *x = {ctx.ptr(x)};",
             f"for (int i = 0; i < {rows * width}; i++) y[i] = 0.0f;",
             f"for (int r = 0; r < {rows}; r++) {{",
             f"  const {ct} *row = x + (size_t)r * {length}; float *out = y + (size_t)r * {width};"]
    for n, grams in enumerate(a["grams"], 1):
        if not grams or not a["min_n"] <= n <= a["max_n"]:
            continue
        toks = ctx.weight(np.asarray([t for g, _ in grams for t in g], np.int64), "int64_t")
        cols = ctx.weight(np.asarray([c for _, c in grams], np.int32), "int32_t")
        lines += [
            f"  for (int d = 1; d <= {1 if n == 1 else a['max_skip'] + 1}; d++)",
            f"    for (int s = 0; s + d * {n - 1} < {length}; s++) {{",
            f"      int lo = 0, hi = {len(grams)};",
            "      while (lo < hi) {",  # first gram >= the candidate, lexicographically
            f"        int mid = (lo + hi) / 2, c = 0; const int64_t *g = {toks} + (size_t)mid * {n};",
            f"        for (int k = 0; k < {n} && !c; k++) {{ int64_t t = (int64_t)row[s + d * k];"
            " c = g[k] < t ? -1 : g[k] > t; }",
            "        if (c < 0) lo = mid + 1; else hi = mid;",
            "      }",
            f"      if (lo < {len(grams)}) {{",
            f"        const int64_t *g = {toks} + (size_t)lo * {n}; int eq = 1;",
            f"        for (int k = 0; k < {n}; k++) eq &= g[k] == (int64_t)row[s + d * k];",
            f"        if (eq) out[{cols}[lo]] += 1.0f;",
            "      }",
            "    }",
        ]
    weights = ctx.weight(np.asarray(a["weights"] or [1.0] * width, np.float32))
    if a["mode"] == "IDF":
        lines.append(f"  for (int c = 0; c < {width}; c++) out[c] = out[c] > 0.0f ? {weights}[c] : 0.0f;")
    elif a["mode"] == "TFIDF" and a["weights"]:
        lines.append(f"  for (int c = 0; c < {width}; c++) out[c] *= {weights}[c];")
    lines.append("}")
    return "\n".join(lines)


def pool_grams(pool: Sequence[int], counts: Sequence[int], columns: Sequence[int], max_n: int) -> Grams:
    """The pool of ``pool_int64s`` split by ``ngram_counts`` (where each length's grams start) into
    per-length tables sorted by tokens, each gram with its output column (``ngram_indexes``, in pool
    order across lengths; a gram listed twice keeps its last column, and a length's items that do not
    fill a whole gram are left out, as the reference does)."""
    tables: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_n)]
    k = 0
    for n, start in enumerate(counts, 1):
        end = counts[n] if n < len(counts) else len(pool)
        for g in range(start, start + (end - start) // n * n, n):  # whole grams: a ragged tail is dropped
            if n <= max_n:
                tables[n - 1][tuple(int(t) for t in pool[g:g + n])] = int(columns[k])
            k += 1
    return tuple(tuple(sorted(t.items())) for t in tables)


def grams_total(pool_size: int, counts: Sequence[int]) -> int:
    """How many grams the pool holds (so ``ngram_indexes`` can be checked against it)."""
    ends = [*counts[1:], pool_size]
    return sum((e - s) // n for n, (s, e) in enumerate(zip(counts, ends), 1) if e > s)


register(OpDef("tfidf", _infer, _fold, _emit))
