"""The schema readers every device JSON document goes through: each bound refuses with the caller's
error naming the field's path, and nothing else escapes."""

from __future__ import annotations

import re

import pytest

from runtime_wasm import schema as s


class DocError(Exception):
    pass


DOC = s.record({
    "n": s.integer(0, 100),
    "x": s.number(-1.0, 1.0),
    "name": s.text(8, r"[a-z]+"),
    "digest": s.Optional(s.sha256(), ""),
    "dims": s.Optional(s.array(s.integer(0, 2**31 - 1), 4), ()),
    "kind": s.one_of("a", "b"),
    "flag": s.Optional(s.boolean(), False),
    "keys": s.Optional(s.mapping(s.text(8), s.nullable(s.integer()), 2), {}),
})
GOOD = {"n": 3, "x": 0.5, "name": "ok", "kind": "a"}


def test_a_good_document_is_normalised_and_keeps_unknown_fields() -> None:
    out = s.read({**GOOD, "dims": [1, 2], "later": {"any": 1}}, DOC, "doc", DocError)
    assert out["dims"] == (1, 2) and out["digest"] == "" and out["later"] == {"any": 1}
    assert out["flag"] is False and out["keys"] == {}


@pytest.mark.parametrize("change, path", [
    ({"n": True}, "n: must be an integer"),
    ({"n": 101}, "n: must be in [0, 100]"),
    ({"n": 2**400}, "n: must be in [0, 100], got a 121-digit integer"),
    ({"x": 1e400}, "x: must be a finite number"),
    ({"x": float("nan")}, "x: must be a finite number"),
    ({"x": 10**400}, "x: is out of range"),
    ({"x": "0.5"}, "x: must be a number, got str"),
    ({"name": "Upper"}, "name: is malformed"),
    ({"name": "\udc80"}, "name: is not valid UTF-8"),
    ({"name": 7}, "name: must be a string, got int"),
    ({"digest": "ab"}, "digest: must have 64-64 characters"),
    ({"dims": [1, 2**63]}, "dims[1]: must be in [0, 2147483647]"),
    ({"dims": [1] * 5}, "dims: must have 0-4 items"),
    ({"kind": "c"}, "kind: must be one of"),
    ({"kind": None}, "kind: must be one of"),
    ({"flag": 1}, "flag: must be true or false"),
    ({"keys": {"a": 1, "b": 2, "c": 3}}, "keys: must have at most 2 entries"),
    ({"keys": {"a": "1"}}, "keys.a: must be an integer"),
])
def test_every_bound_is_the_callers_error_naming_the_path(change, path) -> None:
    with pytest.raises(DocError, match="^doc: " + re.escape(path)):
        s.read({**GOOD, **change}, DOC, "doc", DocError)


def test_a_missing_field_and_a_non_object_are_named() -> None:
    with pytest.raises(DocError, match="doc: kind: is missing"):
        s.read({k: v for k, v in GOOD.items() if k != "kind"}, DOC, "doc", DocError)
    with pytest.raises(DocError, match="doc: document: must be an object, got list"):
        s.read([], DOC, "doc", DocError)


def test_refuse_and_drop_for_unknown_fields() -> None:
    strict = s.record({"a": s.integer()}, extra="refuse")
    with pytest.raises(DocError, match="unknown fields"):
        s.read({"a": 1, "b": 2}, strict, "doc", DocError)
    assert s.read({"a": 1, "b": 2}, s.record({"a": s.integer()}, extra="drop"), "doc", DocError) == {"a": 1}


@pytest.mark.parametrize("data", [b"{", b"\xff", "[" * 100_000 + "]" * 100_000, "1" * 5000, b'{"a": NaN'])
def test_load_turns_every_decoder_failure_into_the_callers_error(data) -> None:
    with pytest.raises(DocError, match="^doc: not valid JSON"):
        s.load(data, 10**6, "doc", DocError)


def test_load_refuses_a_document_past_its_size_before_decoding() -> None:
    with pytest.raises(DocError, match="doc: 11 bytes, limit 10"):
        s.load(b'"123456789"', 10, "doc", DocError)
