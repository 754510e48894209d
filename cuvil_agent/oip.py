"""The Open Inference Protocol's (KServe v2) HTTP wire format: datatypes, tensors as JSON or binary, and
inference requests and responses. No I/O: the server (``cuvil_agent.http_api``) and the client
(``cuvil_agent.http_client``) share it, and everything a client sends is checked here against the model's
signature, so a bad request is one ``BadInferenceRequest`` naming the field, never a numpy error.

Binary tensor data extension: a body is a JSON header of ``Inference-Header-Content-Length`` bytes
followed by the raw tensors (little-endian, row-major) of every input whose ``parameters`` give a
``binary_data_size``, in input order; outputs asked for with ``"binary_data": true`` (or all of them with
``binary_data_output``) come back the same way. BYTES tensors (texts, encoded images) are JSON strings,
or, as binary, each element as a 4-byte little-endian length and its bytes; a JSON input whose
``parameters.content_type`` is ``"base64"`` (MLServer's codec name) carries each element base64-encoded.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ota.errors import BadInferenceRequest, InputOverLimit
from ota.parse import finite_number, parse_decimal
from runtime_wasm.errors import InferenceInputError
from runtime_wasm.schema import INT_MAX
from runtime_wasm.spec import MAX_RANK, TensorSpec, check_index_bound

#: the header that splits a body into its JSON part and the binary tensors after it
HEADER_LENGTH = "Inference-Header-Content-Length"
#: the protocol's datatype names and the numpy dtypes they are (BYTES: object arrays of ``bytes``, which
#: only processed inputs and outputs use: texts, encoded images, labels)
DATATYPES: dict[str, np.dtype] = {name: np.dtype(dt) for name, dt in (
    ("BOOL", "bool"), ("UINT8", "uint8"), ("UINT16", "uint16"), ("UINT32", "uint32"), ("UINT64", "uint64"),
    ("INT8", "int8"), ("INT16", "int16"), ("INT32", "int32"), ("INT64", "int64"), ("FP16", "float16"),
    ("FP32", "float32"), ("FP64", "float64"), ("BYTES", "object"))}
BYTES = np.dtype(object)
_LENGTH = struct.Struct("<I")
_NAMES = {dt: name for name, dt in DATATYPES.items()}


def datatype(dtype: Any) -> str:
    """The protocol's name for a numpy dtype (``float32`` -> ``FP32``)."""
    try:
        return _NAMES[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise BadInferenceRequest(f"dtype {dtype!r} has no Open Inference Protocol datatype") from None


def tensor_metadata(t: TensorSpec) -> dict[str, Any]:
    return {"name": t.name, "datatype": datatype(t.dtype), "shape": list(t.shape)}


@dataclass(frozen=True)
class Signature:
    """One way to call a model: its input and output tensors. A BYTES dimension of -1 takes any size."""

    inputs: Sequence[TensorSpec]
    outputs: Sequence[TensorSpec]


@dataclass(frozen=True)
class BytesLimits:
    """Bounds on one BYTES input: elements, and bytes per element (after base64 decoding)."""

    max_elements: int
    max_element_bytes: int


@dataclass(frozen=True)
class InferRequest:
    """A checked request: inputs cast to the model's dtypes, and which outputs to return how."""

    id: str | None
    inputs: dict[str, np.ndarray]
    #: (output name, as binary) in the order to return them
    outputs: list[tuple[str, bool]]
    captured_at: float | None  # ``parameters.captured_at``: unix seconds, for the freshness bound
    hop_s: float | None = None  # ``parameters.hop_s``: audio cut into windows this many seconds apart


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadInferenceRequest(f"{what} must be a JSON object")
    return value


def _param(params: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = params.get(key)
    if value is not None and (not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)):
        raise BadInferenceRequest(f"{what}.parameters.{key} has the wrong type")
    return value


def _binary_size(params: Mapping[str, Any], what: str) -> int | None:
    """``parameters.binary_data_size``: None, or a byte count (a negative one would slice backwards)."""
    size = _param(params, "binary_data_size", int, what)
    if size is not None and size < 0:
        raise BadInferenceRequest(f"{what}.parameters.binary_data_size must not be negative, got {size}")
    return size


def split_body(body: bytes, header_length: str | None) -> tuple[Any, memoryview]:
    """The JSON document and the binary part after it (empty without the header)."""
    raw = memoryview(body)
    if header_length is None:
        json_part, binary = raw, raw[len(raw):]
    else:
        n = parse_decimal(header_length)
        if n is None:
            raise BadInferenceRequest(f"{HEADER_LENGTH} is not a number: {header_length[:40]!r}")
        if n > len(raw):
            raise BadInferenceRequest(f"{HEADER_LENGTH} {n} is outside the body of {len(raw)} bytes")
        json_part, binary = raw[:n], raw[n:]
    try:
        return json.loads(bytes(json_part)), binary
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadInferenceRequest(f"malformed JSON: {exc}") from None


def _from_json(data: Any, t: TensorSpec, what: str) -> np.ndarray:
    """Nested or flat row-major ``data`` as ``t``'s dtype: numbers of the right kind, in range, and as many
    as the shape holds (JSON integers are fine for floats, floats are not fine for integers)."""
    want = np.dtype(t.dtype)
    try:
        raw = np.array(data)
    except (ValueError, TypeError, OverflowError) as exc:  # ragged nesting
        raise BadInferenceRequest(f"{what}.data is not a regular array: {exc}") from None
    kinds = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}[want.kind]
    if raw.dtype.kind not in kinds and raw.size:
        raise BadInferenceRequest(f"{what}.data must hold {datatype(want)} values, got {raw.dtype.kind!r} "
                                  "(numbers or booleans as the datatype says)")
    if want.kind in "iu" and raw.size and (raw.min() < np.iinfo(want).min or raw.max() > np.iinfo(want).max):
        raise BadInferenceRequest(f"{what}.data has values outside {datatype(want)}'s range")
    if raw.size != math.prod(t.shape):
        raise BadInferenceRequest(f"{what}.data holds {raw.size} values; shape {list(t.shape)} needs "
                                  f"{math.prod(t.shape)}")
    return raw.astype(want).reshape(t.shape)


