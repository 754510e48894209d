"""The TFLite flatbuffer read eagerly into plain dataclasses, so a malformed file fails here, as one
``ModelFormatError``, and the converters never touch flatbuffer tables (whose reads are lazy)."""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import CuvilError, ModelFormatError
from ...ir.limits import check_shape
from .. import TFLITE_MAGIC
from ._sparse import densify

#: TFLite TensorType -> numpy dtype (the types the importer can hold)
DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8",
          10: "float64"}
#: TensorType RESOURCE: a resource variable's handle (VAR_HANDLE's output), no data of its own
RESOURCE = 13


@dataclass(frozen=True)
class Quantization:
    """Affine quantization: ``real = scale * (q - zero_point)`` along ``axis`` (per-channel) or whole."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int


@dataclass
class TflTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None  # a constant's value (from its buffer)
    quant: Quantization | None
    is_variable: bool


@dataclass
class TflOperator:
    index: int
    op: str  # builtin name (``CONV_2D``) or ``CUSTOM``
    builtin_code: int
    custom_code: str | None
    inputs: list[int]  # tensor indices, -1 for an omitted optional input
    outputs: list[int]
    options: dict[str, Any]
    custom_options: bytes


@dataclass
class TflSubgraph:
    name: str
    tensors: list[TflTensor]
    operators: list[TflOperator]
    inputs: list[int]
    outputs: list[int]


@dataclass
class SignatureDef:
    key: str
    subgraph: int
    inputs: dict[str, int]  # signature name -> tensor index
    outputs: dict[str, int]


@dataclass
class TflModel:
    version: int
    description: str
    subgraphs: list[TflSubgraph]
    signatures: list[SignatureDef] = field(default_factory=list)
    metadata: dict[str, bytes] = field(default_factory=dict)


def read_tflite(source: str | os.PathLike[str] | bytes) -> TflModel:
    """Parse a .tflite file or its bytes; anything that is not a well-formed TFLite model is a
    ``ModelFormatError`` (a missing file stays ``FileNotFoundError``)."""
    data = bytes(source) if isinstance(source, (bytes, bytearray)) else open(os.fspath(source), "rb").read()
    if data[4:8] != TFLITE_MAGIC:
        raise ModelFormatError("not a TFLite model: the flatbuffer identifier 'TFL3' is missing")
    try:
        return _read(data)
    except CuvilError:  # ModelFormatError, or a ShapeError of the import's limits
        raise
    except Exception as exc:  # flatbuffers raise struct.error, IndexError, ... on truncated/corrupt data
        raise ModelFormatError(f"malformed TFLite flatbuffer: {type(exc).__name__}: {exc}") from exc


def _read(data: bytes) -> TflModel:
    import tflite
    from tflite.utils import BUILTIN_OPCODE2NAME

    m = tflite.Model.GetRootAsModel(data, 0)
    buffers = [_buffer(m.Buffers(i), data) for i in range(m.BuffersLength())]
    codes = []
    for i in range(m.OperatorCodesLength()):
        oc = m.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())  # the deprecated int8 field caps at 127
        custom = oc.CustomCode()
        codes.append((code, BUILTIN_OPCODE2NAME.get(code, f"BUILTIN_{code}"),
                      custom.decode() if custom is not None else None))
    subgraphs = [_subgraph(m.Subgraphs(i), buffers, codes) for i in range(m.SubgraphsLength())]
    if not subgraphs:
        raise ModelFormatError("TFLite model has no subgraphs")
    signatures = []
    for i in range(m.SignatureDefsLength()):
        s = m.SignatureDefs(i)
        if not 0 <= s.SubgraphIndex() < len(subgraphs):
            raise ModelFormatError(f"signature {i} names subgraph {s.SubgraphIndex()} of {len(subgraphs)}")
        signatures.append(SignatureDef(
            (s.SignatureKey() or b"").decode(), s.SubgraphIndex(),
            {s.Inputs(j).Name().decode(): s.Inputs(j).TensorIndex() for j in range(s.InputsLength())},
            {s.Outputs(j).Name().decode(): s.Outputs(j).TensorIndex() for j in range(s.OutputsLength())}))
    for sig in signatures:
        n = len(subgraphs[sig.subgraph].tensors)
        if any(not 0 <= x < n for x in [*sig.inputs.values(), *sig.outputs.values()]):
            raise ModelFormatError(f"signature {sig.key!r} names a tensor outside the {n} of its subgraph")
    metadata = {}
    for i in range(m.MetadataLength()):
        md = m.Metadata(i)
        if md.Buffer() < len(buffers):
            metadata[(md.Name() or b"").decode()] = buffers[md.Buffer()]
    return TflModel(m.Version(), (m.Description() or b"").decode(errors="replace"), subgraphs, signatures,
                    metadata)


def _buffer(buf: Any, data: bytes) -> bytes:
    """A buffer's bytes: inline, or (models over 2 GB) at ``offset`` in the file."""
    if buf.Offset() > 1:
        end = buf.Offset() + buf.Size()
        if end > len(data):
            raise ModelFormatError(f"buffer at offset {buf.Offset()} runs past the end of the file")
        return data[buf.Offset():end]
    return b"" if buf.DataIsNone() else buf.DataAsNumpy().tobytes()


