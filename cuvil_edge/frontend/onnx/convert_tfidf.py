"""ONNX converter for TfIdfVectorizer over integer token ids -> ``tfidf`` (ops/tfidf.py). The n-gram pool
is attributes, so it becomes a build-time table; a pool of strings (``pool_strings``) is refused by name."""

from __future__ import annotations

from ...ops.tfidf import grams_total, pool_grams
from .registry import ConvertContext, converter


@converter("TfIdfVectorizer")
def tfidf(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    if ctx.attr("pool_strings"):
        raise ctx.unsupported("a pool of strings (pool_strings): token ids (pool_int64s) only")
    if x.type.dtype not in ("int32", "int64") or len(x.type.shape) not in (1, 2):
        raise ctx.unsupported(f"input {x.type.dtype}{list(x.type.shape)}: int32 or int64 ids of rank 1 or 2")
    pool = [int(v) for v in ctx.attr("pool_int64s", []) or []]
    counts = [int(v) for v in ctx.attr("ngram_counts", []) or []]
    columns = [int(v) for v in ctx.attr("ngram_indexes", []) or []]
    weights = [float(v) for v in ctx.attr("weights", []) or []]
    min_n, max_n = int(ctx.attr("min_gram_length", 0)), int(ctx.attr("max_gram_length", 0))
    max_skip, mode = int(ctx.attr("max_skip_count", 0)), ctx.attr("mode", "")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ctx.unsupported(f"mode {mode!r} (TF, IDF or TFIDF)")
    if not 1 <= min_n <= max_n <= len(counts) or max_skip < 0:
        raise ctx.unsupported(f"gram lengths {min_n}..{max_n} with {len(counts)} ngram_counts, "
                              f"max_skip_count {max_skip}")
    if counts[0] != 0 or any(b < a for a, b in zip(counts, counts[1:])) or counts[-1] > len(pool):
        raise ctx.unsupported(f"ngram_counts {counts[:8]} are not ascending offsets into "
                              f"a pool of {len(pool)}")
    if not columns or len(columns) != grams_total(len(pool), counts) or min(columns) < 0:
        raise ctx.unsupported(f"{len(columns)} ngram_indexes for {grams_total(len(pool), counts)} pool grams")
    width = max(columns) + 1
    if weights and len(weights) < width:
        raise ctx.unsupported(f"{len(weights)} weights for {width} output columns")
    attrs = {"grams": pool_grams(pool, counts, columns, max_n), "min_n": min_n, "max_n": max_n,
             "max_skip": max_skip, "mode": mode, "weights": tuple(weights[:width]), "width": width}
    ctx.set_outputs(ctx.emit1("tfidf", [x], attrs))
