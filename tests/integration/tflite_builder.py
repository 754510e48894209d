"""Writes small .tflite flatbuffers with the ``tflite`` package's builder API (no TensorFlow), so tests
can make the models they check against LiteRT."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import tflite
from tflite.BuiltinOptions import BuiltinOptions
from tflite.utils import BUILTIN_OPCODE2NAME

CODES = {name: code for code, name in BUILTIN_OPCODE2NAME.items()}
TYPES = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int8": 9}


#: (scales, zero points, quantized dimension)
Quant = tuple[list[float], list[int], int]


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int
    quant: Quant | None = None


@dataclass
class _Op:
    code: str
    custom: str | None
    inputs: list[int]
    outputs: list[int]
    options: tuple[str, dict[str, Any]] | None


@dataclass
class TfliteBuilder:
    """Tensors and operators of one subgraph; ``build`` returns the model bytes (signature
    ``serving_default`` naming the inputs and outputs)."""

    tensors: list[_Tensor] = field(default_factory=list)
    buffers: list[bytes] = field(default_factory=lambda: [b""])  # buffer 0: the empty sentinel
    ops: list[_Op] = field(default_factory=list)

    def tensor(self, name: str, shape: tuple[int, ...] | list[int], dtype: str = "float32",
               quant: Quant | None = None) -> int:
        self.tensors.append(_Tensor(name, tuple(shape), dtype, 0, quant))
        return len(self.tensors) - 1

    def const(self, name: str, array: np.ndarray, quant: Quant | None = None) -> int:
        array = np.ascontiguousarray(array)
        self.buffers.append(array.tobytes())
        self.tensors.append(_Tensor(name, array.shape, str(array.dtype), len(self.buffers) - 1, quant))
        return len(self.tensors) - 1

    def op(self, code: str, inputs: list[int], outputs: list[int],
           options: tuple[str, dict[str, Any]] | None = None, custom: str | None = None) -> None:
        """``options``: (options table name, {field: value}), e.g.
        ("AddOptions", {"FusedActivationFunction": 1})."""
        self.ops.append(_Op(code, custom, inputs, outputs, options))

    def build(self, inputs: list[int], outputs: list[int]) -> bytes:
        b = flatbuffers.Builder(1024)
        buffers = []
        for data in self.buffers:
            vec = b.CreateNumpyVector(np.frombuffer(data, np.uint8)) if data else None
            tflite.BufferStart(b)
            if vec is not None:
                tflite.BufferAddData(b, vec)
            buffers.append(tflite.BufferEnd(b))
        tensors = []
        for t in self.tensors:
            name, shape = b.CreateString(t.name), b.CreateNumpyVector(np.asarray(t.shape, np.int32))
            quant = _quant(b, t.quant) if t.quant else None
            tflite.TensorStart(b)
            if quant is not None:
                tflite.TensorAddQuantization(b, quant)
            tflite.TensorAddShape(b, shape)
            tflite.TensorAddType(b, TYPES[t.dtype])
            tflite.TensorAddBuffer(b, t.buffer)
            tflite.TensorAddName(b, name)
            tensors.append(tflite.TensorEnd(b))
        kinds = list(dict.fromkeys((o.code, o.custom) for o in self.ops))
        codes = []
        for code, custom in kinds:
            cname = b.CreateString(custom) if custom else None
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddBuiltinCode(b, CODES[code])
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(CODES[code], 127))
            tflite.OperatorCodeAddVersion(b, 1)
            if cname is not None:
                tflite.OperatorCodeAddCustomCode(b, cname)
            codes.append(tflite.OperatorCodeEnd(b))
        ops = []
        for o in self.ops:
            opts = _options(b, *o.options) if o.options else None
            ins = b.CreateNumpyVector(np.asarray(o.inputs, np.int32))
            outs = b.CreateNumpyVector(np.asarray(o.outputs, np.int32))
            tflite.OperatorStart(b)
            tflite.OperatorAddOpcodeIndex(b, kinds.index((o.code, o.custom)))
            tflite.OperatorAddInputs(b, ins)
            tflite.OperatorAddOutputs(b, outs)
            if opts is not None:
                tflite.OperatorAddBuiltinOptionsType(b, getattr(BuiltinOptions, o.options[0]))
                tflite.OperatorAddBuiltinOptions(b, opts)
            ops.append(tflite.OperatorEnd(b))
        sg_in, sg_out = (b.CreateNumpyVector(np.asarray(x, np.int32)) for x in (inputs, outputs))
        tvec, ovec = _table_vector(b, tensors), _table_vector(b, ops)
        sg_name = b.CreateString("main")
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tvec)
        tflite.SubGraphAddOperators(b, ovec)
        tflite.SubGraphAddInputs(b, sg_in)
        tflite.SubGraphAddOutputs(b, sg_out)
        tflite.SubGraphAddName(b, sg_name)
        sg = tflite.SubGraphEnd(b)
        sig = _signature(b, [(self.tensors[i].name, i) for i in inputs],
                         [(self.tensors[i].name, i) for i in outputs])
        code_vec, sg_vec, buf_vec, sig_vec = (_table_vector(b, x) for x in (codes, [sg], buffers, [sig]))
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


def _quant(b: flatbuffers.Builder, quant: Quant) -> int:
    scales, zero_points, axis = quant
    s = b.CreateNumpyVector(np.asarray(scales, np.float32))
    z = b.CreateNumpyVector(np.asarray(zero_points, np.int64))
    tflite.QuantizationParametersStart(b)
    tflite.QuantizationParametersAddScale(b, s)
    tflite.QuantizationParametersAddZeroPoint(b, z)
    tflite.QuantizationParametersAddQuantizedDimension(b, axis)
    return tflite.QuantizationParametersEnd(b)


def _table_vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _options(b: flatbuffers.Builder, table: str, fields: dict[str, Any]) -> int:
    """One builtin options table; list values become int32 vectors (SqueezeDims, NewShape)."""
    vectors = {k: b.CreateNumpyVector(np.asarray(v, np.int32)) for k, v in fields.items()
               if isinstance(v, (list, tuple))}
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