def _subgraph(sg: Any, buffers: list[bytes], codes: list[tuple[int, str, str | None]]) -> TflSubgraph:
    tensors = [_tensor(i, sg.Tensors(i), buffers) for i in range(sg.TensorsLength())]
    ops = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        if op.OpcodeIndex() >= len(codes):
            raise ModelFormatError(f"operator {i} names opcode {op.OpcodeIndex()} of {len(codes)}")
        code, name, custom = codes[op.OpcodeIndex()]
        ins = [] if op.InputsIsNone() else [int(x) for x in op.InputsAsNumpy()]
        outs = [] if op.OutputsIsNone() else [int(x) for x in op.OutputsAsNumpy()]
        if any(not -1 <= x < len(tensors) for x in ins + outs):  # -1: an omitted optional input
            raise ModelFormatError(f"operator {i} ({name}) names a tensor outside the {len(tensors)} "
                                   "there are")
        ops.append(TflOperator(i, name, code, custom, ins, outs, _options(op),
                               b"" if op.CustomOptionsIsNone() else op.CustomOptionsAsNumpy().tobytes()))
    io = [[] if none else [int(x) for x in arr()] for none, arr in
          ((sg.InputsIsNone(), sg.InputsAsNumpy), (sg.OutputsIsNone(), sg.OutputsAsNumpy))]
    if any(not 0 <= x < len(tensors) for x in io[0] + io[1]):
        raise ModelFormatError(f"subgraph inputs {io[0]} or outputs {io[1]} name a tensor outside the "
                               f"{len(tensors)} there are")
    return TflSubgraph((sg.Name() or b"").decode(), tensors, ops, io[0], io[1])


