"""Attribute schemas: which attrs a node of an op may carry, which it must, and of what Python type.

An op family declares its ops' schemas next to their ``OpDef``s (``declare``); the verifier
(``passes/verify.py``) checks every node of a declared op after import and after each pass, so a pass
that leaves a wrong attr fails where it runs, not in code generation. Ops without a schema are not
checked (yet): the quantized ones have one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.graph import Node


@dataclass(frozen=True)
class Attr:
    """One attr: its value's type(s), whether a node must carry it, and (for lists) its items' types."""

    types: type | tuple[type, ...]
    required: bool = True
    items: type | tuple[type, ...] | None = None

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` for this attr (None: nothing)."""
        if not isinstance(value, self.types):
            return f"is a {type(value).__name__}, not {_names(self.types)}"
        if self.items is not None and not all(isinstance(x, self.items) for x in value):
            return f"holds {[type(x).__name__ for x in value]}, not only {_names(self.items)}"
        return None


#: an op's attrs by name, or a function of the node giving them (an op wrapping another takes its attrs)
Schema = Mapping[str, Attr] | Callable[[Node], Mapping[str, Attr]]
_SCHEMAS: dict[str, Schema] = {}
#: an integer attr's types (numbers computed with numpy stay numpy integers)
INT = (int, np.integer)
#: the fused activation every computing op may carry: (kind, a, b) (``ops/common.py`` ``act_c``)
ACT = Attr((tuple, list), required=False)


def _names(types: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))


def declare(op: str, schema: Schema) -> None:
    """Give ``op`` its attribute schema (once)."""
    if op in _SCHEMAS:
        raise ValueError(f"op {op!r} has two attribute schemas")
    _SCHEMAS[op] = schema


def schema_of(node: Node) -> Mapping[str, Attr] | None:
    """The attrs ``node``'s op allows (None: its op declares none)."""
    schema = _SCHEMAS.get(node.op)
    return schema(node) if callable(schema) else schema


def attr_problems(node: Node) -> list[str]:
    """Each unknown, missing or mistyped attr of ``node``, one phrase each (empty: none, or no schema)."""
    schema = schema_of(node)
    if schema is None:
        return []
    problems = [f"unknown attr {k!r}" for k in node.attrs if k not in schema]
    for name, attr in schema.items():
        if name not in node.attrs:
            problems += [f"missing attr {name!r}"] if attr.required else []
        elif (what := attr.problem(node.attrs[name])) is not None:
            problems.append(f"attr {name!r} {what}")
    return problems
