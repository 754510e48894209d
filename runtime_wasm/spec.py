"""The model spec: what a device needs to know to run a compiled module (JSON, no host deps)."""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from . import schema
from .digest import check_tree_chunk
from .errors import InferenceInputError, SpecError

SPEC_FORMAT = 1
#: a model directory's spec and weights files (``loader.read_model_dir``; an installed slot holds them too)
SPEC_FILE = "model.json"
WEIGHTS_FILE = "weights.bin"
#: suffix of the output that holds how many entries of the same-named output are real (a data-dependent
#: length: a Loop's scan output, StringNormalizer's result)
LENGTH_SUFFIX = ":length"
MAX_THREADS = 16  # most threads a module may be built for (the compiler's limit too)

# A module's exports: the host's emitter (``cuvil_edge.codegen.emit``, its C templates) writes them and
# ``instance`` calls them, both by these names.
EXPORT_MEMORY = "memory"
EXPORT_RUN = "run"  # one inference over the arena
EXPORT_WEIGHTS = "cuvil_weights"  # address of the weights region, filled by the host
EXPORT_ARENA = "cuvil_arena"  # address of the arena (inputs, outputs, activations)
EXPORT_SET_THREADS = "cuvil_set_threads"
EXPORT_WORKER = "cuvil_worker"  # a parked thread's loop
EXPORT_STOP = "cuvil_stop"
EXPORT_RESET = "cuvil_reset"
EXPORT_STACKS = "cuvil_stacks"  # base of the per-thread shadow stacks
EXPORT_STACK_POINTER = "__stack_pointer"
#: bytes between two threads' stacks (modules built before it have none: 1 MiB, ``LEGACY_THREAD_STRIDE``)
EXPORT_THREAD_STRIDE = "cuvil_thread_stride"
LEGACY_THREAD_STRIDE = 1 << 20
#: exports every module has: its memory, the entry point and two address getters
REQUIRED_EXPORTS = (EXPORT_MEMORY, EXPORT_RUN, EXPORT_WEIGHTS, EXPORT_ARENA)
#: exports a threaded module (``ModelSpec.threads`` > 1) adds: thread count, parked-thread loop, stop and
#: reset, the per-thread stacks and each instance's stack pointer
THREAD_EXPORTS = (EXPORT_SET_THREADS, EXPORT_WORKER, EXPORT_STOP, EXPORT_RESET, EXPORT_STACKS,
                  EXPORT_STACK_POINTER)


def node_export(index: int) -> str:
    """The export of a profiling build's ``index``-th node (run on its own to time it)."""
    return f"cuvil_node_{index}"


def is_sha256_hex(text: object) -> bool:
    """A sha256 as every format here writes it: 64 lowercase hex digits and nothing else (``fullmatch``:
    a ``^...$`` pattern also takes a trailing newline)."""
    return isinstance(text, str) and re.fullmatch(r"[0-9a-f]{64}", text) is not None


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    """Exact (Python integers): ``np.prod`` in int64 wraps, and a wrapped size would pass the arena check."""
    return math.prod(shape) * storage_dtype(dtype).itemsize


#: stored element types: ONNX types wasm has no arithmetic for, held in linear memory as a plain numpy
#: type: bfloat16 and the float8/float4 formats as their bit patterns, int4/int2 sign-extended into a
#: byte, uint4/uint2 one to a byte (ONNX packs two or four to a byte; the module never does). Callers pass
#: and get ml_dtypes arrays (numpy's names for these types) where ml_dtypes is installed, else the storage
#: arrays themselves: a device needs no ml_dtypes
STORED_DTYPES = {"bfloat16": "uint16", "float8_e4m3fn": "uint8", "float8_e4m3fnuz": "uint8",
                 "float8_e5m2": "uint8", "float8_e5m2fnuz": "uint8", "float8_e8m0fnu": "uint8",
                 "float4_e2m1fn": "uint8", "int4": "int8", "uint4": "uint8", "int2": "int8", "uint2": "uint8"}
