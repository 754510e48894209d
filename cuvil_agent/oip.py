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

Stored types (``runtime_wasm.spec.STORED_DTYPES``) travel as Triton carries what it has: bfloat16 is
``BF16`` (JSON numbers, rounded to nearest even; binary: 2-byte bit patterns); int4/int2 are ``INT8`` and
uint4/uint2 ``UINT8`` (their values, range-checked). float8 and float4 have no datatype in the protocol
(nor in Triton): they travel as their ``UINT8`` bit patterns, and a request must say so with
``parameters.element_type`` (``"float8_e4m3fn"``), so bytes meant as UINT8 values are refused by name
rather than run as float8; the model metadata and the response carry the same parameter. A tensor with
aliases (a TFLite tensor's name beside its signature key) answers to each: the metadata lists them as
``aliases``, a request may name either, and an output comes back under the name it was asked by.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ota.errors import BadInferenceRequest, InputOverLimit
from ota.parse import finite_number, parse_decimal
from runtime_wasm.errors import InferenceInputError
from runtime_wasm.schema import INT_MAX
from runtime_wasm.spec import (
    MAX_RANK,
    STORED_DTYPES,
    STORED_RANGES,
    TensorSpec,
    check_index_bound,
    from_storage,
    storage_dtype,
    to_storage,
)

#: the header that splits a body into its JSON part and the binary tensors after it
HEADER_LENGTH = "Inference-Header-Content-Length"
#: the protocol's datatype names and the numpy dtypes they are (BYTES: object arrays of ``bytes``, which
#: only processed inputs and outputs use: texts, encoded images, labels)
DATATYPES: dict[str, np.dtype] = {name: np.dtype(dt) for name, dt in (
    ("BOOL", "bool"), ("UINT8", "uint8"), ("UINT16", "uint16"), ("UINT32", "uint32"), ("UINT64", "uint64"),
    ("INT8", "int8"), ("INT16", "int16"), ("INT32", "int32"), ("INT64", "int64"), ("FP16", "float16"),
    ("FP32", "float32"), ("FP64", "float64"), ("BYTES", "object"))}
BYTES = np.dtype(object)
#: bfloat16, as Triton names it (the protocol's one stored type with a datatype of its own)
BF16 = "BF16"
#: stored types sent as their bit patterns, declared by ``parameters.element_type``: the float8 formats and
#: float4 (Triton has no datatype for them either; a client's UINT8 values must not run as float8 unnoticed)
_BIT_PATTERNS = frozenset(d for d in STORED_DTYPES if d != "bfloat16" and d not in STORED_RANGES)
#: what a stored type's bytes may hold: the small integers' values, float4's 16 bit patterns (the rest of
#: the byte is refused, never wrapped or masked)
_RANGES = {**STORED_RANGES, "float4_e2m1fn": (0, 15)}
_LENGTH = struct.Struct("<I")
_NAMES = {dt: name for name, dt in DATATYPES.items()}


def datatype(dtype: Any) -> str:
    """The protocol's name for a numpy dtype or a spec's dtype (``float32`` -> ``FP32``; ``bfloat16`` ->
    ``BF16``, another stored type its storage's: ``int4`` -> ``INT8``, ``float8_e4m3fn`` -> ``UINT8``)."""
    try:
        name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
        return BF16 if name == "bfloat16" else _NAMES[storage_dtype(name)]
    except (KeyError, TypeError, ValueError):
        raise BadInferenceRequest(f"dtype {dtype!r} has no Open Inference Protocol datatype") from None


def _declared(dtype: str) -> dict[str, Any]:
    """The parameters that tell a stored type from its storage's datatype (none for the others)."""
    return {"element_type": dtype} if dtype in STORED_DTYPES and dtype != "bfloat16" else {}


def _expected(t: TensorSpec) -> str:
    """How ``t`` is sent, for messages."""
    want = datatype(t.dtype)
    if t.dtype in _BIT_PATTERNS:
        return (f"{want} bit patterns of {t.dtype} with parameters.element_type {t.dtype!r} (the protocol "
                "has no datatype for it)")
    return f"{want} ({t.dtype} values)" if _declared(t.dtype) else want


def tensor_metadata(t: TensorSpec) -> dict[str, Any]:
    """A tensor as the model metadata lists it, with its ``aliases`` (names a request may use too) and, for
    a stored type sent as its storage, the ``parameters`` a request carries for it."""
    meta: dict[str, Any] = {"name": t.name, "datatype": datatype(t.dtype), "shape": list(t.shape)}
    if t.aliases:
        meta["aliases"] = list(t.aliases)
    if _declared(t.dtype):
        meta["parameters"] = _declared(t.dtype)
    return meta


def _by_name(specs: Sequence[TensorSpec]) -> dict[str, TensorSpec]:
    """Each tensor under its name and under each of its aliases."""
    return {n: t for t in specs for n in (t.name, *t.aliases)}


def _listed(specs: Sequence[TensorSpec]) -> str:
    return "[" + ", ".join(t.known_as for t in specs) + "]"


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
    #: the spec of each output by the name it was asked by (an alias: its tensor, returned under the alias)
    output_specs: Mapping[str, TensorSpec] = field(default_factory=dict)


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


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 as bfloat16 bit patterns, rounded to nearest even as ml_dtypes and torch round (no ml_dtypes
    needed on a device); a NaN stays a quiet NaN of its sign."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return np.where(np.isnan(a), (bits >> 16) | 0x40, rounded).astype(np.uint16)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns as the float32 numbers they are (exactly)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _from_json(data: Any, t: TensorSpec, what: str) -> np.ndarray:
    """Nested or flat row-major ``data`` as ``t``'s storage: numbers of the right kind, in range, and as many
    as the shape holds (JSON integers are fine for floats, floats are not fine for integers); bfloat16's
    numbers are rounded to its bit patterns."""
    want = np.dtype(np.float32) if t.dtype == "bfloat16" else storage_dtype(t.dtype)
    try:
        raw = np.array(data)
    except (ValueError, TypeError, OverflowError) as exc:  # ragged nesting
        raise BadInferenceRequest(f"{what}.data is not a regular array: {exc}") from None
    kinds = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}[want.kind]
    if raw.dtype.kind not in kinds and raw.size:
        raise BadInferenceRequest(f"{what}.data must hold {datatype(t.dtype)} values, got {raw.dtype.kind!r} "
                                  "(numbers or booleans as the datatype says)")
    if want.kind in "iu" and raw.size and (raw.min() < np.iinfo(want).min or raw.max() > np.iinfo(want).max):
        raise BadInferenceRequest(f"{what}.data has values outside {datatype(want)}'s range")
    if raw.size != math.prod(t.shape):
        raise BadInferenceRequest(f"{what}.data holds {raw.size} values; shape {list(t.shape)} needs "
                                  f"{math.prod(t.shape)}")
    a = raw.astype(want).reshape(t.shape)
    return _bf16_bits(a) if t.dtype == "bfloat16" else a


