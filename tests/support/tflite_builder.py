"""Writes small .tflite flatbuffers with the ``tflite`` package's builder API (no TensorFlow), so tests
can make the models they check against LiteRT."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import tflite
from tflite.BuiltinOptions import BuiltinOptions
from tflite.BuiltinOptions2 import BuiltinOptions2
from tflite.utils import BUILTIN_OPCODE2NAME

CODES = {name: code for code, name in BUILTIN_OPCODE2NAME.items()}
#: the opcode version LiteRT registers an op from, where it is not 1
VERSIONS = {"BROADCAST_TO": 2}
TYPES = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int8": 9, "resource": 13}


#: (scales, zero points, quantized dimension)
Quant = tuple[list[float], list[int], int]


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int
    quant: Quant | None = None
    csr: tuple[np.ndarray, np.ndarray] | None = None  # sparse: (segments, indices) of the last dim
    variable: bool = False  # a state the interpreter keeps between invokes (an LSTM's h and c)


@dataclass
class _Op:
    code: str
    custom: str | None
    inputs: list[int]
    outputs: list[int]
    options: tuple[str, dict[str, Any]] | None
    custom_options: bytes = b""


@dataclass
class TfliteBuilder:
    """Tensors and operators of one subgraph; ``build`` returns the model bytes (signature
    ``serving_default`` naming the inputs and outputs)."""

    tensors: list[_Tensor] = field(default_factory=list)
    buffers: list[bytes] = field(default_factory=lambda: [b""])  # buffer 0: the empty sentinel
    ops: list[_Op] = field(default_factory=list)

    def tensor(self, name: str, shape: tuple[int, ...] | list[int], dtype: str = "float32",
               quant: Quant | None = None, variable: bool = False) -> int:
        self.tensors.append(_Tensor(name, tuple(shape), dtype, 0, quant, variable=variable))
        return len(self.tensors) - 1

    def const(self, name: str, array: np.ndarray, quant: Quant | None = None) -> int:
        array = np.ascontiguousarray(array)
        self.buffers.append(array.tobytes())
        self.tensors.append(_Tensor(name, array.shape, str(array.dtype), len(self.buffers) - 1, quant))
        return len(self.tensors) - 1

    def sparse_const(self, name: str, array: np.ndarray) -> int:
        """A constant stored sparse, as pruned models ship weights: leading dims dense, the last CSR
        (its non-zeros in row-major order); LiteRT's DENSIFY expands it."""
        array = np.ascontiguousarray(array)
        rows = array.reshape(-1, array.shape[-1])
        nz = [np.flatnonzero(r) for r in rows]
        segments = np.concatenate([[0], np.cumsum([len(i) for i in nz])]).astype(np.int32)
        indices = np.concatenate(nz).astype(np.int32)
        self.buffers.append(rows[rows != 0].tobytes())
        self.tensors.append(_Tensor(name, array.shape, str(array.dtype), len(self.buffers) - 1,
                                    csr=(segments, indices)))
        return len(self.tensors) - 1

    def op(self, code: str, inputs: list[int], outputs: list[int],
           options: tuple[str, dict[str, Any]] | None = None, custom: str | None = None,
           custom_options: bytes = b"") -> None:
        """``options``: (options table name, {field: value}), e.g.
        ("AddOptions", {"FusedActivationFunction": 1}); ``custom_options``: a custom op's raw bytes."""
        self.ops.append(_Op(code, custom, inputs, outputs, options, custom_options))

    def subgraph(self) -> TfliteBuilder:
        """Another subgraph of the same model (e.g. a CALL_ONCE initializer): its own tensors and
        operators, the model's buffers."""
        return TfliteBuilder(buffers=self.buffers)

    def build(self, inputs: list[int], outputs: list[int],
              subgraphs: tuple[tuple[TfliteBuilder, list[int], list[int]], ...] = (),
              signature_names: dict[int, str] | None = None) -> bytes:
        """``subgraphs``: (builder from ``subgraph()``, inputs, outputs) of subgraphs 1, 2, ...;
        ``signature_names``: tensor -> its name in the signature, where not the tensor's own (a converter
        names inputs ``serving_default_x:0`` and the signature ``x``)."""
        b = flatbuffers.Builder(1024)
        buffers = []
        for data in self.buffers:
            vec = b.CreateNumpyVector(np.frombuffer(data, np.uint8)) if data else None
            tflite.BufferStart(b)
            if vec is not None:
                tflite.BufferAddData(b, vec)
            buffers.append(tflite.BufferEnd(b))
        graphs = [(self, inputs, outputs, "main"), *((g, i, o, f"sub{k}") for k, (g, i, o) in
                                                      enumerate(subgraphs, 1))]
        kinds = list(dict.fromkeys((o.code, o.custom) for g, *_ in graphs for o in g.ops))
        codes = []
        for code, custom in kinds:
            cname = b.CreateString(custom) if custom else None
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddBuiltinCode(b, CODES[code])
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(CODES[code], 127))
            tflite.OperatorCodeAddVersion(b, VERSIONS.get(code, 1))
            if cname is not None:
                tflite.OperatorCodeAddCustomCode(b, cname)
            codes.append(tflite.OperatorCodeEnd(b))
        sgs = [g._subgraph(b, i, o, name, kinds) for g, i, o, name in graphs]
        names = {i: self.tensors[i].name for i in [*inputs, *outputs]} | (signature_names or {})
        sig = _signature(b, [(names[i], i) for i in inputs], [(names[i], i) for i in outputs])
        code_vec, sg_vec, buf_vec, sig_vec = (_table_vector(b, x) for x in (codes, sgs, buffers, [sig]))
        desc = b.CreateString("cuvil-edge test model")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, code_vec)
        tflite.ModelAddSubgraphs(b, sg_vec)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, buf_vec)
        tflite.ModelAddSignatureDefs(b, sig_vec)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    def _subgraph(self, b: flatbuffers.Builder, inputs: list[int], outputs: list[int], name: str,
                  kinds: list[tuple[str, str | None]]) -> int:
        tensors = []
        for t in self.tensors:
            tname, shape = b.CreateString(t.name), b.CreateNumpyVector(np.asarray(t.shape, np.int32))
            quant = _quant(b, t.quant) if t.quant else None
            sparsity = _sparsity(b, t.shape, *t.csr) if t.csr else None
            tflite.TensorStart(b)
            if quant is not None:
                tflite.TensorAddQuantization(b, quant)
            if sparsity is not None:
                tflite.TensorAddSparsity(b, sparsity)
            tflite.TensorAddShape(b, shape)
            tflite.TensorAddType(b, TYPES[t.dtype])
            tflite.TensorAddBuffer(b, t.buffer)
            tflite.TensorAddName(b, tname)
            if t.variable:
                tflite.TensorAddIsVariable(b, True)
            tensors.append(tflite.TensorEnd(b))
        ops = []
        for o in self.ops:
            opts = _options(b, *o.options) if o.options else None
            ins = b.CreateNumpyVector(np.asarray(o.inputs, np.int32))
            outs = b.CreateNumpyVector(np.asarray(o.outputs, np.int32))
            raw = b.CreateNumpyVector(np.frombuffer(o.custom_options, np.uint8)) if o.custom_options else None
            tflite.OperatorStart(b)
            tflite.OperatorAddOpcodeIndex(b, kinds.index((o.code, o.custom)))
            tflite.OperatorAddInputs(b, ins)
            tflite.OperatorAddOutputs(b, outs)
            if opts is not None and hasattr(BuiltinOptions, o.options[0]):
                tflite.OperatorAddBuiltinOptionsType(b, getattr(BuiltinOptions, o.options[0]))
                tflite.OperatorAddBuiltinOptions(b, opts)
            elif opts is not None:  # the StableHLO ops' tables (and DILATE's, REDUCE_WINDOW's)
                tflite.OperatorAddBuiltinOptions2Type(b, getattr(BuiltinOptions2, o.options[0]))
                tflite.OperatorAddBuiltinOptions2(b, opts)
            if raw is not None:
                tflite.OperatorAddCustomOptions(b, raw)
            ops.append(tflite.OperatorEnd(b))
        sg_in, sg_out = (b.CreateNumpyVector(np.asarray(x, np.int32)) for x in (inputs, outputs))
        tvec, ovec = _table_vector(b, tensors), _table_vector(b, ops)
        sg_name = b.CreateString(name)
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tvec)
        tflite.SubGraphAddOperators(b, ovec)
        tflite.SubGraphAddInputs(b, sg_in)
        tflite.SubGraphAddOutputs(b, sg_out)
        tflite.SubGraphAddName(b, sg_name)
        return tflite.SubGraphEnd(b)


