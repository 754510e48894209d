"""Sequences and optionals as the import holds them, and where they meet a graph's edges. The IR has
tensors only: a sequence is a tuple of IR values (``TensorSeq``, made and read by ``convert_sequence``), an
optional its element or ``EmptyOptional``. At a model's edge a sequence input given one shape per item at
build time is that many tensor inputs, and a sequence output (its length is known at build time) one
output per item (names, and the record ``predict`` reads: ``cuvil_edge.sequences``). A body's outputs (an
If's branches) are flattened the same way and regrouped into the node's outputs (``regrouped``); a Loop
carrying a sequence is unrolled (``unroll_loop``): an iteration may change the sequence's length and its
items' shapes, which one compiled loop body cannot."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ModelFormatError, UnsupportedOperator
from ...ir.graph import Graph, TensorType, Value
from ...ir.limits import check_count
from ...ops.cast import HELD
from ...sequences import SEQUENCES, item_name
from .float16 import HalfFloats
from .registry import ConvertContext


@dataclass(frozen=True)
class TensorSeq:
    """A sequence at import. ``None`` items have shapes known only at run time: ``unknown`` is the error
    for using one (a ``NotConstant`` naming the input that sizes them, which binding fixes)."""

    items: tuple[Value | None, ...]
    dtype: str
    unknown: UnsupportedOperator | None = None


@dataclass(frozen=True)
class EmptyOptional:
    """An optional without an element (``Optional`` given no input); ``what`` names its element type."""

    what: str


#: ``refuse(output name, why)``: the error for an output a graph or body cannot return
Refuse = Callable[[str, str], Exception]
#: what a body may return beside tensors where its node regroups them (``regrouped``)
CONTAINERS = (TensorSeq, EmptyOptional)
#: ``graph.meta`` key of a body's outputs as the import held them (``body_outputs``)
HELD_OUTPUTS = "held_outputs"
_NOT_A_TENSOR = {TensorSeq: "a sequence: outputs here must be tensors (take items out with SequenceAt or "
                            "ConcatFromSequence)",
                 EmptyOptional: "an empty optional: a compiled output is always present"}


def sequence_item_type(inp: Any) -> Any | None:
    """The item ``TypeProto`` of a sequence (or optional sequence) graph input or output, None for any
    other."""
    typ = inp.type
    if typ.WhichOneof("value") == "optional_type":
        typ = typ.optional_type.elem_type
    return typ.sequence_type.elem_type if typ.WhichOneof("value") == "sequence_type" else None


def sequence_input(graph: Graph, inp: Any, shapes: Sequence[Sequence[int]] | None, half: HalfFloats,
                   item_type: Callable[[Any, Sequence[int]], TensorType]) -> TensorSeq:
    """Sequence input ``inp`` as one tensor input per item shape the user gave at build time, each typed
    by ``item_type(value_info, shape)`` (the importer's check of a tensor input against its declaration)."""
    import onnx

    if shapes is None or any(not isinstance(s, (list, tuple)) for s in shapes):
        held = "optional " if inp.type.WhichOneof("value") == "optional_type" else ""
        raise UnsupportedOperator("Input", inp.name, None, f"a {held}sequence input: graph inputs must be "
                                  "tensors or optional tensors, or sequences given their item shapes at "
                                  f"build time, one per item (input_shapes={{{inp.name!r}: [(2, 3), (3, 3)]}}"
                                  f" compiles a sequence of two tensors); got {shapes!r}")
    check_count(len(shapes), inp.name)
    items = []
    for i, shape in enumerate(shapes):
        item = onnx.ValueInfoProto(name=item_name(inp.name, i), type=sequence_item_type(inp))
        v = graph.value(item.name, item_type(item, shape))
        graph.inputs.append(v)
        items.append(half.graph_input(v))
    graph.meta.setdefault(SEQUENCES, {}).setdefault("inputs", {})[inp.name] = len(items)
    unshaped = onnx.ValueInfoProto(name=inp.name, type=sequence_item_type(inp))
    unshaped.type.tensor_type.ClearField("shape")  # its element type, for a sequence of no items too
    stored = item_type(unshaped, ()).dtype
    return TensorSeq(tuple(items), HELD.get(stored, stored))


def flat_values(held: Sequence[Any], names: Sequence[str], allowed: tuple[type, ...], refuse: Refuse
                ) -> list[Value]:
    """The tensors of a graph's or body's outputs as the import holds them (``held``, under ``names``): a
    sequence's items in order, an empty optional none; either only where ``allowed``."""
    out: list[Value] = []
    for name, v in zip(names, held):
        if isinstance(v, Value):
            out.append(v)
        elif not isinstance(v, allowed):
            raise refuse(name, _NOT_A_TENSOR[type(v)])
        elif isinstance(v, TensorSeq):
            if None in v.items:  # its items' shapes are known only at run time
                assert v.unknown is not None
                raise v.unknown
            out.extend(v.items)  # type: ignore[arg-type]
    return out


def body_outputs(graph: Graph, env: Mapping[str, Any], outputs: Sequence[Any], sequences: bool, whose: str,
                 unsupported: Callable[[str], Exception]) -> list[Value]:
    """A body's outputs (``ValueInfoProto``s) as tensors (``flat_values``); with ``sequences`` it may
    return sequences and optionals, and what it returned is kept in ``graph.meta[HELD_OUTPUTS]`` for its
    node to regroup. ``whose`` names the body in a refusal, ``unsupported(detail)`` makes it."""
    held = [env[o.name] for o in outputs]
    if sequences:
        graph.meta[HELD_OUTPUTS] = held
    return flat_values(held, [o.name for o in outputs], CONTAINERS if sequences else (),
                       lambda name, why: unsupported(f"{whose} returns {name!r}, {why}"))


def graph_outputs(graph: Graph, outputs: Sequence[Any], env: Mapping[str, Any], opset: int
                  ) -> tuple[list[tuple[Value, int]], list[str]]:
    """A model's outputs (``ValueInfoProto``s) as tensors, each with the ONNX element type it declares,
    and their names: a sequence's items are ``name[i]`` (recorded for ``predict``); an empty optional is
    refused."""
    def refuse(name: str, why: str) -> UnsupportedOperator:
        return UnsupportedOperator("Output", name, opset, f"the graph returns {name!r}, {why}")

    flat: list[tuple[Value, int]] = []
    names: list[str] = []
    for out in outputs:
        if out.name not in env:
            raise ModelFormatError(f"graph output {out.name!r} is never produced")
        v = env[out.name]
        items = flat_values([v], [out.name], (TensorSeq,), refuse)
        typ = sequence_item_type(out) or out.type
        flat.extend((item, typ.tensor_type.elem_type) for item in items)
        if isinstance(v, TensorSeq):
            graph.meta.setdefault(SEQUENCES, {}).setdefault("outputs", {})[out.name] = len(items)
            names.extend(item_name(out.name, i) for i in range(len(items)))
        else:
            names.append(out.name)
    return flat, names


def layout(held: Sequence[Any]) -> list[Any]:
    """What a body returns, item types aside (those the caller compares on the flat tensors)."""
    return [None if isinstance(v, Value) else (type(v).__name__, len(getattr(v, "items", ()))) for v in held]


def regrouped(held: Sequence[Any], flat: Sequence[Value]) -> list[Any]:
    """A node's outputs shaped as its body's (``held``), made of ``flat``, the node's tensor outputs."""
    it = iter(flat)
    out: list[Any] = []
    for v in held:
        if isinstance(v, Value):
            out.append(next(it))
        elif isinstance(v, TensorSeq):
            out.append(TensorSeq(tuple(next(it) for _ in v.items), v.dtype))
        else:
            out.append(v)
    return out


def typed_input(name: str, v: Any, half: Mapping[Value, str], onnx_type: Mapping[str, int]) -> Any | None:
    """A ``ValueInfoProto`` for ``v`` (a tensor or a sequence) under ``name``, the typed input of an
    operator's function body (``importer._function_body``; ``onnx_type``: IR dtype -> ONNX element type);
    None when its type has no ONNX name."""
    from onnx import helper

    if isinstance(v, TensorSeq):
        elem = onnx_type.get(half.get(v.items[0], v.dtype) if v.items and v.items[0] is not None else v.dtype)
        return None if elem is None else helper.make_tensor_sequence_value_info(name, elem, None)
    if not isinstance(v, Value):
        return None
    elem = onnx_type.get(half.get(v, v.type.dtype))
    return None if elem is None else helper.make_tensor_value_info(name, elem, v.type.shape)


# -- a Loop carrying a sequence ----------------------------------------------------------------------------
#: ``inline(body, bound, tag)``: the body graph's nodes converted into the node's graph with its inputs
#: bound (name -> value), giving its outputs as the import holds them (the importer's ``_inline_body``)
Inline = Callable[[Any, dict[str, Any], str], list[Any]]
_UNROLLED = "a loop carrying a sequence is unrolled at build time"


def _known(ctx: ConvertContext, i: int, what: str) -> Any:
    """Input i's one value, which an unrolled loop needs at build time."""
    if not ctx.input(i).is_const:
        raise ctx.not_constant(i, f"{_UNROLLED}: its {what}")
    return ctx.scalar(i, what)


def unroll_loop(ctx: ConvertContext, inline: Inline) -> None:
    """A Loop carrying a sequence (or an optional), as one copy of its body per iteration: its trip count
    and condition must be known at build time, and so must the body's condition after each iteration."""
    trips = int(_known(ctx, 0, "trip count")) if ctx.has_input(0) else None
    go = bool(_known(ctx, 1, "condition")) if ctx.has_input(1) else True
    body, state = ctx.attr("body"), [ctx.item(i) for i in range(2, ctx.n_inputs)]
    if len(body.input) != 2 + len(state) or len(body.output) != 1 + len(state):
        raise ctx.unsupported(f"its body takes {len(body.input)} inputs and gives {len(body.output)} outputs "
                              f"for {len(state)} carried values ({_UNROLLED}, without scan outputs)")
    i = 0
    while go and (trips is None or i < trips):
        check_count(i + 1, f"{ctx.name}: unrolled iterations")
        bound = dict(zip([x.name for x in body.input], [
            ctx.constant(np.array(i, np.int64), f"iter{i}"), ctx.constant(np.array(go), "cond"), *state]))
        cond, *state = inline(body, bound, f"{ctx.name}/{i}")
        if not isinstance(cond, Value) or not cond.is_const:
            raise ctx.unsupported(f"its body's condition is known only at run time ({_UNROLLED})")
        go, i = bool(cond.const.reshape(-1)[0]), i + 1
    ctx.set_outputs(*state)
