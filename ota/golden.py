"""Golden vectors in a manifest: tensors as ``{"dtype", "shape", "data"}`` (base64, little-endian)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import FormatError


def encode_tensor(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a)
    le = a.astype(a.dtype.newbyteorder("<"), copy=False)
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": base64.b64encode(le.tobytes()).decode()}


def decode_tensor(d: Any) -> np.ndarray:
    try:
        dtype = np.dtype(d["dtype"]).newbyteorder("<")
        shape = tuple(int(x) for x in d["shape"])
        raw = base64.b64decode(d["data"], validate=True)
        return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
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
