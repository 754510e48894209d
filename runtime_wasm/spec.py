"""The model spec: what a device needs to know to run a compiled module (JSON, no host deps)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .errors import SpecError

SPEC_FORMAT = 1
MAX_THREADS = 16  # most threads a module may be built for (the compiler's limit too)


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output: where it lives in the arena and what it holds."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int  # bytes from the arena base
    #: integer inputs that index a table (token ids): valid values are [0, index_bound). Optional, so
    #: specs without it still load; the host draws golden and benchmark inputs from it.
    index_bound: int | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


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

    def to_json(self) -> str:
        d = asdict(self)
        d["format"] = SPEC_FORMAT
        if self.threads == 1:  # absent: single-threaded specs stay as they were
            del d["threads"]
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
            known = {k: d.pop(k) for k in ("name", "weights_size", "arena_size", "weights_sha256", "threads")
                     if k in d}
            extra = d.pop("extra", {})
            extra.update(d)
            spec = cls(inputs=inputs, outputs=outputs, variants=variants, extra=extra, **known)
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
        for t in (*self.inputs, *self.outputs):
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
            if t.index_bound is not None and t.index_bound < 1:
                raise SpecError(f"tensor {t.name!r} has index_bound {t.index_bound}, want >= 1")
