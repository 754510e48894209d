"""The TFLite reader and importer as ``CuvilModel.load`` runs them on a ``.tflite`` file's bytes:
``read_tflite`` (the flatbuffer read eagerly into dataclasses: every buffer, tensor, operator and
options table), ``import_tflite`` (every converter with its shape inference and constant folding, the
layout change, the QDQ fusion) and then the IR verifier the build runs first; not the C compiler or the
wasm build.

The contract: any bytes in, a ``Graph`` that passes ``verify`` or a ``CuvilError`` out (a malformed
flatbuffer is a ``ModelFormatError``), within the memory the engine's bound allows
(``cuvil_edge.ir.limits``).

Input: the model bytes. The mutator finds the model's integer and float fields by walking its
flatbuffer tables with the ``tflite`` package's generated accessors (each field's vtable slot and width
read from them): tensor shapes, types and buffer indices, operator inputs, outputs and opcode indices,
every builtin options field, subgraph inputs and outputs, opcodes, signature tensor indices, vector
lengths; and writes one interesting value into one of them. Bytes that do not parse are mutated
byte-wise."""

from __future__ import annotations

import functools
import inspect
import math
import random
import re
import struct
from collections.abc import Callable
from typing import Any

from ..engine import Target, importer_target

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("cuvil_edge.frontend", "cuvil_edge.ir", "cuvil_edge.ops", "cuvil_edge.passes.verify",
              "cuvil_edge.quant.qdq")
#: flatbuffers number type -> struct format
_FORMATS = {"Bool": "<B", "Int8": "<b", "Uint8": "<B", "Int16": "<h", "Uint16": "<H", "Int32": "<i",
            "Uint32": "<I", "Int64": "<q", "Uint64": "<Q", "Float32": "<f", "Float64": "<d"}
_SLOT = re.compile(r"self\._tab\.Offset\((\d+)\)")
_GET = re.compile(r"number_types\.(\w+)Flags, (a|o) \+")
#: tables walked at most this many of each kind per parent (a model's tensors, operators, ...)
_WALK = 64


def setup() -> Callable[[bytes], None]:
    from cuvil_edge.frontend.tflite import import_tflite
    from cuvil_edge.frontend.tflite.registry import BUILTINS, CUSTOM
    from cuvil_edge.ops import _load_all  # noqa: F401  (every op family, imported while instrumented)
    from cuvil_edge.passes.verify import verify

    BUILTINS.get("ADD"), CUSTOM.get("")  # the converter modules load on first lookup: here, instrumented

    def one(data: bytes) -> None:
        verify(import_tflite(data), "import")

    return one


def target() -> Target:
    return importer_target("tflite_import", setup, INSTRUMENT, tflite_mutator)


# -- the mutator -------------------------------------------------------------------------------------

@functools.cache
def _layout(cls: type) -> tuple[tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]]:
    """(scalar fields, vectors of scalars) of a generated table class: (vtable slot, struct format),
    read from its accessors' code (``self._tab.Get(Int32Flags, o + self._tab.Pos)``)."""
    scalars, vectors = [], []
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if name.startswith("_") or name.endswith(("AsNumpy", "IsNone", "Length")):
            continue
        src = inspect.getsource(fn)
        slot, get = _SLOT.search(src), _GET.search(src)
        if slot is None or get is None or get.group(1) not in _FORMATS:
            continue
        (vectors if get.group(2) == "a" else scalars).append((int(slot.group(1)), _FORMATS[get.group(1)]))
    return tuple(scalars), tuple(vectors)


def _places(obj: Any, out: list[tuple[int, str]]) -> None:
    """Where ``obj``'s present scalar fields, vector lengths and vector items are in the buffer."""
    tab = obj._tab
    scalars, vectors = _layout(type(obj))
    for slot, fmt in scalars:
        if o := tab.Offset(slot):
            out.append((tab.Pos + o, fmt))
    for slot, fmt in vectors:
        if o := tab.Offset(slot):
            start, n = tab.Vector(o), tab.VectorLen(o)
            out.append((start - 4, "<I"))
            out += [(start + j * struct.calcsize(fmt), fmt) for j in range(min(n, _WALK))]


