"""Converters for the sequence container ops: SequenceEmpty, SequenceConstruct, SequenceInsert,
SequenceErase, SequenceAt, SequenceLength, SplitToSequence and ConcatFromSequence; and for the optional
ones: Optional, OptionalHasElement, OptionalGetElement.

The IR has tensors only. A sequence's length is static in every graph whose shapes are, so each
sequence is resolved at import as a Python tuple of IR values kept under its ONNX name, and only the
tensors taken out of it reach the IR. A position known at build time indexes that tuple; a run-time
position (an int scalar input) selects with ``where`` chains, which needs the candidates to share one
shape: otherwise the output's shape would depend on data, and the error says so.

An optional is resolved at import the same way: a present one is held as its element itself (a tensor
``Value`` or a ``TensorSeq``), an empty one as ``EmptyOptional``; whether it has an element is known at
build time. (An optional graph input is fed as its tensor, so it is always present.)
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOperator
from ...ir.graph import Value
from ...ir.limits import check_count
from .containers import EmptyOptional, TensorSeq
from .importer import np_dtype_of_onnx
from .registry import ConvertContext, converter, int_list


def _seq(ctx: ConvertContext, i: int) -> TensorSeq:
    s = ctx.item(i)
    if not isinstance(s, TensorSeq):
        raise ctx.unsupported(f"input {i} ({ctx.proto.input[i]!r}) is a tensor, not a sequence")
    return s


def _put(ctx: ConvertContext, items: list[Value | None], dtype: str,
         unknown: UnsupportedOperator | None = None) -> None:
    ctx.env[ctx.proto.output[0]] = TensorSeq(tuple(items), dtype, unknown)  # type: ignore[assignment]


def _item(s: TensorSeq, i: int) -> Value:
    v = s.items[i]
    if v is None:
        assert s.unknown is not None
        raise s.unknown
    return v


def _position(ctx: ConvertContext, i: int, n: int, default: int, insert: bool = False) -> int | Value:
    """Input i as a position into a sequence of n (negative counts from the back; an insert may also
    name n): an int when known at build time, else a run-time ``where(pos < 0, pos + n, pos)``."""
    if not ctx.has_input(i):
        return default
    v = ctx.input(i)
    if v.type.size != 1:
        raise ctx.unsupported(f"position {ctx.proto.input[i]!r} of shape {v.type.shape} is not one value")
    if v.is_const:
        p = int(v.const.reshape(-1)[0])
        if not -n <= p < n + insert:
            raise ctx.unsupported(f"position {p} is outside a sequence of {n}")
        return p + n if p < 0 else p
    wrapped = ctx.emit1("binary_loop", [v, _int(ctx, v, n)], {"kind": "add"}, name=f"{ctx.name}/wrap")
    return ctx.emit1("where", [_cmp(ctx, "lt", v, 0), wrapped, v], name=f"{ctx.name}/pos")


def _int(ctx: ConvertContext, like: Value, k: int) -> Value:
    return ctx.constant(np.asarray(k, like.type.dtype).reshape(like.type.shape), f"k{k}")


def _cmp(ctx: ConvertContext, kind: str, p: Value, k: int) -> Value:
    return ctx.emit1("compare", [p, _int(ctx, p, k)], {"kind": kind}, name=f"{ctx.name}/{kind}{k}")


def _pick(ctx: ConvertContext, i: int, cond: Value, a: Value, b: Value) -> Value:
    """``cond ? a : b`` for ``cond`` computed from position input i at run time: both candidates must
    have one type, else the position is needed at build time."""
    if a is b:
        return a
    if a.type != b.type:
        raise ctx.not_constant(i, f"a run-time position selects between {a.type} and {b.type}: the output "
                                  "shape would depend on data")
    return ctx.emit1("where", [cond, a, b], name=f"{ctx.name}/pick")


@converter("SequenceEmpty")
def sequence_empty(ctx: ConvertContext) -> None:
    _put(ctx, [], np_dtype_of_onnx(int(ctx.attr("dtype", 1))))


@converter("SequenceConstruct")
def sequence_construct(ctx: ConvertContext) -> None:
    xs = ctx.inputs()
    if len({x.type.dtype for x in xs}) != 1:
        raise ctx.unsupported(f"elements of different types {[x.type.dtype for x in xs]}")
    _put(ctx, xs, xs[0].type.dtype)


@converter("SequenceLength")
def sequence_length(ctx: ConvertContext) -> None:
    ctx.set_outputs(ctx.constant(np.asarray(len(_seq(ctx, 0).items), np.int64), "length"))


@converter("SequenceAt")
def sequence_at(ctx: ConvertContext) -> None:
    s = _seq(ctx, 0)
    n = len(s.items)
    p = _position(ctx, 1, n, 0)
    if isinstance(p, int):
        ctx.set_outputs(_item(s, p))
        return
    acc = _item(s, n - 1)
    for k in range(n - 2, -1, -1):
        acc = _pick(ctx, 1, _cmp(ctx, "eq", p, k), _item(s, k), acc)
    ctx.set_outputs(acc)


@converter("SequenceErase")
def sequence_erase(ctx: ConvertContext) -> None:
    s = _seq(ctx, 0)
    n = len(s.items)
    p = _position(ctx, 1, n, n - 1)
    if isinstance(p, int):
        _put(ctx, [*s.items[:p], *s.items[p + 1:]], s.dtype, s.unknown)
        return
    # element i moves down when the erased position is at or before it
    _put(ctx, [_pick(ctx, 1, _cmp(ctx, "le", p, i), _item(s, i + 1), _item(s, i)) for i in range(n - 1)],
         s.dtype)


@converter("SequenceInsert")
def sequence_insert(ctx: ConvertContext) -> None:
    s, t = _seq(ctx, 0), ctx.input(1)
    if t.type.dtype != s.dtype:
        raise ctx.unsupported(f"inserting {t.type.dtype} into a sequence of {s.dtype}")
    n = len(s.items)
    p = _position(ctx, 2, n, n, insert=True)
    if isinstance(p, int):
        _put(ctx, [*s.items[:p], t, *s.items[p:]], s.dtype, s.unknown)
        return
    # slot i keeps element i before the insert position, holds t at it, element i-1 after it
    items = []
    for i in range(n + 1):
        at_or_after = t if i == 0 else _pick(ctx, 2, _cmp(ctx, "eq", p, i), t, _item(s, i - 1))
        items.append(at_or_after if i == n else _pick(ctx, 2, _cmp(ctx, "gt", p, i), _item(s, i),
                                                      at_or_after))
    _put(ctx, items, s.dtype)


@converter("SplitToSequence")
def split_to_sequence(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    rank = len(x.type.shape)
    axis = ctx.axis(ctx.attr("axis", 0), rank)
    dim = x.type.shape[axis]
    if not ctx.has_input(1):
        sizes, squeeze = [1] * check_count(dim, ctx.name), not ctx.attr("keepdims", 1)
    else:
        split = ctx.input(1)
        if not split.is_const:
            if len(split.type.shape) != 1:
                raise ctx.not_constant(1, "a run-time scalar split: the sequence's length depends on it")
            _put(ctx, [None] * check_count(split.type.shape[0], ctx.name), x.type.dtype,
                 ctx.not_constant(1, "split sizes known only at run time: the items' shapes depend on them"))
            return
        sizes, squeeze = int_list(split.const, f"{ctx.name}: split"), False
        if split.const.ndim == 0:
            if sizes[0] < 1:
                raise ctx.unsupported(f"split size {sizes[0]} (must be at least 1)")
            check_count(-(-dim // sizes[0]), ctx.name)
            sizes = [sizes[0]] * (dim // sizes[0]) + ([dim % sizes[0]] if dim % sizes[0] else [])
    parts = ctx.emit("split", [x], {"axis": axis, "sizes": sizes}, n_outputs=len(sizes)) if sizes else []
    if squeeze:
        shape = [d for i, d in enumerate(x.type.shape) if i != axis]
        parts = [ctx.emit1("reshape", [v], {"shape": shape}, name=f"{ctx.name}/squeeze") for v in parts]
    _put(ctx, parts, x.type.dtype)


@converter("ConcatFromSequence")
def concat_from_sequence(ctx: ConvertContext) -> None:
    s = _seq(ctx, 0)
    if not s.items:
        raise ctx.unsupported("concatenating an empty sequence")
    xs = [_item(s, i) for i in range(len(s.items))]
    axis = int(ctx.attr("axis"))
    if ctx.attr("new_axis", 0):
        axis = ctx.axis(axis, len(xs[0].type.shape) + 1)
        shape = list(xs[0].type.shape)
        xs = [ctx.emit1("reshape", [x], {"shape": [*shape[:axis], 1, *shape[axis:]]},
                        name=f"{ctx.name}/stack") for x in xs]
    ctx.set_outputs(ctx.emit1("concat", xs, {"axis": ctx.axis(axis, len(xs[0].type.shape))}))


# -- optional ----------------------------------------------------------------------------------------------
@converter("Optional")
def optional(ctx: ConvertContext) -> None:
    declared = ctx.attr("type")  # the element's type: read either way, the element's own is what counts
    if ctx.has_input(0):
        ctx.env[ctx.proto.output[0]] = ctx.item(0)
        return
    if declared is None:
        raise ctx.unsupported("an empty optional needs its type attribute")
    ctx.env[ctx.proto.output[0]] = EmptyOptional(  # type: ignore[assignment]
        f"of {declared.WhichOneof('value').removesuffix('_type')}")


@converter("OptionalHasElement")
def optional_has_element(ctx: ConvertContext) -> None:
    present = ctx.has_input(0) and not isinstance(ctx.item(0), EmptyOptional)
    ctx.set_outputs(ctx.constant(np.array(present), "present"))


@converter("OptionalGetElement")
def optional_get_element(ctx: ConvertContext) -> None:
    got = ctx.item(0)
    if isinstance(got, EmptyOptional):
        raise ctx.unsupported(f"the optional ({got.what}) is empty: taking its element fails")
    ctx.env[ctx.proto.output[0]] = got

