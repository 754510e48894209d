"""Every JSON document a device reads (signed metadata, MQTT messages, ``model.json``, local state files)
is read through these schemas: types, ranges and sizes checked before any value is used, so a hostile or
mistaken document is the caller's typed error and never a ``TypeError``, ``OverflowError`` or
``ValueError`` from ``int()``, ``float()``, numpy or a comparison deep in the code that uses it.

A schema is a tree of readers. Each reader takes a decoded JSON value and returns it checked and
normalised (lists become tuples, numbers are bounded); ``read`` runs one over a document and turns the
first violation into ``error("<what>: <path>: <why>")``. Why bounds everywhere: Python's integers and
JSON's ``Infinity`` are unbounded, and a value that is only ever compared (a timestamp, a count) is the
one a fuzzer or an attacker will make absurd.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: the largest integer a document may hold anywhere (int64: what numpy, C and wasm can carry)
INT_MAX = 2**63 - 1
_SHA256 = re.compile(r"[0-9a-f]{64}")

Reader = Callable[[Any, str], Any]


class Invalid(Exception):
    """A value broke its schema; ``read`` turns it into the caller's error type."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path or 'document'}: {why}")


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def integer(low: int = 0, high: int = INT_MAX) -> Reader:
    """An integer in ``[low, high]``; a bool or a float with an integral value is not one."""

    def read_int(value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(path, f"must be an integer, got {_type_name(value)}")
        if not low <= value <= high:
            shown = value if abs(value) < 10**30 else f"a {len(str(abs(value)))}-digit integer"
            raise Invalid(path, f"must be in [{low}, {high}], got {shown}")
        return value

    return read_int


def number(low: float = -math.inf, high: float = math.inf) -> Reader:
    """A finite float in ``[low, high]`` (an integer is taken; NaN, Infinity and bools are not)."""

    def read_number(value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Invalid(path, f"must be a number, got {_type_name(value)}")
        try:
            f = float(value)
        except OverflowError:
            raise Invalid(path, f"is out of range (a {len(str(abs(value)))}-digit integer)") from None
        if not (math.isfinite(f) and low <= f <= high):
            raise Invalid(path, f"must be a finite number in [{low}, {high}], got {f!r}")
        return f

    return read_number


def text(max_len: int = 4096, pattern: str | None = None, min_len: int = 0) -> Reader:
    """A string of at most ``max_len`` characters, all encodable as UTF-8 (a lone surrogate is refused),
    matching ``pattern`` in full when given."""
    compiled = re.compile(pattern) if pattern is not None else None

    def read_text(value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise Invalid(path, f"must be a string, got {_type_name(value)}")
        if not min_len <= len(value) <= max_len:
            raise Invalid(path, f"must have {min_len}-{max_len} characters, got {len(value)}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Invalid(path, "is not valid UTF-8 (a lone surrogate)") from None
        if compiled is not None and not compiled.fullmatch(value):
            raise Invalid(path, f"is malformed: {value[:80]!r}")
        return value

    return read_text


def sha256() -> Reader:
    """A lowercase hex sha256 digest."""
    return text(64, _SHA256.pattern, 64)


def boolean() -> Reader:
    def read_bool(value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise Invalid(path, f"must be true or false, got {_type_name(value)}")
        return value

    return read_bool


def one_of(*choices: object) -> Reader:
    """One of a few literal values (compared by type and value: ``1`` is not ``True``)."""

    def read_choice(value: Any, path: str) -> Any:
        if not any(type(value) is type(c) and value == c for c in choices):
            raise Invalid(path, f"must be one of {list(choices)}, got {str(value)[:80]!r}")
        return value

    return read_choice


def array(item: Reader, max_items: int, min_items: int = 0) -> Reader:
    """A list of ``min_items``..``max_items`` values each read by ``item``, as a tuple."""

    def read_array(value: Any, path: str) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise Invalid(path, f"must be a list, got {_type_name(value)}")
        if not min_items <= len(value) <= max_items:
            raise Invalid(path, f"must have {min_items}-{max_items} items, got {len(value)}")
        return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

    return read_array


def mapping(key: Reader, value: Reader, max_items: int) -> Reader:
    """An object used as a dictionary (names to values), at most ``max_items`` entries."""

    def read_mapping(obj: Any, path: str) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise Invalid(path, f"must be an object, got {_type_name(obj)}")
        if len(obj) > max_items:
            raise Invalid(path, f"must have at most {max_items} entries, got {len(obj)}")
        return {key(k, f"{path} key"): value(v, f"{path}.{k}") for k, v in obj.items()}

    return read_mapping


def nullable(inner: Reader) -> Reader:
    def read_nullable(value: Any, path: str) -> Any:
        return None if value is None else inner(value, path)

    return read_nullable


_MISSING = object()


@dataclass(frozen=True)
class Optional:
    """A field that may be absent (then ``default``)."""

    reader: Reader
    default: Any = None


def record(fields: Mapping[str, Reader | Optional], extra: str = "keep") -> Reader:
    """An object with named fields. ``extra``: ``keep`` (unknown fields pass through unchecked, so newer
    writers' additions survive a round trip), ``drop`` or ``refuse``."""

    def read_record(obj: Any, path: str) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise Invalid(path, f"must be an object, got {_type_name(obj)}")
        out: dict[str, Any] = {}
        for name, spec in fields.items():
            where = f"{path}.{name}" if path else name
            value = obj.get(name, _MISSING)
            if isinstance(spec, Optional):
                out[name] = spec.default if value is _MISSING else spec.reader(value, where)
            elif value is _MISSING:
                raise Invalid(where, "is missing")
            else:
                out[name] = spec(value, where)
        unknown = [k for k in obj if k not in fields]
        if unknown and extra == "refuse":
            raise Invalid(path, f"has unknown fields {sorted(map(str, unknown))[:8]}")
        if extra == "keep":
            out.update((k, obj[k]) for k in unknown)
        return out

    return read_record


def load(data: str | bytes, max_bytes: int, what: str, error: type[Exception]) -> Any:
    """``data`` decoded as JSON, at most ``max_bytes`` long, else ``error`` (deep nesting is the C
    decoder's RecursionError, caught here; the readers descend only as deep as their schema)."""
    size = len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    if size > max_bytes:
        raise error(f"{what}: {size} bytes, limit {max_bytes}")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, >4300-digit integers
        raise error(f"{what}: not valid JSON: {str(exc)[:200]}") from None


def read(doc: Any, reader: Reader, what: str, error: type[Exception]) -> Any:
    """``reader`` run over ``doc``; a violation is ``error`` naming ``what`` and the field's path."""
    try:
        return reader(doc, "")
    except Invalid as exc:
        raise error(f"{what}: {exc}") from None