def _fields(data: bytes) -> list[tuple[int, str]]:
    """Every mutable number of the model: its tables walked from the root."""
    import tflite

    from cuvil_edge.frontend.tflite.reader import _options_classes

    out: list[tuple[int, str]] = []
    m = tflite.Model.GetRootAsModel(data, 0)
    _places(m, out)
    for i in range(min(m.OperatorCodesLength(), _WALK)):
        _places(m.OperatorCodes(i), out)
    for i in range(min(m.SignatureDefsLength(), 4)):
        s = m.SignatureDefs(i)
        _places(s, out)
        for j in range(min(s.InputsLength(), _WALK)):
            _places(s.Inputs(j), out)
        for j in range(min(s.OutputsLength(), _WALK)):
            _places(s.Outputs(j), out)
    for i in range(min(m.SubgraphsLength(), 8)):
        sg = m.Subgraphs(i)
        _places(sg, out)
        for j in range(min(sg.TensorsLength(), _WALK)):
            t = sg.Tensors(j)
            _places(t, out)
            if (q := t.Quantization()) is not None:
                _places(q, out)
        for j in range(min(sg.OperatorsLength(), _WALK)):
            op = sg.Operators(j)
            _places(op, out)
            cls, table = _options_classes().get(op.BuiltinOptionsType()), op.BuiltinOptions()
            if cls is not None and table is not None:
                opts = cls()
                opts.Init(table.Bytes, table.Pos)
                _places(opts, out)
    return [(at, fmt) for at, fmt in out if 0 <= at <= len(data) - struct.calcsize(fmt)]


def _value(old: float, fmt: str, rng: random.Random) -> float:
    """Another value for a field of struct format ``fmt``: an edge of its type, a neighbour, 0/-1/1."""
    if fmt in ("<f", "<d"):
        v = rng.choice((0.0, -1.0, 1e-45, 1e30, float("nan"), float("inf"), -old, old * 256))
        return math.copysign(math.inf, v) if fmt == "<f" and abs(v) > 3.4e38 else v
    bits = struct.calcsize(fmt) * 8
    lo, hi = (0, 2**bits - 1) if fmt[1].isupper() else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    v = rng.choice((0, -1, 1, 2, 3, lo, hi, hi // 2 + 1, 1 << 16, 1 << 24, old + 1, old - 1, old * 2,
                    old * 256))
    return min(hi, max(lo, int(v)))


def tflite_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    """The model with one to three numbers of its tables changed; 1 in 5, or when it does not parse,
    byte-level."""
    rng = random.Random(seed)
    if rng.random() >= 0.2 and data[4:8] == b"TFL3":
        try:
            places = _fields(data)
        except Exception:  # noqa: BLE001  (a corrupt flatbuffer breaks its accessors in any way)
            places = []
        if places:
            out = bytearray(data)
            for _ in range(rng.choice((1, 1, 1, 2, 3))):
                at, fmt = rng.choice(places)
                struct.pack_into(fmt, out, at, _value(struct.unpack_from(fmt, out, at)[0], fmt, rng))
            return bytes(out)
    from ..mutators import _bytes_mutate

    return _bytes_mutate(data, max_size)


# -- the seeds ---------------------------------------------------------------------------------------

def seeds() -> list[bytes]:
    """The TFLite tests' own models (``tests/support``: written by ``tflite_builder``, checked against
    LiteRT): a float CNN (fp16 weights too), batch matmul and strided slices, the op zoo, an int8
    per-channel CNN, int8 pad and pool, fused activations, a few one-op models more, and the builtin
    kits' models (shape, integer, index and segment ops, recurrent cells and their variable states,
    WHILE, the StableHLO ops, FAKE_QUANT), so every converter starts with an input that reaches it."""
    import sys
    from pathlib import Path

    import numpy as np

    root = str(Path(__file__).resolve().parents[2])  # the repository, whose tests.support writes them
    if root not in sys.path:
        sys.path.insert(0, root)
    from tests.support import tflite_models as t
    from tests.support.tflite_builder import TfliteBuilder
    from tests.support.tflite_builtins import builtin_models
    from tests.support.tflite_more_builtins import more_models
    from tests.support.tflite_rnn import rnn_models
    from tests.support.tflite_stablehlo import stablehlo_models

    out = [t.cnn(), t.cnn(fp16_weights=True), t.matmul_slices(), t.op_zoo(), t.int8_cnn(), t.int8_pad_pool(),
           t.fused_activations()]
    b = TfliteBuilder()  # reshape, transpose, gather, sparse weights
    x = b.tensor("x", (2, 3, 4))
    r = b.tensor("r", (6, 4))
    b.op("RESHAPE", [x, b.const("shape", np.array([6, 4], np.int32))], [r],
         ("ReshapeOptions", {"NewShape": [6, 4]}))
    g = b.tensor("g", (2, 4))
    b.op("GATHER", [r, b.const("idx", np.array([0, 5], np.int32))], [g], ("GatherOptions", {"Axis": 0}))
    tr = b.tensor("tr", (4, 2))
    b.op("TRANSPOSE", [g, b.const("perm", np.array([1, 0], np.int32))], [tr])
    y = b.tensor("y", (4, 3))
    b.op("FULLY_CONNECTED", [tr, b.sparse_const("w", np.array([[1, 0], [0, 2], [3, 0]], np.float32))], [y],
         ("FullyConnectedOptions", {}))
    out.append(b.build([x], [y]))
    out += [*builtin_models(), *more_models(), *rnn_models(), *stablehlo_models()]
    return [d for d in out if len(d) <= 16384]
