"""TFLite converter tables (builtins by name, custom ops by custom code: the plugin registry) and the
per-operator context converters see: inputs as laid-out values, options, and ``emit`` for IR nodes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import UnsupportedOperator
from ...ir.graph import DTYPES, Graph, QuantParams, Value
from ..registry import ConverterTable, IRBuilder
from .layout import NCHW, Laid, Perm, compose, identity, inverse, is_reshape
from .reader import TflModel, TflOperator, TflSubgraph, TflTensor

Converter = Callable[["TflContext"], None]
_NOT_FAMILIES = ("coverage", "importer", "layout", "reader", "registry")
BUILTINS: ConverterTable[Converter] = ConverterTable("TFLite builtin", __package__, skip=_NOT_FAMILIES)
CUSTOM: ConverterTable[Converter] = ConverterTable("TFLite custom", __package__, skip=_NOT_FAMILIES)
converter = BUILTINS.register
#: register a converter for a custom op by its custom code (``@custom_converter("MyOp")``)
custom_converter = CUSTOM.register

#: ActivationFunctionType -> the IR ``act`` attr (SIGN_BIT has none)
FUSED_ACT = {1: ("relu", 0.0, 0.0), 2: ("clip", -1.0, 1.0), 3: ("clip", 0.0, 6.0), 4: ("tanh", 0.0, 0.0)}


def variable_name(options: dict[str, Any]) -> str:
    """A variable's identity across subgraphs: its container and shared name (VarHandleOptions)."""
    container, shared = (options.get(k) or b"" for k in ("Container", "SharedName"))
    name = shared.decode(errors="replace")
    return f"{container.decode(errors='replace')}/{name}" if container else name


@dataclass
class Variables:
    """The model's resource variables, shared by its subgraphs: each one's initial value (what a CALL_ONCE
    initializer, run at build time, assigned) and, for the entry subgraph, the graph input that reads the
    value a run starts from (made on the first read)."""

    model: TflModel
    assigned: set[str] = field(default_factory=set)  # those the entry subgraph writes: its states
    init: dict[str, np.ndarray] = field(default_factory=dict)
    ran: set[int] = field(default_factory=set)  # initializer subgraphs already run (CALL_ONCE: once)
    reads: dict[str, Value] = field(default_factory=dict)
    converting: set[int] = field(default_factory=set)  # subgraphs (ids) being converted: IF/CALL_ONCE cycles


@dataclass
class ImportState:
    """What the operators of one subgraph share. ``env``: tensor index -> ``Laid``; quantized run-time
    tensors are held as uint8 (int8 ones shifted by +128), ``held_quant`` giving their (scale, held zero
    point); quantized constants are already real, ``int_weights`` keeping the int8 ones' ``QuantParams``
    (TFLite order) for the integer kernels; ``cache`` holds each layout change and dequantize
    emitted, so none is emitted twice. ``handles``: resource tensor -> variable name (VAR_HANDLE),
    ``current``: each variable's value as this subgraph's operators have left it so far; ``persistent``:
    the entry subgraph, where variables live on between runs (an initializer's only start from init)."""

    variables: Variables
    persistent: bool = True
    env: dict[int, Laid] = field(default_factory=dict)
    held_quant: dict[int, tuple[float, int]] = field(default_factory=dict)
    int_weights: dict[int, QuantParams] = field(default_factory=dict)
    cache: dict[tuple[Any, ...], Value] = field(default_factory=dict)
    handles: dict[int, str] = field(default_factory=dict)
    current: dict[str, Value] = field(default_factory=dict)


class Options(dict):
    """An operator's builtin options: a field the converter needs and the table lacks (an options table
    of another type, or none) refuses the operator by name, not a ``KeyError``."""

    def __init__(self, fields: dict[str, Any], refuse: Callable[[str], UnsupportedOperator]) -> None:
        super().__init__(fields)
        self._refuse = refuse

    def __missing__(self, key: str) -> Any:
        raise self._refuse(f"its options lack {key} (options table missing or of another type)")


