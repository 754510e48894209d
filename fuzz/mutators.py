"""Structure-aware mutators: byte flips rarely get past a JSON parser or an HTTP head, so these change one
value or one line at a time and keep the rest well formed (libFuzzer's byte mutations still run on a
share of the inputs, through ``atheris.Mutate``). Each takes (data, max_size, seed) as atheris calls it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

#: values that broke parsers before, or are the edges of their types
INTERESTING: tuple[Any, ...] = (
    0, -1, 1, 2**31, 2**63, -(2**63) - 1, 2**64, 10**400, 1e308, -1e308, 1e-320, float("nan"), float("inf"),
    float("-inf"), True, False, None, "", "0", "-1", "01", "1e400", "NaN", "\ud800", "\u00b2", "a" * 4096,
    "2026-12-05T00:00:00Z", "float32", "int64", "object", "U0", "FP32", "BYTES", "INT64", [], {}, [[]], [0],
    [1, [2]], {"": None},
)
#: header values and request targets that broke HTTP code before
HTTP_VALUES: tuple[bytes, ...] = (
    b"//[", b"http://[", b"http://h:99999/", b"http://h:x/", b"file:///etc/passwd", b"/%ff%fe",
    b"/v2/models/%00", b"9" * 4000, b"-1", b"0", b"1" * 21, b"\xb2", b"bytes 0-0/0", b"bytes 5-2/3",
    b"bytes " + b"9" * 5000 + b"-0/1",
    b"chunked", b"gzip", b"close", b"keep-alive", b"100-continue", b"", b" ", b"\t", b"a" * 8192,
)

Mutator = Callable[[bytes, int, int], bytes]


def _bytes_mutate(data: bytes, max_size: int) -> bytes:
    import atheris  # only under the fuzzer: replay and the tests never mutate

    return atheris.Mutate(data, max_size)


def _paths(doc: Any, at: tuple = ()) -> list[tuple]:
    """Every place in a JSON document: the path of keys and indices to it."""
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*at, i))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


def _changed(value: Any, rng: random.Random) -> Any:
    """Another value for one place: an interesting one, a neighbour of the same type, or a reshaped
    container."""
    roll = rng.random()
    if roll < 0.45:
        return rng.choice(INTERESTING)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice((-1, 1)) * rng.choice((1, 2**8, 2**16, 2**32, 2**64))
    if isinstance(value, float):
        return value * rng.choice((-1.0, 0.0, 1e10, 1e-10, 2.0))
    if isinstance(value, str):
        cut = rng.randrange(len(value) + 1)
        return value[:cut] + rng.choice(("", "\x00", "/", "..", "\u00e9", "%", value)) + value[cut:]
    if isinstance(value, list):
        if value and roll < 0.7:
            return value + value if rng.random() < 0.5 else value[:-1]
        return [value] if roll < 0.85 else list(reversed(value))
    if isinstance(value, dict):
        if value and roll < 0.75:  # one key dropped
            gone = rng.choice(list(value))
            return {k: v for k, v in value.items() if k != gone}
        return {**value, rng.choice(("shape", "data", "datatype", "name", "parameters", "x")): rng.choice(
            INTERESTING)}
    return rng.choice(INTERESTING)


def mutate_json_text(text: bytes, rng: random.Random) -> bytes | None:
    """``text`` with one value changed, or None when it is not JSON."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    path = rng.choice(_paths(doc))
    if not path:
        doc = _changed(doc, rng)
    else:
        parent = _get(doc, path[:-1])
        parent[path[-1]] = _changed(parent[path[-1]], rng)
    try:
        return json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        return None


def json_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    """A JSON document (with a binary part after a NUL: the binary tensor extension) with one value
    changed; 1 in 5 byte-level."""
    rng = random.Random(seed)
    head, sep, tail = data.partition(b"\0")
    if rng.random() < 0.8 and (new := mutate_json_text(head, rng)) is not None:
        out = new + sep + tail
        if len(out) <= max_size:
            return out
    return _bytes_mutate(data, max_size)


def http_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    """An HTTP/1.1 message (request or response) with its start line, one header or its JSON body
    changed; 1 in 5 byte-level."""
    rng = random.Random(seed)
    head, sep, body = data.partition(b"\r\n\r\n")
    if rng.random() < 0.2 or not sep:
        return _bytes_mutate(data, max_size)
    lines = head.split(b"\r\n")
    roll = rng.random()
    if roll < 0.3:  # the start line: one of its three parts
        parts = lines[0].split(b" ", 2)
        i = rng.randrange(len(parts))
        parts[i] = rng.choice(HTTP_VALUES) if rng.random() < 0.7 else parts[i] * 2
        lines[0] = b" ".join(parts)
    elif roll < 0.7 and len(lines) > 1:  # one header's value
        i = rng.randrange(1, len(lines))
        name = lines[i].split(b":", 1)[0]
        lines[i] = name + b": " + rng.choice(HTTP_VALUES)
    elif roll < 0.85:  # a header added
        name = rng.choice((b"Content-Length", b"Transfer-Encoding", b"Content-Range", b"Location",
                           b"Inference-Header-Content-Length", b"Connection", b"Expect", b"X"))
        lines.insert(rng.randrange(1, len(lines) + 1), name + b": " + rng.choice(HTTP_VALUES))
    else:  # the body's JSON
        new = mutate_json_text(body.partition(b"\0")[0], rng)
        if new is not None:
            body = new
    out = b"\r\n".join(lines) + sep + body
    return out if len(out) <= max_size else _bytes_mutate(data, max_size)
