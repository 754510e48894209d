"""Converters for onnxruntime's com.microsoft attention ops (Attention, MultiHeadAttention,
GroupQueryAttention) and their key/value caches, with static shapes: a cache is a model input of fixed
size. Attention and MultiHeadAttention append this step's keys and values to the past ones (present =
concat(past, new)); GroupQueryAttention writes them into a buffer of the present's length at each
batch's seqlens_k (``tensor_scatter``), masking the keys past it at run time. All run on the fused
``attention`` kernel with onnxruntime's masks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...ir.graph import TensorType, Value
from .convert_contrib import (
    asked_outputs,
    delegate,
    emit_reshape,
    emit_transpose,
    input_of_rank,
    refuse_set,
    slice_last_axis,
)
from .convert_math import emit_binary
from .registry import ConvertContext, contrib_converter

#: onnxruntime's default ``mask_filter_value``: what a masked-out key adds to its attention score
MASK_FILTER = -10000.0
#: the transposition between [B, S, N, H] (how projections are stored) and [B, N, S, H] (attention's view)
HEADS = [0, 2, 1, 3]
#: a [B, N, L, H] tensor read as it is stored (a cache, GroupQueryAttention's grouped queries)
IDENTITY = [0, 1, 2, 3]


def _key_padding(ctx: ConvertContext, i: int, b: int, s: int, length: int) -> Value | None:
    """Input ``i``, onnxruntime's key mask (int32), as bool "masked" [B, 1, S or 1, L]: a raw [B, L] or
    [B, S, L] mask masks its entries <= 0; [B] holds each batch's key count (right padding), [2B] its
    ends then starts (left padding); [1, 1] or [B, 1] masks nothing."""
    if not ctx.has_input(i):
        return None
    m = ctx.input(i)
    shape = m.type.shape
    if m.type.dtype != "int32":
        raise ctx.unsupported(f"a {m.type.dtype} mask (input {i}): int32")
    if shape in ((b, length), (b, s, length)):
        off = ctx.emit1("compare", [m, ctx.constant(np.int32(0), "zero")], {"kind": "le"},
                        name=f"{ctx.name}/off")
        return emit_reshape(ctx, off, [b, 1, s if len(shape) == 3 else 1, length], "masked")
    if shape in ((1, 1), (b, 1)) and length != 1:  # onnxruntime's dummy mask: none
        return None
    if shape not in ((b,), (2 * b,)):
        raise ctx.unsupported(f"mask of shape {shape} (input {i}): [B], [2B], [B, L] or [B, S, L]")
    keys = ctx.constant(np.arange(length, dtype=np.int32).reshape(1, length), "keys")
    bounds = emit_reshape(ctx, m, [shape[0] // b, b, 1], "bounds")
    end = ctx.emit1("slice", [bounds], {"starts": [0, 0, 0], "ends": [1, b, 1], "steps": [1, 1, 1]},
                    name=f"{ctx.name}/ends")
    masked = ctx.emit1("compare", [keys, emit_reshape(ctx, end, [b, 1], "end")], {"kind": "ge"},
                       name=f"{ctx.name}/past_end")
    if shape == (2 * b,):
        start = ctx.emit1("slice", [bounds], {"starts": [1, 0, 0], "ends": [2, b, 1], "steps": [1, 1, 1]},
                          name=f"{ctx.name}/starts")
        early = ctx.emit1("compare", [keys, emit_reshape(ctx, start, [b, 1], "start")], {"kind": "lt"},
                          name=f"{ctx.name}/before_start")
        masked = ctx.emit1("logic", [masked, early], {"kind": "or"}, name=f"{ctx.name}/outside")
    return emit_reshape(ctx, masked, [b, 1, 1, length], "masked")


def _scores_mask(ctx: ConvertContext, masked: Value | None, causal: bool, s: int, length: int,
                 bias: int | None) -> Value | None:
    """The additive attention mask, as onnxruntime makes it: ``mask_filter_value`` where ``masked``, and
    when ``causal`` no weight at all for a key later than its query (float32's lowest, which the softmax
    turns into 0 as it does onnxruntime's -inf: every row keeps its first key), plus the attention bias at
    input ``bias`` when fed."""
    fill = np.float32(ctx.attr("mask_filter_value", MASK_FILTER))
    parts = []
    if masked is not None:
        parts.append(ctx.emit1("where", [masked, ctx.constant(fill, "mask_filter_value"),
                                         ctx.constant(np.float32(0), "zero_f32")], name=f"{ctx.name}/masked"))
    if causal:
        lowest = np.finfo(np.float32).min
        parts.append(ctx.constant(np.triu(np.full((s, length), lowest, np.float32), length - s + 1), "later"))
    if bias is not None and ctx.has_input(bias):
        parts.append(ctx.input(bias))
    mask = parts[0] if parts else None
    for i, p in enumerate(parts[1:]):
        mask = emit_binary(ctx, "add", mask, p, name=f"{ctx.name}/mask{i}")
    return mask


def _split_heads(ctx: ConvertContext, x: Value, heads: int, what: str) -> Value:
    """[B, L, N*H] projections as [B, L, N, H]."""
    b, length, hidden = x.type.shape
    if hidden % heads:
        raise ctx.unsupported(f"{what} hidden size {hidden} is not a multiple of num_heads={heads}")
    return emit_reshape(ctx, x, [b, length, heads, hidden // heads], f"{what}_heads")


def _attend(ctx: ConvertContext, views: Sequence[Value], perms: Sequence[Sequence[int]],
            mask: Value | None) -> Value:
    """softmax(scale * Q K^T + mask) V on the fused ``attention`` kernel, Q, K and V read as [B, N, L, H]
    through their ``perms`` and the result written through Q's. The ``scale`` attribute defaults to
    1 / sqrt(H)."""
    head = views[0].type.shape[perms[0][3]]
    attrs = {"scale": float(ctx.attr("scale", 0.0)) or 1 / math.sqrt(head), "y_perm": list(perms[0]),
             **{f"{p}_perm": list(perm) for p, perm in zip("qkv", perms)}}
    return ctx.emit1("attention", [*views, *([mask] if mask is not None else [])], attrs,
                     name=f"{ctx.name}/attention")


def _heads(ctx: ConvertContext, q: Value, k: Value, v: Value, heads: int, mask: Value | None) -> Value:
    """Attention over ``heads`` heads of [B, S, N*H] queries and keys and values that are [B, L, N*H]
    projections or [B, N, L, H] caches (``_present``; V may have its own head size): [B, S, N*Hv]."""
    views = [x if len(x.type.shape) == 4 else _split_heads(ctx, x, heads, what)
             for x, what in ((q, "query"), (k, "key"), (v, "value"))]
    y = _attend(ctx, views, [IDENTITY if len(x.type.shape) == 4 else HEADS for x in (q, k, v)], mask)
    return emit_reshape(ctx, y, [*q.type.shape[:2], heads * views[2].type.shape[3]], "merged")


def _present(ctx: ConvertContext, past: Value | None, new: Value, heads: int, tag: str) -> Value:
    """A key or value cache after this step, [B, N, P + L, H]: past [B, N, P, H], then the new [B, L, N*H]
    projections by head (these alone without a past)."""
    x = emit_transpose(ctx, _split_heads(ctx, new, heads, tag), HEADS, f"{tag}_bnsh")
    if past is None:
        return x
    shape, want = past.type.shape, x.type.shape
    if len(shape) != 4 or shape[:2] != want[:2] or shape[3] != want[3]:
        raise ctx.unsupported(f"past {tag} of shape {shape} for new {tag}s {want}: [B, N, P, H]")
    return ctx.emit1("concat", [past, x], {"axis": 2}, name=f"{ctx.name}/present_{tag}")


def _unstack(ctx: ConvertContext, x: Value, i: int, tag: str) -> Value:
    """x[i] along the first axis."""
    rest = list(x.type.shape[1:])
    part = ctx.emit1("slice", [x], {"starts": [i] + [0] * len(rest), "ends": [i + 1, *rest],
                                    "steps": [1] * (len(rest) + 1)}, name=f"{ctx.name}/{tag}{i}")
    return emit_reshape(ctx, part, rest, f"{tag}{i}_unstacked")


def _keys(x: Value) -> int:
    """How many keys a [B, L, D] projection or a [B, N, L, H] cache holds."""
    return x.type.shape[2] if len(x.type.shape) == 4 else x.type.shape[1]


def _projection(ctx: ConvertContext, x: Value, w: Value, bias: Value | None, lo: int, hi: int,
                tag: str) -> Value:
    """x @ w[:, lo:hi] (+ bias[lo:hi]): one of Q, K, V from the packed weights (a constant slice folds)."""
    part = slice_last_axis(ctx, w, lo, hi, f"{tag}_w")
    (y,) = delegate(ctx, "MatMul", [x, part], tag=f"{tag}_proj")
    return y if bias is None else emit_binary(ctx, "add", y, slice_last_axis(ctx, bias, lo, hi, f"{tag}_b"),
                                              name=f"{ctx.name}/{tag}_biased")


@contrib_converter("Attention")
def attention(ctx: ConvertContext) -> None:
    """BERT's and GPT-2's self-attention: Q, K, V projected by the packed weights [D, Hq+Hk+Hv] (+ bias),
    masked by mask_index (``_key_padding``), ``unidirectional`` and attention_bias. With past
    [2, B, N, P, H] the keys and values are its own then the new ones, which present [2, B, N, P+S, H]
    holds."""
    refuse_set(ctx, "a shared past/present buffer and rotary embedding", inputs=(6,), do_rotary=0,
               past_present_share_buffer=0, rotary_embedding_dim=0)
    x = input_of_rank(ctx, 0, (3,), "input")
    w = input_of_rank(ctx, 1, (2,), "weights")
    heads = int(ctx.attr("num_heads"))
    sizes = [int(d) for d in ctx.attr("qkv_hidden_sizes", [w.type.shape[1] // 3] * 3)]
    if len(sizes) != 3 or sum(sizes) != w.type.shape[1] or sizes[0] != sizes[1]:
        raise ctx.unsupported(f"qkv_hidden_sizes {sizes} for weights {w.type.shape}")
    bias = ctx.input(2) if ctx.has_input(2) else None
    ends = np.cumsum([0, *sizes]).tolist()
    q, k, v = (_projection(ctx, x, w, bias, lo, hi, tag) for lo, hi, tag in zip(ends, ends[1:], "qkv"))
    present = None
    if ctx.has_input(4) or asked_outputs(ctx, (1,)):
        if sizes[1] != sizes[2]:
            raise ctx.unsupported(f"past/present states of key and value sizes {sizes[1:]}: one tensor holds "
                                  "both, so they are one size")
        past = input_of_rank(ctx, 4, (5,), "past [2, B, N, P, H]") if ctx.has_input(4) else None
        if past is not None and past.type.shape[0] != 2:
            raise ctx.unsupported(f"past of shape {past.type.shape} (input 4): [2, B, N, P, H]")
        pasts = [None, None] if past is None else [_unstack(ctx, past, i, "past") for i in (0, 1)]
        k, v = (_present(ctx, p, y, heads, tag) for p, y, tag in zip(pasts, (k, v), ("key", "value")))
        present = ctx.emit1("concat", [emit_reshape(ctx, c, [1, *c.type.shape], f"{tag}_5d")
                                       for c, tag in ((k, "key"), (v, "value"))], {"axis": 0},
                            name=f"{ctx.name}/present")
    b, s = x.type.shape[:2]
    mask = _scores_mask(ctx, _key_padding(ctx, 3, b, s, _keys(k)), bool(ctx.attr("unidirectional", 0)), s,
                        _keys(k), 5)
    ctx.set_outputs(_heads(ctx, q, k, v, heads, mask), present)


@contrib_converter("MultiHeadAttention")
def multi_head_attention(ctx: ConvertContext) -> None:
    """Attention of already projected [B, S, D] query, [B, L, D] key and [B, L, Dv] value (+ the packed
    bias), masked by key_padding_mask (``_key_padding``), ``unidirectional`` and attention_bias. With
    past_key / past_value [B, N, P, H] the keys and values are theirs then the new ones, which present_key /
    present_value [B, N, P+L, H] hold."""
    refuse_set(ctx, "a shared past/present buffer, beam-search cache indirection and the qk output",
               inputs=(8, 9), outputs=(3,))
    q = input_of_rank(ctx, 0, (3,), "query (packed QKV layouts are not supported)")
    k = input_of_rank(ctx, 1, (3,), "key (the BNSH and packed layouts are not supported)")
    v = input_of_rank(ctx, 2, (3,), "value")
    if ctx.has_input(3):
        ends = np.cumsum([0, *(x.type.shape[2] for x in (q, k, v))]).tolist()
        q, k, v = (emit_binary(ctx, "add", x, slice_last_axis(ctx, ctx.input(3), lo, hi, f"{tag}_b"),
                               name=f"{ctx.name}/{tag}_biased")
                   for x, lo, hi, tag in zip((q, k, v), ends, ends[1:], "qkv"))
    heads = int(ctx.attr("num_heads"))
    if ctx.has_input(6) != ctx.has_input(7):
        raise ctx.unsupported("past_key and past_value come together")
    if ctx.has_input(6) or asked_outputs(ctx, (1, 2)):
        k, v = (_present(ctx, ctx.input(i) if ctx.has_input(i) else None, x, heads, tag)
                for i, x, tag in ((6, k, "key"), (7, v, "value")))
    b, s = q.type.shape[:2]
    masked = _key_padding(ctx, 4, b, s, _keys(k))
    mask = _scores_mask(ctx, masked, bool(ctx.attr("unidirectional", 0)), s, _keys(k), 5)
    ctx.set_outputs(_heads(ctx, q, k, v, heads, mask), k, v)


def _gqa_cache(ctx: ConvertContext, new: Value, i: int, length: int, start: Value | None, tag: str) -> Value:
    """present_key or present_value [B, kv_heads, T, H]: past (input ``i``; zeros to ``length`` where
    shorter) with the new [B, kv_heads, S, H] written at each batch's ``start`` (None: 0) along the
    sequence; without a past, the new alone."""
    if not ctx.has_input(i):
        return new
    past = ctx.input(i)
    (b, heads, _, head), shape = new.type.shape, past.type.shape
    if len(shape) != 4 or shape[:2] != (b, heads) or shape[3] != head:
        raise ctx.unsupported(f"past {tag} of shape {shape} (input {i}): [B, kv_num_heads, P, {head}]")
    if shape[2] < length:
        zeros = ctx.constant(np.zeros((b, heads, length - shape[2], head), np.float32), f"{tag}_room")
        past = ctx.emit1("concat", [past, zeros], {"axis": 2}, name=f"{ctx.name}/{tag}_buffer")
    return ctx.emit1("tensor_scatter", [past, new, *([] if start is None else [start])],
                     {"axis": 2, "circular": False}, name=f"{ctx.name}/present_{tag}")


def _gqa_mask(ctx: ConvertContext, start: Value | None, s: int, cache: int, kv_heads: int,
              group: int) -> Value:
    """The additive mask of the grouped queries (``group_query_attention``: [B, kv_heads, group * S, T]):
    float32's lowest on each key after min(start + i, seqlens_k) for query i (start None: 0), plus
    attention_bias ([B or 1, N or 1, S, T]) when fed."""
    b, rows = ctx.input(5).type.shape[0], group * s
    ramp = ctx.constant(np.tile(np.arange(s, dtype=np.int32), group).reshape(1, rows), "ramp")
    seen = ramp if start is None else emit_binary(ctx, "add", start, ramp, name=f"{ctx.name}/seen")
    last = emit_reshape(ctx, ctx.input(5), [b, 1], "last")
    limit = emit_reshape(ctx, emit_binary(ctx, "min", seen, last, name=f"{ctx.name}/limit"), [b, 1, rows, 1],
                         "limit_rows")
    keys = ctx.constant(np.arange(cache, dtype=np.int32).reshape(1, 1, 1, cache), "keys")
    later = ctx.emit1("compare", [keys, limit], {"kind": "gt"}, name=f"{ctx.name}/later")
    mask = ctx.emit1("where", [later, ctx.constant(np.finfo(np.float32).min, "lowest"),
                               ctx.constant(np.float32(0), "zero_f32")], name=f"{ctx.name}/causal")
    if not ctx.has_input(10):
        return mask
    bias = ctx.input(10)
    shape = bias.type.shape
    if len(shape) != 4 or shape[0] not in (1, b) or shape[1] not in (1, kv_heads * group) or \
            shape[2:] != (s, cache):
        raise ctx.unsupported(f"attention_bias of shape {shape} (input 10): [B or 1, N or 1, {s}, {cache}]")
    bias = emit_reshape(ctx, bias, [shape[0], kv_heads, rows, cache], "bias_groups") if shape[1] > 1 else \
        ctx.emit1("concat", [bias] * group, {"axis": 2}, name=f"{ctx.name}/bias_rows")
    return emit_binary(ctx, "add", mask, bias, name=f"{ctx.name}/biased_mask")


@contrib_converter("GroupQueryAttention")
def group_query_attention(ctx: ConvertContext) -> None:
    """Causal attention of N query heads over kv_num_heads key/value heads, each shared by a group of
    N / kv_num_heads query heads, on a static cache: present_key / present_value [B, kv_heads, T, H] are
    past_key / past_value (T: the longer of theirs and total_sequence_length; none: T = S) with this
    step's keys and values written at each batch's start = seqlens_k + 1 - S (0 in a first prompt:
    S == total_sequence_length), as onnxruntime's shared buffer holds them (what lies past the valid
    length is carried over). Query i of batch b sees the keys up to min(start + i, seqlens_k[b]). Each
    group's queries attend as the rows of one head, so the cache is read once, never repeated."""
    refuse_set(ctx, "rotary embedding, soft-capping, windows, sinks, quantized caches and the qk output",
               inputs=(7, 8, 9, 11, 12, 13, 14, 15, 16), outputs=(3,), do_rotary=0, softcap=0.0,
               local_window_size=-1, qk_output=0, kv_cache_bit_width=0, k_quant_type="NONE",
               v_quant_type="NONE", causal=1)
    if int(ctx.attr("smooth_softmax", -1)) == 1:
        raise ctx.unsupported("smooth_softmax=1")
    for attr in ("q_norm_epsilon", "k_norm_epsilon", "qk_norm_epsilon", "sliding_window_cache",
                 "rotary_interleaved"):
        ctx.attr(attr)  # only meaningful with the inputs or modes refused above
    heads, kv_heads = int(ctx.attr("num_heads")), int(ctx.attr("kv_num_heads"))
    if kv_heads < 1 or heads % kv_heads:
        raise ctx.unsupported(f"num_heads={heads} is not a multiple of kv_num_heads={kv_heads}")
    q = input_of_rank(ctx, 0, (3,), "query")
    b, s, hidden = q.type.shape
    if not ctx.has_input(1):  # packed [B, S, (N + 2 kv_heads) H]
        head = hidden // (heads + 2 * kv_heads)
        ends = np.cumsum([0, heads * head, kv_heads * head, kv_heads * head]).tolist()
        q, k, v = (slice_last_axis(ctx, q, lo, hi, tag) for lo, hi, tag in zip(ends, ends[1:], "qkv"))
    else:
        k, v = input_of_rank(ctx, 1, (3,), "key"), input_of_rank(ctx, 2, (3,), "value")
    head = q.type.shape[2] // heads
    if k.type.shape != (b, s, kv_heads * head) or v.type.shape != k.type.shape:
        raise ctx.unsupported(f"key {k.type.shape} and value {v.type.shape} for query {q.type.shape}: "
                              f"[B, S, kv_num_heads * {head}] each")
    if ctx.has_input(3) != ctx.has_input(4):
        raise ctx.unsupported("past_key and past_value come together")
    seqlens, total = ctx.input(5), ctx.input(6)
    if seqlens.type != TensorType((b,), "int32"):
        raise ctx.unsupported(f"seqlens_k of {seqlens.type} (input 5): int32 [{b}]")
    if total.is_const:
        length = int(total.const.reshape(-1)[0])
    elif not ctx.has_input(3) and not asked_outputs(ctx, (1, 2)):
        length = s  # without a cache, a prompt
    else:
        raise ctx.not_constant(6, "the present states' length and whether this is a first prompt")
    if not ctx.has_input(3) and length != s:
        raise ctx.unsupported(f"total_sequence_length {length} is not the sequence length {s}, without a "
                              "past state")
    start = at = None
    if length != s:  # a later step: its first key goes S - 1 before seqlens_k
        start = emit_binary(ctx, "add", emit_reshape(ctx, seqlens, [b, 1], "seqlens"),
                            ctx.constant(np.int32(1 - s), "back"), name=f"{ctx.name}/start")
        at = ctx.emit1("cast", [emit_reshape(ctx, start, [b], "at")], {"to": "int64"},
                       name=f"{ctx.name}/write_at")
    new = [emit_transpose(ctx, emit_reshape(ctx, x, [b, s, kv_heads, head], f"{tag}_kv"), HEADS,
                          f"{tag}_bnsh")
           for x, tag in ((k, "key"), (v, "value"))]
    present = [_gqa_cache(ctx, x, i, length, at, tag) for x, i, tag in zip(new, (3, 4), ("key", "value"))]
    group = heads // kv_heads
    rows = emit_reshape(ctx, q, [b, s, kv_heads, group, head], "q_groups")
    rows = emit_transpose(ctx, rows, [0, 2, 3, 1, 4], "q_grouped")
    rows = emit_reshape(ctx, rows, [b, kv_heads, group * s, head], "q_rows")
    mask = _gqa_mask(ctx, start, s, present[0].type.shape[2], kv_heads, group)
    y = emit_reshape(ctx, _attend(ctx, [rows, *present], [IDENTITY] * 3, mask), [b, kv_heads, group, s, head],
                     "y_groups")
    y = emit_transpose(ctx, y, [0, 3, 1, 2, 4], "y_heads")
    ctx.set_outputs(emit_reshape(ctx, y, [b, s, heads * head], "merged"), *present)