class TflContext(IRBuilder):
    """One TFLite operator being converted. Converters see real (float) values: a quantized input is
    dequantized on the way in and a quantized output quantized on the way out (``quant/qdq.py`` then
    fuses dequantize -> conv/gemm onto the integer kernels). With ``raw`` (data movement within one
    quantization) they see and write the held uint8 values instead."""

    def __init__(self, graph: Graph, state: ImportState, sg: TflSubgraph, op: TflOperator,
                 raw: bool = False) -> None:
        self.graph, self.state, self.sg, self.op, self.raw = graph, state, sg, op, raw
        out = op.outputs[0] if op.outputs else -1
        self.name = sg.tensors[out].name if out >= 0 else f"{op.op}_{op.index}"
        self.options = Options(op.options, self.unsupported)

    # -- reading the operator -----------------------------------------------------------------
    def unsupported(self, detail: str = "") -> UnsupportedOperator:
        op = f"CUSTOM:{self.op.custom_code}" if self.op.custom_code is not None else self.op.op
        where = f"builtin code {self.op.builtin_code}, operator index {self.op.index}"
        return UnsupportedOperator(op, self.name, None, f"{where}" + (f": {detail}" if detail else ""))

    def axis(self, value: Any, rank: int) -> int:
        """``value`` (an option or a constant's one element) as an axis of a rank-``rank`` tensor."""
        v = np.asarray(value).reshape(-1)
        if v.size != 1 or v.dtype.kind not in "iu" or not -rank <= int(v[0]) < rank:
            raise self.unsupported(f"axis {v.tolist()} is not an integer of a rank-{rank} tensor")
        return int(v[0]) % rank

    def has_input(self, i: int) -> bool:
        return i < len(self.op.inputs) and self.op.inputs[i] >= 0

    def input_tensor(self, i: int) -> TflTensor:
        """Input i's tensor as declared (type, quantization, data), which the operator must have."""
        if not self.has_input(i):
            raise self.unsupported(f"input {i} is required")
        return self.sg.tensors[self.op.inputs[i]]

    def held(self, i: int, flat_ok: bool = False) -> Laid:
        """Input i as stored (uint8 for a quantized tensor); a flatten kept in IR order is put in TFLite
        order first (once: the tensor is stored that way from then on) unless ``flat_ok``."""
        if not self.has_input(i):
            raise self.unsupported(f"input {i} is required")
        idx = self.op.inputs[i]
        if idx not in self.state.env:
            raise self.unsupported(f"input {i} reads {self.sg.tensors[idx].name!r} before it is written")
        x = self.state.env[idx]
        if x.flat_of is not None and not flat_ok:
            src = self.relaid(x.flat_of, identity(len(x.flat_of.perm)))
            x = Laid(self.emit1("reshape", [src], {"shape": list(x.value.type.shape)}, f"{src.name}/flat"),
                     x.perm)
            self.state.env[idx] = x
        return x

    def real(self, i: int, held: Laid) -> Value:
        """The real value of ``held``, input i as stored."""
        return self._real(self.op.inputs[i], held.value)

    def same_domain(self, i: int, j: int = 0) -> bool:
        """Whether input i and output j hold values the same way (both real, or equal quantization)."""
        return self.state.held_quant.get(self.op.inputs[i]) == self.state.held_quant.get(self.op.outputs[j])

    def laid(self, i: int) -> Laid:
        """Input i's real value in its current layout."""
        held = self.held(i)
        return Laid(self.real(i, held), held.perm)

    def _real(self, idx: int, v: Value) -> Value:
        q = self.state.held_quant.get(idx)
        if q is None or self.raw:
            return v
        key = ("real", id(v))
        if key not in self.state.cache:
            s, z = self.graph.constant(f"{v.name}/scale", np.float32(q[0])), \
                self.graph.constant(f"{v.name}/zero_point", np.uint8(q[1]))
            self.state.cache[key] = self.emit1("dequantize", [v, s, z], {"axis": 1}, f"{v.name}/real")
        return self.state.cache[key]

    def const(self, i: int) -> np.ndarray:
        """Input i in TFLite order; it must be known at build time (weights, shapes, axes)."""
        v = self.laid(i)
        if not v.value.is_const:
            raise self.unsupported(f"input {i} must be a build-time constant")
        return np.transpose(v.value.const, inverse(v.perm))

    def input(self, i: int, perm: Perm | None = None) -> Value:
        """Input i's real value laid out as ``perm`` (default: TFLite order; ``NCHW`` for spatial ops); a
        quantized one moves as uint8, then is dequantized next to its consumer."""
        src, idx = self.held(i), self.op.inputs[i]
        want = identity(len(src.perm)) if perm is None else perm
        return self._real(idx, self.relaid(src, want, key=idx))

    def nchw(self, i: int) -> Value:
        if len(self.laid(i).perm) != 4:
            raise self.unsupported(f"input {i} must be 4D (NHWC), got shape {self.laid(i).shape}")
        return self.input(i, NCHW)

    def relaid(self, src: Laid, want: Perm, key: int | None = None) -> Value:
        """``src`` as ``want``: nothing, a reshape (only size-1 dims move) or one transpose."""
        if src.perm == want:
            return src.value
        if key is not None and (key, want) in self.state.cache:
            return self.state.cache[(key, want)]
        rel = compose(inverse(src.perm), want)
        name = f"{src.value.name}/as{''.join(map(str, want))}"
        if is_reshape(src.value.type.shape, rel):
            out = self.emit1("reshape", [src.value], {"shape": [src.value.type.shape[p] for p in rel]}, name)
        else:
            out = self.emit1("transpose", [src.value], {"perm": list(rel)}, name)
        if key is not None:
            self.state.cache[(key, want)] = out
        return out

    def aligned(self, indices: Sequence[int]) -> tuple[list[Value], Perm]:
        """Inputs of a broadcasting op in one layout (that of the first run-time input of full rank);
        lower-rank inputs are first given leading 1s, as numpy broadcasting would."""
        ins = [self.held(i) for i in indices]
        if not ins:
            raise self.unsupported("it has no inputs")
        rank = max(len(x.perm) for x in ins)
        perm = next((x.perm for x in ins if len(x.perm) == rank and not x.value.is_const), identity(rank))
        out = []
        for i, x in zip(indices, ins):
            if len(x.perm) == rank:
                out.append(self.input(i, perm))
                continue
            flat = self.input(i)
            full = self.emit1("reshape", [flat], {"shape": [1] * (rank - len(x.perm)) + list(x.shape)},
                              f"{flat.name}/rank{rank}")
            out.append(self.relaid(Laid(full, identity(rank)), perm))
        return out, perm

    # -- producing IR (emit, emit1, constant: IRBuilder) ------------------------------------------
    def fused(self, v: Value, key: str = "FusedActivationFunction") -> Value:
        """``v`` through the operator's fused activation (the fusion pass folds it into the producer)."""
        code = int(self.options.get(key, 0))
        if code == 0:
            return v
        if code not in FUSED_ACT:
            raise self.unsupported(f"fused activation {code}")
        return self.emit1("epilogue_act", [v], {"act": FUSED_ACT[code]}, name=f"{self.name}/act")

    def weight(self, i: int, relayout: Callable[[np.ndarray], np.ndarray], name: str) -> Value:
        """Constant input i re-laid for its IR op (``relayout`` of the TFLite-order array); an int8 one
        keeps its ``QuantParams`` (re-laid the same way), for the integer kernels."""
        real = self.const(i)
        v = self.constant(np.ascontiguousarray(relayout(real), np.float32), name)
        params = self.state.int_weights.get(self.op.inputs[i])
        if params is not None:
            v.quant = params.relaid(real.shape, relayout)
        return v

    def output_index(self, i: int) -> int:
        """The tensor index of output i, which the operator must have."""
        if i >= len(self.op.outputs) or self.op.outputs[i] < 0:
            raise self.unsupported(f"output {i} is required")
        return self.op.outputs[i]

    def output_dtype(self, i: int = 0) -> str:
        """The TFLite type output i is declared with (an index or shape op's int32 or int64): one the IR
        has, else the operator is refused naming it (a type code past the schema's reads as
        ``tflite_type_<n>``)."""
        dtype = self.sg.tensors[self.output_index(i)].dtype
        if dtype not in DTYPES:
            raise self.unsupported(f"output {i} is declared {dtype}")
        return dtype

    def cast(self, v: Value, dtype: str, tag: str = "cast") -> Value:
        """``v`` as ``dtype``: no node when it already is (int64 indices in, int32 ones out)."""
        return v if v.type.dtype == dtype else self.emit1("cast", [v], {"to": dtype}, f"{self.name}/{tag}")

    def set_held(self, x: Laid, i: int = 0) -> None:
        """Output i is ``x`` as stored (only where ``same_domain`` holds)."""
        self.state.env[self.output_index(i)] = x

    def set_output(self, value: Value, perm: Perm | None = None, i: int = 0) -> None:
        """Output i is ``value``, laid out as ``perm`` (default: TFLite order); quantized on the way."""
        idx = self.output_index(i)
        q = None if self.raw else self.state.held_quant.get(idx)
        if q is not None:
            s, z = (self.constant(np.float32(q[0]), f"scale{i}"),
                    self.constant(np.uint8(q[1]), f"zero_point{i}"))
            value = self.emit1("quantize", [value, s, z], {"axis": 1}, f"{self.sg.tensors[idx].name}/q")
        rank = len(value.type.shape)
        self.state.env[idx] = Laid(value, identity(rank) if perm is None else tuple(perm))
