"""The model spec: what a device needs to know to run a compiled module (JSON, no host deps)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .errors import InferenceInputError, SpecError

SPEC_FORMAT = 1
MAX_THREADS = 16  # most threads a module may be built for (the compiler's limit too)


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


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

    @property
    def nbytes(self) -> int:
        return _nbytes(self.shape, self.dtype)


def check_index_bound(t: TensorSpec, a: np.ndarray, what: str) -> None:
    """Ids into a table (``index_bound`` rows) must lie in [-rows, rows), ONNX Gather's rule (negative ids
    count from the end): the compiled lookup clamps to a row, so an id past the table would be answered,
    wrongly. Every caller (Python, socket, HTTP) refuses alike."""
    n = t.index_bound
    if n is not None and a.size and (a.min() < -n or a.max() >= n):
        raise InferenceInputError(f"{what} indexes a table of {n} rows: values must be in [-{n}, {n}), got "
                                  f"{a.min()}..{a.max()}")


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
        for t in (*d["inputs"], *d["outputs"]):  # absent rather than null: older specs stay byte-identical
            if t["index_bound"] is None:
                del t["index_bound"]
        return json.dumps(d, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelSpec:
        try:
            d = json.loads(text)
            if d.pop("format", None) != SPEC_FORMAT:
                raise SpecError(f"unsupported model spec format (want {SPEC_FORMAT})")
            tensors = lambda key: tuple(  # noqa: E731
                TensorSpec(t["name"], t["dtype"], tuple(int(x) for x in t["shape"]), int(t["offset"]),
                           None if t.get("index_bound") is None else int(t["index_bound"]))
                for t in d.pop(key))
            inputs, outputs = tensors("inputs"), tensors("outputs")
            variants = tuple(VariantSpec(**v) for v in d.pop("variants", []))
            states = tuple(StateSpec(s["name"], s["dtype"], tuple(int(x) for x in s["shape"]),
                                     int(s["offset"]), int(s["init_offset"])) for s in d.pop("states", []))
            known = {k: d.pop(k) for k in ("name", "weights_size", "arena_size", "weights_sha256", "threads")
                     if k in d}
            extra = d.pop("extra", {})
            extra.update(d)
            spec = cls(inputs=inputs, outputs=outputs, variants=variants, extra=extra, states=states, **known)
        except SpecError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # AttributeError: not an object
            raise SpecError(f"malformed model spec: {exc}") from exc
        spec.check()
        return spec

    def check(self) -> None:
        """Every tensor is numeric, has non-negative dims and lies inside the arena: anything else would
        pass here and fail later in numpy or ctypes with an error no caller expects."""
        if self.weights_size < 0 or self.arena_size < 0:
            raise SpecError("weights_size and arena_size must be non-negative")
        if not isinstance(self.threads, int) or not 1 <= self.threads <= MAX_THREADS:
            raise SpecError(f"threads must be 1..{MAX_THREADS}, got {self.threads!r}")
        for t in (*self.inputs, *self.outputs, *self.states):
            try:
                kind = np.dtype(t.dtype).kind
            except TypeError as exc:
                raise SpecError(f"tensor {t.name!r} has unknown dtype {t.dtype!r}") from exc
            if kind not in "biuf":
                raise SpecError(f"tensor {t.name!r} has non-numeric dtype {t.dtype!r}")
            if any(d < 0 for d in t.shape):
                raise SpecError(f"tensor {t.name!r} has a negative dimension in {t.shape}")
            if t.offset < 0 or t.offset + t.nbytes > self.arena_size:
                raise SpecError(f"tensor {t.name!r} lies outside the arena")
            if isinstance(t, StateSpec):
                if t.init_offset < 0 or t.init_offset + t.nbytes > self.weights_size:
                    raise SpecError(f"state {t.name!r}: its initial value lies outside the weights")
            elif t.index_bound is not None and t.index_bound < 1:
                raise SpecError(f"tensor {t.name!r} has index_bound {t.index_bound}, want >= 1")