def _tensor(index: int, t: Any, buffers: list[bytes]) -> TflTensor:
    name = (t.Name() or b"").decode(errors="replace") or f"tensor_{index}"
    dtype = "resource" if t.Type() == RESOURCE else DTYPES.get(t.Type(), f"tflite_type_{t.Type()}")
    shape = () if t.ShapeIsNone() else tuple(int(d) for d in t.ShapeAsNumpy())
    if any(d < -1 for d in shape):  # -1: a dynamic dim
        raise ModelFormatError(f"tensor {name!r} has shape {shape}")
    check_shape([max(d, 1) for d in shape], f"tensor {name!r}")
    raw = buffers[t.Buffer()] if 0 < t.Buffer() < len(buffers) else b""
    data = None
    if not raw and 0 < t.Buffer() < len(buffers) and 0 in shape and dtype in DTYPES.values():
        data = np.zeros(shape, dtype)  # an empty constant (RESHAPE to a scalar: shape [])
    if raw:
        if dtype not in DTYPES.values():
            raise ModelFormatError(f"tensor {name!r} holds data of unsupported type {dtype}")
        data = np.frombuffer(raw, dtype=dtype)
        if t.Sparsity() is not None:  # pruned weights: made dense here, as LiteRT's DEQUANTIZE does
            data = densify(data, shape, t.Sparsity(), name)
        if data.size != int(np.prod(shape, dtype=np.int64)):
            raise ModelFormatError(f"tensor {name!r}: buffer holds {data.size} values for shape {shape}")
        data = data.reshape(shape)
    q = t.Quantization()
    quant = None
    if q is not None and not q.ScaleIsNone() and q.ScaleLength() > 0:
        zp = (np.zeros(q.ScaleLength(), np.int64) if q.ZeroPointIsNone()
              else q.ZeroPointAsNumpy().astype(np.int64))
        quant = _quantization(name, shape, dtype, q.ScaleAsNumpy().astype(np.float32), zp,
                              int(q.QuantizedDimension()))
    return TflTensor(index, name, shape, dtype, data, quant, bool(t.IsVariable()))


#: the values a zero point may hold in a tensor of each quantized type
_ZERO_POINT_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


def _quantization(name: str, shape: tuple[int, ...], dtype: str, scale: np.ndarray, zp: np.ndarray,
                  axis: int) -> Quantization:
    """A tensor's quantization, checked as the importer reads it: one scale, or one per channel of
    ``axis``; as many zero points (or one); finite positive scales; zero points the type can hold."""
    if zp.size not in (1, scale.size):
        raise ModelFormatError(f"tensor {name!r}: {scale.size} scales but {zp.size} zero points")
    if scale.size > 1 and (not 0 <= axis < len(shape) or shape[axis] != scale.size):
        raise ModelFormatError(f"tensor {name!r}: {scale.size} scales along axis {axis} of shape {shape}")
    if not np.isfinite(scale).all():
        raise ModelFormatError(f"tensor {name!r}: scales must be finite")
    lo, hi = _ZERO_POINT_RANGE.get(dtype, (-(2**63), 2**63 - 1))
    if zp.size and (zp.min() < lo or zp.max() > hi):
        raise ModelFormatError(f"tensor {name!r}: zero points outside {dtype}'s [{lo}, {hi}]")
    if zp.size != scale.size:
        zp = np.full(scale.size, zp.reshape(-1)[0], np.int64)
    return Quantization(scale, zp, axis)


@functools.cache
def _options_classes(union: str = "BuiltinOptions") -> dict[int, type]:
    import tflite

    enum = getattr(importlib.import_module(f"tflite.{union}"), union)
    return {v: getattr(tflite, k) for k, v in vars(enum).items()
            if not k.startswith("_") and isinstance(v, int) and v and hasattr(tflite, k)}


def _options(op: Any) -> dict[str, Any]:
    """The builtin options table as a dict of its fields (``Padding`` -> 1, ``SqueezeDims`` -> [...]); the
    StableHLO ops (and DILATE, REDUCE_WINDOW) keep theirs in the second union, ``BuiltinOptions2``."""
    table, cls = op.BuiltinOptions(), _options_classes().get(op.BuiltinOptionsType())
    if table is None or cls is None:
        table, cls = op.BuiltinOptions2(), _options_classes("BuiltinOptions2").get(op.BuiltinOptions2Type())
    if table is None or cls is None:
        return {}
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    out: dict[str, Any] = {}
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if name == "Init" or name.startswith(("_", "GetRootAs")) or name.endswith((
                "Length", "IsNone", "AsNumpy", "BufferHasIdentifier")):  # not InitSubgraphIndex
            continue
        if hasattr(cls, name + "AsNumpy"):
            out[name] = [] if getattr(obj, name + "IsNone")() else getattr(obj, name + "AsNumpy")().tolist()
        elif len(inspect.signature(fn).parameters) == 1:
            out[name] = getattr(obj, name)()
    return out