def _quant(b: flatbuffers.Builder, quant: Quant) -> int:
    scales, zero_points, axis = quant
    s = b.CreateNumpyVector(np.asarray(scales, np.float32))
    z = b.CreateNumpyVector(np.asarray(zero_points, np.int64))
    tflite.QuantizationParametersStart(b)
    tflite.QuantizationParametersAddScale(b, s)
    tflite.QuantizationParametersAddZeroPoint(b, z)
    tflite.QuantizationParametersAddQuantizedDimension(b, axis)
    return tflite.QuantizationParametersEnd(b)


def _sparsity(b: flatbuffers.Builder, shape: tuple[int, ...], segments: np.ndarray,
              indices: np.ndarray) -> int:
    """Traversal in order, every dim DENSE but the last, which is CSR (int32 segments and indices)."""
    vectors = []
    for arr in (segments, indices):
        values = b.CreateNumpyVector(arr)
        tflite.Int32VectorStart(b)
        tflite.Int32VectorAddValues(b, values)
        vectors.append(tflite.Int32VectorEnd(b))
    dims = []
    for d, size in enumerate(shape):
        tflite.DimensionMetadataStart(b)
        if d < len(shape) - 1:
            tflite.DimensionMetadataAddFormat(b, 0)
            tflite.DimensionMetadataAddDenseSize(b, size)
        else:
            tflite.DimensionMetadataAddFormat(b, 1)
            tflite.DimensionMetadataAddArraySegmentsType(b, 1)  # SparseIndexVector.Int32Vector
            tflite.DimensionMetadataAddArraySegments(b, vectors[0])
            tflite.DimensionMetadataAddArrayIndicesType(b, 1)
            tflite.DimensionMetadataAddArrayIndices(b, vectors[1])
        dims.append(tflite.DimensionMetadataEnd(b))
    order, dim_vec = b.CreateNumpyVector(np.arange(len(shape), dtype=np.int32)), _table_vector(b, dims)
    tflite.SparsityParametersStart(b)
    tflite.SparsityParametersAddTraversalOrder(b, order)
    tflite.SparsityParametersAddDimMetadata(b, dim_vec)
    return tflite.SparsityParametersEnd(b)


