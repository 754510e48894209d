"""Golden vectors: tensors as ``{"dtype", "shape", "data"}`` (base64, little-endian), in the signed manifest
or, when they do not fit its header, in the release's ``GOLDEN_FILE`` payload."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runtime_wasm import schema
from runtime_wasm.spec import (
    MAX_DIM,
    MAX_RANK,
    STORED_DTYPES,
    STORED_RANGES,
    from_storage,
    storage_dtype,
    supported_dtype,
)

from .crypto import parse_json
from .errors import FormatError
from .metadata import MAX_GOLDEN

#: the payload holding a release's golden vectors (a JSON list, as the manifest's ``golden``) when they do
#: not fit in the signed header: one vector of a 640 x 640 detector is ~10 MB of base64. Its sha256 is in
#: the signed manifest like every payload's, so it is checked before it is read.
GOLDEN_FILE = "golden.json"
_VECTORS = schema.array(lambda value, _path: value, MAX_GOLDEN)


def release_vectors(slot: Path, inline: Sequence[Any]) -> list[Any]:
    """An installed release's golden vectors: the manifest's own (``inline``), else its ``GOLDEN_FILE`` in
    ``slot`` (none: an empty list); ``FormatError`` when that file is not a list of at most ``MAX_GOLDEN``."""
    if inline:
        return list(inline)
    try:
        data = (slot / GOLDEN_FILE).read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise FormatError(f"{GOLDEN_FILE}: unreadable: {exc}") from exc
    return list(schema.read(parse_json(data, GOLDEN_FILE), _VECTORS, GOLDEN_FILE, FormatError))


def encode_tensor(a: np.ndarray) -> dict[str, Any]:
    a = np.asarray(a, order="C")  # np.ascontiguousarray makes a 0-d array 1-d
    le = a.astype(a.dtype.newbyteorder("<"), copy=False)
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": base64.b64encode(le.tobytes()).decode()}


def _dtype_name(name: Any) -> str:
    """``encode_tensor``'s dtype name as the runtime names it (numpy calls S5 "bytes40"), if it holds it
    (``supported_dtype``: numpy never parses another name, which it may choke on, "01,i4" raising
    SyntaxError, or read as something else)."""
    bits = re.fullmatch(r"bytes([1-9][0-9]{0,10})", name) if isinstance(name, str) else None
    dtype = f"S{int(bits[1]) // 8}" if bits and int(bits[1]) % 8 == 0 else name
    if not isinstance(dtype, str) or not supported_dtype(dtype):
        raise FormatError(f"malformed golden tensor: unsupported dtype {str(name)[:64]!r}")
    return dtype


def _as_bit_patterns(name: str) -> bool:
    """Whether golden tensors of ``name`` are read as their storage's bit patterns: the float types numpy
    knows only through ml_dtypes (bfloat16, the float8/float4 formats; ``encode_tensor`` wrote their bit
    patterns), so a device without ml_dtypes reads them too and gets them as its model's outputs come
    (``from_storage``)."""
    return name in STORED_DTYPES and name not in STORED_RANGES


def decode_tensor(d: Any) -> np.ndarray:
    try:
        name = _dtype_name(d["dtype"])
        dtype = (storage_dtype(name) if _as_bit_patterns(name) else np.dtype(name)).newbyteorder("<")
        shape = d["shape"]
        if not isinstance(shape, list) or len(shape) > MAX_RANK or not all(
                isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_DIM for x in shape):
            raise FormatError(f"malformed golden tensor: shape must be a list of at most {MAX_RANK} integers "
                              f"in [0, {MAX_DIM}]")
        raw = base64.b64decode(d["data"], validate=True)
        a = np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
        return from_storage(name, a) if _as_bit_patterns(name) else a
    except (KeyError, TypeError, ValueError) as exc:
        raise FormatError(f"malformed golden tensor: {exc}") from exc


def encode_vector(inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    return {"inputs": {k: encode_tensor(v) for k, v in inputs.items()},
            "outputs": {k: encode_tensor(v) for k, v in outputs.items()}}


def decode_vector(d: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    if not isinstance(d, Mapping) or not isinstance(d.get("inputs"), Mapping) \
            or not isinstance(d.get("outputs"), Mapping):
        raise FormatError("a golden vector needs 'inputs' and 'outputs' objects")
    return ({k: decode_tensor(v) for k, v in d["inputs"].items()},
            {k: decode_tensor(v) for k, v in d["outputs"].items()})