def _from_binary(blob: memoryview, t: TensorSpec) -> np.ndarray:
    want = storage_dtype(t.dtype)
    if want.kind == "b":  # one byte per element; any non-zero byte is true
        return (np.frombuffer(blob, np.uint8) != 0).reshape(t.shape)
    return np.frombuffer(blob, want.newbyteorder("<")).astype(want).reshape(t.shape)


#: the widest numpy item a tensor here can have (complex128), which bounds any shape's extent
_WIDEST_ITEM = 16


def _shape(item: Mapping[str, Any], what: str) -> tuple[int, ...]:
    shape = item.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_RANK or any(
            isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise BadInferenceRequest(f"{what}.shape must be a list of at most {MAX_RANK} non-negative integers")
    # numpy sizes even an empty array by its other axes, times its item size
    if math.prod(d for d in shape if d) > INT_MAX // _WIDEST_ITEM:
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
        raise BadInferenceRequest(f"{what} is {_expected(t)}, got datatype {item.get('datatype')!r}")
    shape = _shape(item, what)
    if len(shape) != len(t.shape) or any(d != s for d, s in zip(shape, t.shape) if s != -1):
        raise BadInferenceRequest(f"{what} must have shape {list(t.shape)}, got {shape}")
    params = _object(item.get("parameters", {}), f"{what}.parameters")
    if want == "BYTES":
        return _bytes_tensor(item, params, shape, binary, at, limits, what)
    declared = _param(params, "element_type", str, what)
    if declared != t.dtype and (declared is not None or t.dtype in _BIT_PATTERNS):
        raise BadInferenceRequest(f"{what} is {_expected(t)}, got parameters.element_type {declared!r}")
    size = _binary_size(params, what)
    if size is None:
        if "data" not in item:
            raise BadInferenceRequest(f"{what} has neither data nor parameters.binary_data_size")
        return _checked(_from_json(item["data"], t, what), t, what), at
    if "data" in item:
        raise BadInferenceRequest(f"{what} has both data and parameters.binary_data_size")
    want_bytes = math.prod(t.shape) * storage_dtype(t.dtype).itemsize  # BOOL: one byte each
    if size != want_bytes:
        raise BadInferenceRequest(f"{what}: binary_data_size {size} != {want_bytes} bytes for its shape")
    if at + size > len(binary):
        raise BadInferenceRequest(f"{what}: the body ends before its {size} binary bytes")
    return _checked(_from_binary(binary[at:at + size], t), t, what), at + size


def _checked(a: np.ndarray, t: TensorSpec, what: str) -> np.ndarray:
    """Values past a stored type's range (``_RANGES``) and ids past their table are refused here already,
    before the request queues (a lookup would clamp the id; a byte past float4's 4 bits is no float4)."""
    lo, hi = _RANGES.get(t.dtype, (0, 0))
    if t.dtype in _RANGES and a.size and (a.min() < lo or a.max() > hi):
        raise BadInferenceRequest(f"{what} is {t.dtype}: values must be in [{lo}, {hi}], got "
                                  f"{a.min()}..{a.max()}")
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
    signature = next((sig for sig in signatures if isinstance(first, str) and first in _by_name(sig.inputs)),
                     signatures[0])
    specs = _by_name(signature.inputs)
    takes = " or ".join(_listed(sig.inputs) for sig in signatures)
    arrays: dict[str, np.ndarray] = {}  # by each input's own name, whichever name the request used
    at = 0
    for item in items:
        name = item.get("name")
        if not isinstance(name, str) or name not in specs:
            raise BadInferenceRequest(f"the model has no input named {name!r}; it takes {takes}")
        t = specs[name]
        if t.name in arrays:
            raise BadInferenceRequest(f"input {t.known_as} is given twice")
        arrays[t.name], at = _tensor(item, t, binary, at, f"input {name!r}", limits)
    missing = [t for t in signature.inputs if t.name not in arrays]
    if missing:
        raise BadInferenceRequest(f"missing inputs {_listed(missing)}; the model takes {takes}")
    if at != len(binary):
        raise BadInferenceRequest(f"{len(binary) - at} binary bytes after the last binary input")
    wanted = doc.get("outputs")
    outputs = _by_name(signature.outputs)
    if wanted is None:
        return InferRequest(request_id, arrays, [(t.name, binary_default) for t in signature.outputs],
                            captured_at, hop_s, {t.name: t for t in signature.outputs})
    if not isinstance(wanted, list) or not all(isinstance(x, dict) for x in wanted):
        raise BadInferenceRequest("outputs must be a list of objects")
    chosen = []
    for item in wanted:
        name = item.get("name")
        if not isinstance(name, str) or name not in outputs:
            raise BadInferenceRequest(f"the model has no output named {name!r}; it has "
                                      f"{_listed(signature.outputs)}")
        what = f"output {name!r}"
        flag = _param(_object(item.get("parameters", {}), f"{what}.parameters"), "binary_data", bool, what)
        chosen.append((name, binary_default if flag is None else flag))
    return InferRequest(request_id, arrays, chosen, captured_at, hop_s, {n: outputs[n] for n, _ in chosen})


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


def encode_tensors(tensors: Sequence[tuple[str, np.ndarray, bool]], dtypes: Sequence[str] = ()
                   ) -> tuple[list[dict[str, Any]], bytes]:
    """Tensor objects for a request's ``inputs`` or a response's ``outputs`` and the binary part: each
    ``(name, array, as binary)`` is JSON ``data`` (flat, row-major) or a ``binary_data_size`` slice.
    ``dtypes`` (a model's output specs) types a stored type's storage array, which a device without
    ml_dtypes gets; any other array (an ml_dtypes one too) goes by its own dtype."""
    items, blobs = [], []
    for i, (name, a, as_binary) in enumerate(tensors):
        dtype = dtypes[i] if i < len(dtypes) and dtypes[i] in STORED_DTYPES else a.dtype.name
        if dtype in STORED_DTYPES:
            a = to_storage(TensorSpec(name, dtype, a.shape, 0), a)
        item: dict[str, Any] = {"name": name, "datatype": datatype(dtype), "shape": list(a.shape)}
        params = _declared(dtype)
        if a.dtype == BYTES:
            blob = _encode_bytes(a, as_binary, item)
        elif as_binary:
            blob = np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes()  # BOOL: a byte each
        else:
            item["data"] = (_bf16_values(a) if dtype == "bfloat16" else a).ravel().tolist()
        if as_binary:
            blobs.append(blob)
            params["binary_data_size"] = len(blob)
        if params:
            item["parameters"] = params
        items.append(item)
    return items, b"".join(blobs)


def join_body(doc: Mapping[str, Any], binary: bytes) -> tuple[bytes, int | None]:
    """The body and the value of ``Inference-Header-Content-Length`` (None: plain JSON)."""
    head = json.dumps(doc, separators=(",", ":")).encode()
    return (head + binary, len(head)) if binary else (head, None)


def encode_infer_response(model_name: str, model_version: str, request: InferRequest,
                          outputs: Mapping[str, np.ndarray]) -> tuple[bytes, int | None]:
    """The response: each output under the name it was asked by (an alias reads its tensor), typed by its
    spec."""
    specs = [request.output_specs.get(n) for n, _ in request.outputs]
    tensors = [(n, outputs[t.name if t else n], b) for t, (n, b) in zip(specs, request.outputs)]
    items, binary = encode_tensors(tensors, [t.dtype if t else "" for t in specs])
    doc: dict[str, Any] = {"model_name": model_name, "model_version": model_version, "outputs": items}
    if request.id is not None:
        doc["id"] = request.id
    return join_body(doc, binary)


def _reply_dtype(item: Mapping[str, Any], what: str) -> str:
    """The element type a reply's tensor declares: its datatype's, or the stored type its
    ``parameters.element_type`` names where that travels as this datatype (``_tensor`` refuses others)."""
    kind = item.get("datatype")
    if kind == BF16:
        return "bfloat16"
    if not isinstance(kind, str) or kind not in DATATYPES:
        raise BadInferenceRequest(f"{what} has unknown datatype {kind!r}")
    declared = _object(item.get("parameters", {}), f"{what}.parameters").get("element_type")
    if isinstance(declared, str) and declared in STORED_DTYPES and datatype(declared) == kind:
        return declared
    return DATATYPES[kind].name


def decode_outputs(body: bytes, header_length: str | None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A response body (client side): the JSON document and its outputs as arrays, in order (a stored type
    as an ml_dtypes array where ml_dtypes is installed, else its storage)."""
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
        spec = TensorSpec(str(item.get("name")), _reply_dtype(item, what), _shape(item, what), 0)
        a, at = _tensor(item, spec, binary, at, what)
        out[spec.name] = from_storage(spec.dtype, a)
    return doc, out
