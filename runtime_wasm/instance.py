"""Run one compiled model in a wasmtime sandbox: zero-copy I/O views and one wasm call per inference."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import wasmtime
from wasmtime import _ffi as ffi  # private: the unchecked call path (wasmtime is pinned for this)

from .errors import InferenceInputError, InferenceTrap, ModuleLoadError, SpecError
from .spec import ModelSpec, TensorSpec

#: exports every cuvil-edge module has: its memory, the entry point and two address getters.
REQUIRED_EXPORTS = ("memory", "run", "cuvil_weights", "cuvil_arena")
#: bytes read (and hashed) per step when weights come from a file: hashed while still in cache
WEIGHTS_CHUNK = 4 << 20

#: weights in memory, or the path of a weights file read straight into linear memory
Weights = bytes | np.ndarray | str | os.PathLike[str]


class _FastCall:
    """Calls a ``() -> ()`` export through ``wasmtime_func_call_unchecked`` (about 1 us, vs 8+ us)."""

    def __init__(self, store: wasmtime.Store, func: wasmtime.Func) -> None:
        ty = func.type(store)
        if ty.params or ty.results:
            raise ModuleLoadError("the 'run' export must take and return nothing")
        self._store = store
        self._func = func
        self._raw = (ffi.wasmtime_val_raw_t * 1)()
        self._trap = ctypes.POINTER(ffi.wasm_trap_t)()

    def __call__(self) -> None:
        trap = self._trap
        err = ffi.wasmtime_func_call_unchecked(self._store._context(), ctypes.byref(self._func._func),
                                               self._raw, 0, ctypes.byref(trap))
        if err:
            raise InferenceTrap(str(wasmtime.WasmtimeError._from_ptr(err)))
        if trap:
            t = wasmtime.Trap._from_ptr(trap)
            self._trap = ctypes.POINTER(ffi.wasm_trap_t)()
            raise InferenceTrap(f"module trapped: {t.message}")


class WasmModel:
    """An instantiated model: weights loaded, inputs/outputs exposed as numpy views of linear memory.

    Views stay valid for the life of the instance (the module never grows its memory after start).
    Use ``input_views`` / ``run()`` / ``output_views`` for zero-copy serving, or ``predict``.
    ``weights`` given as a path are read in chunks straight into linear memory, so no copy of their size
    exists outside it; with ``weights_sha256`` they are hashed on the way in and a mismatch is a
    ``SpecError`` (one pass over the bytes, however they come).
    """

    def __init__(self, engine: wasmtime.Engine, module: wasmtime.Module, spec: ModelSpec,
                 weights: Weights, memory_limit: int | None = None,
                 epoch_deadline: int | None = None, weights_sha256: str = "") -> None:
        self.spec = spec
        exports = {e.name for e in module.exports}
        missing = [e for e in REQUIRED_EXPORTS if e not in exports]
        if missing:
            raise ModuleLoadError(f"module lacks required exports: {', '.join(missing)}")
        if module.imports:
            raise ModuleLoadError("module imports host functions; cuvil-edge modules import nothing")
        self._store = wasmtime.Store(engine)
        if memory_limit is not None:
            self._store.set_limits(memory_size=memory_limit)
        if epoch_deadline is not None:  # engines built with epoch_interruption only (costly: RUNTIME.md)
            self._store.set_epoch_deadline(epoch_deadline)
        try:
            instance = wasmtime.Instance(self._store, module, [])
        except (wasmtime.WasmtimeError, wasmtime.Trap) as exc:
            raise ModuleLoadError(f"cannot instantiate module: {str(exc).splitlines()[0]}") from exc
        ex = instance.exports(self._store)
        self._memory: wasmtime.Memory = ex["memory"]
        weights_base = ex["cuvil_weights"](self._store)
        arena_base = ex["cuvil_arena"](self._store)
        mem_len = self._memory.data_len(self._store)
        if weights_base < 0 or arena_base < 0:  # wasmtime returns i32 signed; an address is never negative
            raise ModuleLoadError(f"module reports a negative weights/arena address ({weights_base}, "
                                  f"{arena_base})")
        if weights_base + spec.weights_size > mem_len or arena_base + spec.arena_size > mem_len:
            raise SpecError("spec does not fit the module's memory (module and spec do not match)")
        self._load_weights(weights_base, weights, weights_sha256)
        self._exports = ex
        self._run = _FastCall(self._store, ex["run"])
        self.input_views = {t.name: self._tensor_view(arena_base, t) for t in spec.inputs}
        self.output_views = {t.name: self._tensor_view(arena_base, t) for t in spec.outputs}
        self._closed = False

    def _load_weights(self, base: int, weights: Weights, sha256: str) -> None:
        size = self.spec.weights_size
        dst = self._view(base, np.dtype(np.uint8), (size,)) if size else np.empty(0, np.uint8)
        with contextlib.ExitStack() as stack:
            if isinstance(weights, (str, os.PathLike)):
                f = stack.enter_context(open(weights, "rb", buffering=0))
                if (n := os.fstat(f.fileno()).st_size) != size:
                    raise SpecError(f"weights file is {n} bytes, spec says {size}")
                fill = lambda chunk, _start: _read_exactly(f, chunk)  # noqa: E731
            else:
                w = np.frombuffer(weights, dtype=np.uint8) if not isinstance(weights, np.ndarray) else weights
                if w.nbytes != size:
                    raise SpecError(f"weights are {w.nbytes} bytes, spec says {size}")
                w = w.view(np.uint8).reshape(-1)
                fill = lambda chunk, start: np.copyto(chunk, w[start:start + chunk.nbytes])  # noqa: E731
            digest = hashlib.sha256()
            for start in range(0, size, WEIGHTS_CHUNK):
                chunk = dst[start:start + WEIGHTS_CHUNK]
                fill(chunk, start)
                if sha256:
                    digest.update(chunk)  # while the chunk is still in cache
        if sha256 and digest.hexdigest() != sha256:
            raise SpecError("weights do not match their recorded sha256")

    def _view(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A view of linear memory; ``get_buffer_ptr`` does no bounds check, so one outside memory is refused
        here (otherwise numpy would read and write host memory)."""
        if any(d < 0 for d in shape):
            raise SpecError(f"tensor shape {shape} has a negative dimension")
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset < 0 or offset + n > self._memory.data_len(self._store):
            raise SpecError(f"{n} bytes at {offset} lie outside the module's linear memory")
        buf = self._memory.get_buffer_ptr(self._store, n, offset)
        return np.frombuffer(buf, dtype=dtype, count=n // dtype.itemsize).reshape(shape)

    def _tensor_view(self, base: int, t: TensorSpec) -> np.ndarray:
        return self._view(base + t.offset, np.dtype(t.dtype), t.shape)

    def run(self) -> None:
        """One inference on whatever is in ``input_views``; results land in ``output_views``."""
        if self._closed:
            raise RuntimeError("model is closed")
        self._run()

    def export_function(self, name: str) -> _FastCall:
        """A fast caller for another ``() -> ()`` export (profiling builds export one per node)."""
        try:
            func = self._exports[name]
        except KeyError:
            raise ModuleLoadError(f"module has no export {name!r}") from None
        return _FastCall(self._store, func)

    def set_inputs(self, inputs: Mapping[str, Any] | Sequence[Any]) -> None:
        for t, a in zip(self.spec.inputs, check_inputs(self.spec.inputs, inputs)):
            np.copyto(self.input_views[t.name], a, casting="same_kind")

    def predict(self, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
        """Copy inputs in, run once, return copies of the outputs (safe to keep)."""
        self.set_inputs(inputs)
        self.run()
        return {k: v.copy() for k, v in self.output_views.items()}

    def close(self) -> None:
        if not getattr(self, "_closed", True):
            self._closed = True
            self.input_views = {}
            self.output_views = {}
            self._run = None  # type: ignore[assignment]
            self._exports = None
            self._store = None  # type: ignore[assignment]

    def __enter__(self) -> WasmModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_exactly(f: Any, buf: np.ndarray) -> None:
    got = 0
    while got < buf.nbytes:  # a raw read may return less than asked
        n = f.readinto(buf[got:])
        if not n:
            raise SpecError("weights file shrank while it was being read")
        got += n


def check_inputs(specs: Sequence[TensorSpec], inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
    """Inputs in spec order, checked against names, count, shape and dtype kind (not yet cast)."""
    if isinstance(inputs, Mapping):
        unknown = set(inputs) - {t.name for t in specs}
        missing = [t.name for t in specs if t.name not in inputs]
        if unknown or missing:
            detail = (f"missing {missing} " if missing else "") + (
                f"unknown {sorted(unknown)}" if unknown else "")
            raise InferenceInputError(f"inputs must be exactly {[t.name for t in specs]}: {detail}")
        arrays = [inputs[t.name] for t in specs]
    else:
        arrays = list(inputs)
        if len(arrays) != len(specs):
            raise InferenceInputError(f"model takes {len(specs)} inputs, got {len(arrays)}")
    checked = []
    for t, a in zip(specs, arrays):
        a = np.asarray(a)
        if a.shape != t.shape:
            raise InferenceInputError(f"input {t.name!r} must have shape {t.shape}, got {a.shape}")
        if a.dtype != np.dtype(t.dtype) and a.dtype.kind != np.dtype(t.dtype).kind:
            # float64 -> float32 is a convenience; int/bool/complex for a float input is a bug
            raise InferenceInputError(f"input {t.name!r} must be {t.dtype}, got {a.dtype}")
        checked.append(a)
    return checked