def _table_vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _options(b: flatbuffers.Builder, table: str, fields: dict[str, Any]) -> int:
    """One builtin options table; list values become int32 vectors (SqueezeDims, NewShape) or, holding a
    float, float32 ones (BucketizeOptions' Boundaries), numpy arrays vectors of their own type (the
    StableHLO tables' int64 ones), strings strings (VarHandleOptions' SharedName)."""
    vectors = {k: b.CreateString(v) if isinstance(v, str) else b.CreateNumpyVector(
        v if isinstance(v, np.ndarray) else
        np.asarray(v, np.float32 if any(isinstance(x, float) for x in v) else np.int32))
        for k, v in fields.items() if isinstance(v, (list, tuple, str, np.ndarray))}
    getattr(tflite, f"{table}Start")(b)
    for k, v in fields.items():
        getattr(tflite, f"{table}Add{k}")(b, vectors.get(k, v))
    return getattr(tflite, f"{table}End")(b)


def _signature(b: flatbuffers.Builder, inputs: list[tuple[str, int]], outputs: list[tuple[str, int]]) -> int:
    maps = []
    for group in (inputs, outputs):
        offs = []
        for name, idx in group:
            s = b.CreateString(name)
            tflite.TensorMapStart(b)
            tflite.TensorMapAddName(b, s)
            tflite.TensorMapAddTensorIndex(b, idx)
            offs.append(tflite.TensorMapEnd(b))
        maps.append(_table_vector(b, offs))
    key = b.CreateString("serving_default")
    tflite.SignatureDefStart(b)
    tflite.SignatureDefAddInputs(b, maps[0])
    tflite.SignatureDefAddOutputs(b, maps[1])
    tflite.SignatureDefAddSignatureKey(b, key)
    tflite.SignatureDefAddSubgraphIndex(b, 0)
    return tflite.SignatureDefEnd(b)