def _from_binary(blob: memoryview, t: TensorSpec) -> np.ndarray:
    want = np.dtype(t.dtype)
    if want.kind == "b":  # one byte per element; any non-zero byte is true
        return (np.frombuffer(blob, np.uint8) != 0).reshape(t.shape)
    return np.frombuffer(blob, want.newbyteorder("<")).astype(want).reshape(t.shape)


def _shape(item: Mapping[str, Any], what: str) -> tuple[int, ...]:
    shape = item.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_RANK or any(
            isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise BadInferenceRequest(f"{what}.shape must be a list of at most {MAX_RANK} non-negative integers")
    if math.prod(d for d in shape if d) > INT_MAX:  # numpy sizes even an empty array by its other axes
        raise BadInferenceRequest(f"{what}.shape {shape} is too large for any array")
    return tuple(shape)


def _bytes_from_json(data: Any, base64_encoded: bool, what: str) -> list[bytes]:
    """JSON strings (nested or flat) as their UTF-8 bytes, or base64-decoded."""
    flat = np.array(data, dtype=object).ravel().tolist()  # ragged nesting leaves lists inside: refused
    if not all(isinstance(x, str) for x in flat):
        raise BadInferenceRequest(f"{what}.data must hold strings (BYTES)")
    try:
        if base64_encoded:
            return [base64.b64decode(x, validate=True) for x in flat]
        return [x.encode("utf-8") for x in flat]
    except UnicodeEncodeError:  # a lone surrogate escape (\ud800) is no UTF-8 text
        raise BadInferenceRequest(f"{what}.data holds a string that is not valid UTF-8") from None
    except ValueError as exc:  # binascii.Error, or a base64 string with a character past ASCII
        raise BadInferenceRequest(f"{what}.data is not base64: {exc}") from None


def _bytes_from_binary(blob: memoryview, count: int, limits: BytesLimits | None, what: str) -> list[bytes]:
    """Elements as the binary extension frames them: a 4-byte little-endian length, then that many bytes."""
    elements: list[bytes] = []
    pos = 0
    while pos < len(blob):
        if pos + _LENGTH.size > len(blob) or len(elements) == count:
            raise BadInferenceRequest(f"{what}: its binary data holds more than {count} elements")
        (n,) = _LENGTH.unpack_from(blob, pos)
        pos += _LENGTH.size
        if limits is not None and n > limits.max_element_bytes:
            raise InputOverLimit(f"{what}: element {len(elements)} has {n} bytes, over the limit of "
                                 f"{limits.max_element_bytes}")
        if pos + n > len(blob):
            raise BadInferenceRequest(f"{what}: element {len(elements)} ends past its binary data")
        elements.append(bytes(blob[pos:pos + n]))
        pos += n
    return elements


def _bytes_tensor(item: Mapping[str, Any], params: Mapping[str, Any], shape: tuple[int, ...],
                  binary: memoryview, at: int, limits: BytesLimits | None, what: str
                  ) -> tuple[np.ndarray, int]:
    """A BYTES tensor as an object array of ``bytes``, within ``limits``."""
    count = math.prod(shape)
    if limits is not None and count > limits.max_elements:
        raise InputOverLimit(f"{what} has {count} elements, over the limit of {limits.max_elements}")
    size = _binary_size(params, what)
    if size is None:
        if "data" not in item:
            raise BadInferenceRequest(f"{what} has neither data nor parameters.binary_data_size")
        content_type = _param(params, "content_type", str, what)
        elements = _bytes_from_json(item["data"], content_type == "base64", what)
    else:
        if "data" in item:
            raise BadInferenceRequest(f"{what} has both data and parameters.binary_data_size")
        if at + size > len(binary):
            raise BadInferenceRequest(f"{what}: the body ends before its {size} binary bytes")
        elements = _bytes_from_binary(binary[at:at + size], count, limits, what)
        at += size
    if len(elements) != count:
        raise BadInferenceRequest(f"{what} holds {len(elements)} elements; shape {list(shape)} needs {count}")
    if limits is not None and any(len(e) > limits.max_element_bytes for e in elements):
        raise InputOverLimit(f"{what}: an element is over the limit of {limits.max_element_bytes} bytes")
    out = np.empty(count, dtype=object)
    out[:] = elements
    return out.reshape(shape), at


def _tensor(item: Mapping[str, Any], t: TensorSpec, binary: memoryview, at: int, what: str,
            limits: BytesLimits | None = None) -> tuple[np.ndarray, int]:
    """One tensor (its JSON ``data``, or its slice of the binary part at ``at``), checked against its
    spec (a -1 dimension takes any size); returns it and where the next binary slice starts."""
    want = datatype(t.dtype)
    if item.get("datatype") != want:
        raise BadInferenceRequest(f"{what} is {want}, got datatype {item.get('datatype')!r}")
    shape = _shape(item, what)
    if len(shape) != len(t.shape) or any(d != s for d, s in zip(shape, t.shape) if s != -1):
        raise BadInferenceRequest(f"{what} must have shape {list(t.shape)}, got {shape}")
    params = _object(item.get("parameters", {}), f"{what}.parameters")
    if want == "BYTES":
        return _bytes_tensor(item, params, shape, binary, at, limits, what)
    size = _binary_size(params, what)
    if size is None:
        if "data" not in item:
            raise BadInferenceRequest(f"{what} has neither data nor parameters.binary_data_size")
        return _in_bounds(_from_json(item["data"], t, what), t, what), at
    if "data" in item:
        raise BadInferenceRequest(f"{what} has both data and parameters.binary_data_size")
    want_bytes = math.prod(t.shape) * np.dtype(t.dtype).itemsize  # BOOL: one byte each
    if size != want_bytes:
        raise BadInferenceRequest(f"{what}: binary_data_size {size} != {want_bytes} bytes for its shape")
    if at + size > len(binary):
        raise BadInferenceRequest(f"{what}: the body ends before its {size} binary bytes")
    return _in_bounds(_from_binary(binary[at:at + size], t), t, what), at + size


def _in_bounds(a: np.ndarray, t: TensorSpec, what: str) -> np.ndarray:
    """Ids into a table are refused here already, before the request queues (the runtime's one rule)."""
    try:
        check_index_bound(t, a, what)
    except InferenceInputError as exc:
        raise BadInferenceRequest(str(exc)) from None
    return a


def parse_infer_request(body: bytes, header_length: str | None, signatures: Sequence[Signature],
                        limits: BytesLimits | None = None) -> InferRequest:
    """Check an inference request body against one of the model's signatures (the first that takes the
    request's first input: tensors, or a processed text/image input): every input of it exactly once, with
    its datatype and shape; requested outputs by name (default: all, as JSON)."""
    doc, binary = split_body(body, header_length)
    doc = _object(doc, "the request")
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise BadInferenceRequest("id must be a string")
    params = _object(doc.get("parameters", {}), "parameters")
    captured, hop = params.get("captured_at"), params.get("hop_s")
    captured_at = None if captured is None else finite_number(captured, "parameters.captured_at",
                                                              BadInferenceRequest)
    hop_s = None if hop is None else finite_number(hop, "parameters.hop_s", BadInferenceRequest, 0)
    binary_default = bool(_param(params, "binary_data_output", bool, "request"))
    items = doc.get("inputs")
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise BadInferenceRequest("inputs must be a list of tensor objects")
    first = items[0].get("name") if items else None
    signature = next((sig for sig in signatures if any(t.name == first for t in sig.inputs)), signatures[0])
    specs = {t.name: t for t in signature.inputs}
    takes = " or ".join(str([t.name for t in sig.inputs]) for sig in signatures)
    arrays: dict[str, np.ndarray] = {}
    at = 0
    for item in items:
        name = item.get("name")
        if not isinstance(name, str) or name not in specs:
            raise BadInferenceRequest(f"the model has no input named {name!r}; it takes {takes}")
        if name in arrays:
            raise BadInferenceRequest(f"input {name!r} is given twice")
        arrays[name], at = _tensor(item, specs[name], binary, at, f"input {name!r}", limits)
    missing = [n for n in specs if n not in arrays]
    if missing:
        raise BadInferenceRequest(f"missing inputs {missing}; the model takes {takes}")
    if at != len(binary):
        raise BadInferenceRequest(f"{len(binary) - at} binary bytes after the last binary input")
    wanted = doc.get("outputs")
    names = [t.name for t in signature.outputs]
    if wanted is None:
        return InferRequest(request_id, arrays, [(n, binary_default) for n in names], captured_at, hop_s)
    if not isinstance(wanted, list) or not all(isinstance(x, dict) for x in wanted):
        raise BadInferenceRequest("outputs must be a list of objects")
    chosen = []
    for item in wanted:
        if item.get("name") not in names:
            raise BadInferenceRequest(f"the model has no output named {item.get('name')!r}; it has {names}")
        what = f"output {item['name']!r}"
        flag = _param(_object(item.get("parameters", {}), f"{what}.parameters"), "binary_data", bool, what)
        chosen.append((item["name"], binary_default if flag is None else flag))
    return InferRequest(request_id, arrays, chosen, captured_at, hop_s)


def _encode_bytes(a: np.ndarray, as_binary: bool, item: dict[str, Any]) -> bytes:
    """A BYTES tensor's binary part (``as_binary``), else its JSON data in ``item``: strings when all are
    UTF-8, else base64 with ``content_type`` saying so."""
    elements = [e if isinstance(e, bytes) else str(e).encode() for e in a.ravel()]
    if as_binary:
        return b"".join(_LENGTH.pack(len(e)) + e for e in elements)
    try:
        item["data"] = [e.decode("utf-8") for e in elements]
    except UnicodeDecodeError:
        item["data"] = [base64.b64encode(e).decode("ascii") for e in elements]
        item["parameters"] = {"content_type": "base64"}
    return b""


def encode_tensors(tensors: Sequence[tuple[str, np.ndarray, bool]]) -> tuple[list[dict[str, Any]], bytes]:
    """Tensor objects for a request's ``inputs`` or a response's ``outputs`` and the binary part: each
    ``(name, array, as binary)`` is JSON ``data`` (flat, row-major) or a ``binary_data_size`` slice."""
    items, blobs = [], []
    for name, a, as_binary in tensors:
        item: dict[str, Any] = {"name": name, "datatype": datatype(a.dtype), "shape": list(a.shape)}
        if a.dtype == BYTES:
            blob = _encode_bytes(a, as_binary, item)
        elif as_binary:
            blob = np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes()  # BOOL: a byte each
        else:
            item["data"] = a.ravel().tolist()
        if as_binary:
            blobs.append(blob)
            item["parameters"] = {"binary_data_size": len(blob)}
        items.append(item)
    return items, b"".join(blobs)


def join_body(doc: Mapping[str, Any], binary: bytes) -> tuple[bytes, int | None]:
    """The body and the value of ``Inference-Header-Content-Length`` (None: plain JSON)."""
    head = json.dumps(doc, separators=(",", ":")).encode()
    return (head + binary, len(head)) if binary else (head, None)


def encode_infer_response(model_name: str, model_version: str, request: InferRequest,
                          outputs: Mapping[str, np.ndarray]) -> tuple[bytes, int | None]:
    items, binary = encode_tensors([(n, outputs[n], b) for n, b in request.outputs])
    doc: dict[str, Any] = {"model_name": model_name, "model_version": model_version, "outputs": items}
    if request.id is not None:
        doc["id"] = request.id
    return join_body(doc, binary)


def decode_outputs(body: bytes, header_length: str | None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A response body (client side): the JSON document and its outputs as arrays, in order."""
    doc, binary = split_body(body, header_length)
    doc = _object(doc, "the response")
    out: dict[str, np.ndarray] = {}
    at = 0
    items = doc.get("outputs", [])
    if not isinstance(items, list):
        raise BadInferenceRequest("outputs must be a list")
    for i, item in enumerate(items):
        what = f"outputs[{i}]"
        item = _object(item, what)
        kind = item.get("datatype")
        if not isinstance(kind, str) or kind not in DATATYPES:
            raise BadInferenceRequest(f"{what} has unknown datatype {kind!r}")
        spec = TensorSpec(str(item.get("name")), DATATYPES[kind].name, _shape(item, what), 0)
        out[spec.name], at = _tensor(item, spec, binary, at, what)
    return doc, out