#: the integer stored types' values (a storage array holding another is refused, never wrapped)
STORED_RANGES = {"int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}


def storage_dtype(dtype: str) -> np.dtype:
    """The numpy dtype a tensor of ``dtype`` is held as in linear memory (numpy's own dtypes as they are)."""
    return np.dtype(STORED_DTYPES.get(dtype, dtype))


@functools.cache
def _ml_dtypes() -> Any:
    """The ml_dtypes module, or None where it is not installed (a device without host extras)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


def to_storage(t: TensorSpec, a: np.ndarray) -> np.ndarray:
    """Input ``a`` for stored-type tensor ``t`` as linear memory holds it. Taken: an ml_dtypes array of
    t's type; the storage array itself (bit patterns for the float types, values for the integer ones);
    with ml_dtypes installed, any real numbers, converted as ml_dtypes converts them."""
    store, ml = storage_dtype(t.dtype), _ml_dtypes()
    if a.dtype.name != t.dtype and a.dtype != store and ml is not None and a.dtype.kind in "biuf":
        with np.errstate(all="ignore"):
            a = a.astype(getattr(ml, t.dtype))
    if a.dtype.name == t.dtype:
        a = a.astype(store) if t.dtype in STORED_RANGES else a.view(store)
    if a.dtype != store:
        raise InferenceInputError(f"input {t.name!r} must be {t.dtype} (an ml_dtypes array, or its {store} "
                                  f"storage), got {a.dtype}")
    lo, hi = STORED_RANGES.get(t.dtype, (None, None))
    if lo is not None and a.size and (a.min() < lo or a.max() > hi):
        raise InferenceInputError(f"input {t.name!r} is {t.dtype}: values must be in [{lo}, {hi}], got "
                                  f"{a.min()}..{a.max()}")
    return a


def from_storage(dtype: str, a: np.ndarray) -> np.ndarray:
    """A stored-type output as the caller gets it: an ml_dtypes array where ml_dtypes is installed, else
    the storage array (numpy's own dtypes as they are)."""
    ml = _ml_dtypes() if dtype in STORED_DTYPES else None
    if ml is None:
        return a
    return a.astype(getattr(ml, dtype)) if dtype in STORED_RANGES else a.view(getattr(ml, dtype))


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output: where it lives in the arena and what it holds."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int  # bytes from the arena base
    #: integer inputs that index a table (token ids) of this many rows: ids in [-rows, rows) are valid
    #: (``check_index_bound``), the host draws golden and benchmark inputs from [0, rows). Optional, so
    #: specs without it still load.
    index_bound: int | None = None
    #: other names the caller may use for it (a TFLite tensor's name, ``serving_default_x:0``, beside its
    #: signature key ``x``, the canonical name outputs come back under). Optional, as ``index_bound``.
    aliases: tuple[str, ...] = ()

    @property
    def nbytes(self) -> int:
        return _nbytes(self.shape, self.dtype)

    @property
    def known_as(self) -> str:
        """The name and its aliases, for messages: ``'x' (or 'serving_default_x:0')``."""
        return repr(self.name) + "".join(f" (or {a!r})" for a in self.aliases)


def by_canonical_name(specs: Sequence[TensorSpec], given: Mapping[str, Any], role: str) -> dict[str, Any]:
    """``given`` keyed by each tensor's canonical name, an alias standing for its tensor; a name that is
    neither, or a tensor given twice, is an ``InferenceInputError`` naming every tensor by all its names."""
    canonical = {a: t.name for t in specs for a in (t.name, *t.aliases)}
    out: dict[str, Any] = {}
    unknown = []
    for k, v in given.items():
        name = canonical.get(k)
        if name is None:
            unknown.append(k)
        elif name in out:
            raise InferenceInputError(f"{role} {name!r} is given twice (as {k!r} too)")
        else:
            out[name] = v
    missing = [t.known_as for t in specs if t.name not in out]
    if unknown or missing:
        detail = (f"missing [{', '.join(missing)}] " if missing else "") + (
            f"unknown {sorted(unknown)}" if unknown else "")
        raise InferenceInputError(f"{role}s must be exactly [{', '.join(t.known_as for t in specs)}]: "
                                  f"{detail.strip()}")
    return out


class Outputs(dict):
    """A run's outputs under their canonical names; an alias reads the same array (``out[alias]``,
    ``out.get(alias)``, ``alias in out``)."""

    def __init__(self, arrays: Mapping[str, np.ndarray], specs: Sequence[TensorSpec]) -> None:
        super().__init__(arrays)
        self.aliases = {a: t.name for t in specs for a in t.aliases}

    def __missing__(self, key: str) -> np.ndarray:
        if key in self.aliases:
            return self[self.aliases[key]]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or key in self.aliases

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default


def check_index_bound(t: TensorSpec, a: np.ndarray, what: str) -> None:
    """Ids into a table (``index_bound`` rows) must lie in [-rows, rows), ONNX Gather's rule (negative ids
    count from the end): the compiled lookup clamps to a row, so an id past the table would be answered,
    wrongly. Every caller (Python, socket, HTTP) refuses alike."""
    n = t.index_bound
    if n is not None and a.size and (a.min() < -n or a.max() >= n):
        raise InferenceInputError(f"{what} indexes a table of {n} rows: values must be in [-{n}, {n}), got "
                                  f"{a.min()}..{a.max()}")


def encode_strings(t: TensorSpec, a: np.ndarray) -> np.ndarray:
    """A str array as the module holds it: UTF-8, zero padded to the spec's width (``S<W>``). A longer
    element is refused, never cut, so no caller gets an answer for text it did not send."""
    if a.dtype.kind not in "OUS":
        raise InferenceInputError(f"input {t.name!r} must be strings, got {a.dtype}")
    width = storage_dtype(t.dtype).itemsize
    try:
        rows = [x if isinstance(x, bytes) else x.encode() for x in a.reshape(-1).tolist()]
    except AttributeError as exc:
        raise InferenceInputError(f"input {t.name!r} must hold only strings: {exc}") from None
    long = max(rows, key=len, default=b"")
    if len(long) > width:
        raise InferenceInputError(f"input {t.name!r} holds a string of {len(long)} UTF-8 bytes; the module "
                                  f"was built for at most {width} (max_string_bytes)")
    return np.array(rows, dtype=t.dtype).reshape(a.shape)


def caller_outputs(specs: tuple[TensorSpec, ...], arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copies of a run's outputs as the caller gets them: a string output's rows decoded to str (an object
    array, ONNX's string tensors in numpy) and cut along its last axis to its ``<name>:length``
    companion, which is then left out, so the shape is the source model's."""
    out = Outputs({t.name: from_storage(t.dtype, arrays[t.name].copy()) for t in specs}, specs)
    for t in specs:
        if storage_dtype(t.dtype).kind == "S":
            rows = out[t.name]
            n = out.pop(t.name + LENGTH_SUFFIX, None)
            if n is not None:
                rows = rows[..., :int(n)]
            out[t.name] = np.array([x.decode() for x in rows.reshape(-1).tolist()],
                                   dtype=object).reshape(rows.shape)
    return out


@dataclass(frozen=True)
class StateSpec:
    """A tensor that persists across runs (a TFLite resource variable): the module reads it at arena
    ``offset`` and writes the new value there at the end of ``run``; its initial value lies at
    ``init_offset`` in the weights, which a reset copies back."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int  # bytes from the arena base
    init_offset: int  # bytes from the weights base

    @property
    def nbytes(self) -> int:
        return _nbytes(self.shape, self.dtype)


@dataclass(frozen=True)
class VariantSpec:
    """One compiled module of the model: a (dtype tier, host family) build."""

    name: str  # e.g. "f32-wasmsimd-x86", see docs in cuvil_edge/codegen/kernels/NAMING.md
    tier: str  # "simd128" or "relaxed"
    family: str  # "x86" or "arm"
    file: str
    sha256: str = ""
    size: int = 0


#: the numeric dtypes a module's tensors may have (the compiler's IR dtypes, by numpy's names)
NUMERIC_DTYPES = ("float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                  "uint32", "uint64", "bool", *STORED_DTYPES)
#: a string tensor's dtype: fixed-width UTF-8 rows of W >= 1 bytes (model inputs and outputs only)
_STRING_DTYPE = re.compile(r"S[1-9][0-9]{0,8}")
MAX_RANK = 32
MAX_DIM = 2**31 - 1
MAX_TENSORS = 1 << 16
MAX_VARIANTS = 256
#: the largest ``model.json`` read (its ``extra`` holds the node table of a big model)
MAX_SPEC_BYTES = 64 << 20
_MALFORMED = "malformed model spec"


def supported_dtype(dtype: str, strings: bool = True) -> bool:
    """Whether the runtime holds tensors of ``dtype``: an allow-list, so a name numpy would choke on
    (``"01"``, a timestamp) or read as something else (``"a"``, ``"U0"``) never reaches it."""
    return dtype in NUMERIC_DTYPES or (strings and _STRING_DTYPE.fullmatch(dtype) is not None)


def _dtype(strings: bool) -> schema.Reader:
    name = schema.text(64)

    def read_dtype(value: Any, path: str) -> str:
        dtype = name(value, path)
        if not supported_dtype(dtype, strings):
            raise schema.Invalid(path, f"is not a dtype the runtime supports: {dtype!r}")
        return dtype

    return read_dtype


_DIM = schema.integer(0, MAX_DIM)


def _dimension(value: Any, path: str) -> int:
    """A dimension, with a negative one named as such (the error people meet: a dynamic ``-1``)."""
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise schema.Invalid(path, f"is a negative dimension ({value})")
    return _DIM(value, path)


_SHAPE = schema.array(_dimension, MAX_RANK)
_DIGEST_OR_EMPTY = schema.text(64, r"(?:[0-9a-f]{64})?")
_INDEX_BOUND = schema.Optional(schema.nullable(schema.integer(1)))
TENSOR_SCHEMA = schema.record({"name": schema.text(), "dtype": _dtype(True), "shape": _SHAPE,
                               "offset": schema.integer(), "index_bound": _INDEX_BOUND,
                               "aliases": schema.Optional(schema.array(schema.text(), 8), ())}, extra="drop")
STATE_SCHEMA = schema.record({"name": schema.text(), "dtype": _dtype(False), "shape": _SHAPE,
                              "offset": schema.integer(), "init_offset": schema.integer()}, extra="drop")
VARIANT_SCHEMA = schema.record({"name": schema.text(256), "tier": schema.text(64), "family": schema.text(64),
                                "file": schema.text(255), "sha256": schema.Optional(_DIGEST_OR_EMPTY, ""),
                                "size": schema.Optional(schema.integer(), 0)}, extra="refuse")
#: ``model.json``; fields it does not know go to ``ModelSpec.extra`` (a newer writer's survive)
SPEC_SCHEMA = schema.record({
    "format": schema.one_of(SPEC_FORMAT),
    "name": schema.text(),
    "inputs": schema.array(TENSOR_SCHEMA, MAX_TENSORS),
    "outputs": schema.array(TENSOR_SCHEMA, MAX_TENSORS),
    "weights_size": schema.integer(),
    "arena_size": schema.integer(),
    "variants": schema.Optional(schema.array(VARIANT_SCHEMA, MAX_VARIANTS), ()),
    "weights_sha256": schema.Optional(_DIGEST_OR_EMPTY, ""),
    "extra": schema.Optional(schema.record({}), {}),
    "threads": schema.Optional(schema.integer(1, MAX_THREADS), 1),
    "states": schema.Optional(schema.array(STATE_SCHEMA, MAX_TENSORS), ()),
    "weights_tree_sha256": schema.Optional(schema.text(64), ""),  # its form: ``check``, for built specs too
    "weights_tree_chunk": schema.Optional(schema.integer(), 0),
    "memory": schema.Optional(schema.array(schema.integer(0, 1 << 32), MAX_THREADS), ()),
})
_SCALAR_FIELDS = ("name", "weights_size", "arena_size", "weights_sha256", "threads", "weights_tree_sha256",
                  "weights_tree_chunk", "memory")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    weights_size: int
    arena_size: int
    variants: tuple[VariantSpec, ...] = ()
    weights_sha256: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # unknown fields survive a round trip
    #: most threads the modules run (> 1: they import one shared memory, ``WasmModel`` picks the count)
    threads: int = 1
    #: state kept across runs (non-empty: a stateful model, served by one instance: docs/RUNTIME.md)
    states: tuple[StateSpec, ...] = ()
    #: tree hash of the weights and its chunk size (``runtime_wasm.digest``: its chunks verify in parallel);
    #: absent in specs built before it, which are checked against ``weights_sha256`` alone
    weights_tree_sha256: str = ""
    weights_tree_chunk: int = 0
    #: bytes of linear memory the module needs on 1, 2, .. ``threads`` threads (absent in specs built
    #: before it: ``memory_for`` answers None)
    memory: tuple[int, ...] = ()

    def memory_for(self, threads: int) -> int | None:
        """Linear memory for running on ``threads`` (at most ``self.threads``), None when not recorded."""
        if not self.memory:
            return None
        return self.memory[max(1, min(threads, len(self.memory))) - 1]

    @property
    def stateful(self) -> bool:
        return bool(self.states)

    def to_json(self) -> str:
        d = asdict(self)
        d["format"] = SPEC_FORMAT
        if self.threads == 1:  # absent: single-threaded specs stay as they were
            del d["threads"]
        if not self.states:  # absent: stateless specs stay as they were
            del d["states"]
        if not self.memory:  # absent: specs built before it stay as they were
            del d["memory"]
        if not self.weights_tree_sha256:  # absent: specs without a tree stay as they were
            del d["weights_tree_sha256"], d["weights_tree_chunk"]
        for t in (*d["inputs"], *d["outputs"]):  # absent rather than null: older specs stay byte-identical
            if t["index_bound"] is None:
                del t["index_bound"]
            if not t["aliases"]:
                del t["aliases"]
        return json.dumps(d, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelSpec:
        """A spec read through ``SPEC_SCHEMA`` (types, ranges, dtypes), then ``check``: every way it can be
        wrong is a ``SpecError``."""
        d = schema.read(schema.load(text, MAX_SPEC_BYTES, _MALFORMED, SpecError), SPEC_SCHEMA, _MALFORMED,
                        SpecError)
        del d["format"]
        inputs, outputs = (tuple(TensorSpec(**t) for t in d.pop(key)) for key in ("inputs", "outputs"))
        variants = tuple(VariantSpec(**v) for v in d.pop("variants"))
        states = tuple(StateSpec(**s) for s in d.pop("states"))
        known = {k: d.pop(k) for k in _SCALAR_FIELDS}
        known["memory"] = tuple(known["memory"])
        extra = {**d.pop("extra"), **d}
        spec = cls(inputs=inputs, outputs=outputs, variants=variants, extra=extra, states=states, **known)
        spec.check()
        return spec

    def check(self) -> None:
        """Every tensor has a unique name, a dtype the runtime holds and non-negative dims, and lies inside
        the arena; a string output's length is one integer: anything else would pass here and fail later in
        numpy or ctypes with an error no caller expects."""
        if self.weights_size < 0 or self.arena_size < 0:
            raise SpecError("weights_size and arena_size must be non-negative")
        if not isinstance(self.threads, int) or not 1 <= self.threads <= MAX_THREADS:
            raise SpecError(f"threads must be 1..{MAX_THREADS}, got {self.threads!r}")
        if self.memory and (len(self.memory) != self.threads or list(self.memory) != sorted(self.memory)):
            raise SpecError(f"memory must give the bytes for 1..{self.threads} threads, non-decreasing: "
                            f"got {list(self.memory)}")
        if self.weights_tree_sha256 or self.weights_tree_chunk:
            if not is_sha256_hex(self.weights_tree_sha256):
                raise SpecError(f"weights_tree_sha256 is not a sha256 digest: {self.weights_tree_sha256!r}")
            check_tree_chunk(self.weights_tree_chunk)
        for role, tensors in (("inputs", self.inputs), ("outputs", self.outputs), ("states", self.states)):
            names = (n for t in tensors for n in (t.name, *getattr(t, "aliases", ())))
            twice = [n for n, k in Counter(names).items() if k > 1]
            if twice:  # each is looked up by its name: the second would be lost, or read twice
                raise SpecError(f"{role} {twice[:4]} are named more than once")
        for t in (*self.inputs, *self.outputs, *self.states):
            if not supported_dtype(t.dtype, strings=not isinstance(t, StateSpec)):
                raise SpecError(f"tensor {t.name!r} has a dtype the runtime does not hold: {t.dtype!r}")
            if any(d < 0 for d in t.shape):
                raise SpecError(f"tensor {t.name!r} has a negative dimension in {t.shape}")
            if math.prod(d for d in t.shape if d) * storage_dtype(t.dtype).itemsize > schema.INT_MAX:
                # numpy sizes an array by its non-empty axes too: even holding nothing, it could not be made
                raise SpecError(f"tensor {t.name!r} of shape {t.shape} is too large for any array")
            if t.offset < 0 or t.offset + t.nbytes > self.arena_size:
                raise SpecError(f"tensor {t.name!r} lies outside the arena")
            if isinstance(t, StateSpec):
                if t.init_offset < 0 or t.init_offset + t.nbytes > self.weights_size:
                    raise SpecError(f"state {t.name!r}: its initial value lies outside the weights")
            elif t.index_bound is not None and (t.index_bound < 1 or storage_dtype(t.dtype).kind not in "iu"):
                raise SpecError(f"tensor {t.name!r} has index_bound {t.index_bound}: ids are integers and "
                                "the bound at least 1")
        strings = {t.name: t for t in self.outputs if storage_dtype(t.dtype).kind == "S"}
        for t in self.outputs:  # ``caller_outputs`` cuts a string output's last axis to one integer
            base = strings.get(t.name.removesuffix(LENGTH_SUFFIX)) if t.name.endswith(LENGTH_SUFFIX) else None
            if base is not None and (t.shape != () or storage_dtype(t.dtype).kind not in "iu"
                                     or not base.shape):
                raise SpecError(f"output {t.name!r} must be an integer scalar, the length of the last axis "
                                f"of {base.name!r}: got {t.dtype}{list(t.shape)} for "
                                f"{base.dtype}{list(base.shape)}")
