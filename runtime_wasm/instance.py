"""Run one compiled model in a wasmtime sandbox: zero-copy I/O views and one wasm call per inference."""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import wasmtime
from wasmtime import _ffi as ffi  # private: the unchecked call path (wasmtime is pinned for this)

from .contention import ThreadChooser
from .digest import FlatDigest, check_tree
from .errors import InferenceInputError, InferenceTrap, ModuleLoadError, SpecError
from .pages import advise_huge_pages
from .spec import (
    EXPORT_ARENA,
    EXPORT_MEMORY,
    EXPORT_RESET,
    EXPORT_RUN,
    EXPORT_SET_THREADS,
    EXPORT_STACK_POINTER,
    EXPORT_STACKS,
    EXPORT_STOP,
    EXPORT_THREAD_STRIDE,
    EXPORT_WEIGHTS,
    EXPORT_WORKER,
    LEGACY_THREAD_STRIDE,
    REQUIRED_EXPORTS,
    STORED_DTYPES,
    THREAD_EXPORTS,
    ModelSpec,
    StateSpec,
    TensorSpec,
    by_canonical_name,
    caller_outputs,
    check_index_bound,
    encode_strings,
    storage_dtype,
    to_storage,
)

#: bytes filled per step where no tree hash is checked (a spec without one, or weights not checked)
WEIGHTS_CHUNK = 4 << 20
#: epoch ticks a parked thread may wait: it must never be interrupted (only the caller's run has a deadline)
_NO_DEADLINE = 1 << 40

class OpenFile(Protocol):
    """An open file, by its descriptor (a file object, or anything that holds one)."""

    def fileno(self) -> int: ...


#: weights in memory, or a weights file read straight into linear memory: its path, or an open file (read
#: from its start, whatever its position; the caller keeps it open: a file held since its lookup cannot be
#: pulled away by a rename or an unlink meanwhile)
Weights = bytes | np.ndarray | str | os.PathLike[str] | OpenFile


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


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def serving_cores() -> int:
    """Cores a served model uses by default: all but one, which the agent, the app beside it and the OS
    keep (a peer thread descheduled for them stalls every split op)."""
    return max(1, available_cores() - 1)


def resolve_threads(requested: int, capacity: int) -> int:
    """Threads to run a module on: ``requested`` (0: every available core), at most ``capacity``
    (``ModelSpec.threads``, what the module was built for)."""
    if requested < 0:
        raise ValueError(f"threads must be 0 (all cores) or more, got {requested}")
    return max(1, min(capacity, requested or available_cores()))


class _SharedMemory(wasmtime.SharedMemory):
    """wasmtime-py 50.0.1 wraps the pointer once too often when passing a shared memory as an import."""

    def _as_extern(self) -> ffi.wasmtime_extern_t:
        union = ffi.wasmtime_extern_union(sharedmemory=self.ptr())
        return ffi.wasmtime_extern_t(ffi.WASMTIME_EXTERN_SHAREDMEMORY, union)


def _shared_memory_type(module: wasmtime.Module) -> wasmtime.MemoryType | None:
    """The shared memory a threaded module imports, None for a plain one; any other import is refused."""
    imports = module.imports
    if not imports:
        return None
    ty = imports[0].type
    if len(imports) > 1 or not isinstance(ty, wasmtime.MemoryType) or not ty.is_shared \
            or ty.limits.max is None:
        raise ModuleLoadError("module imports host functions; cuvil-edge modules import at most one "
                              "fixed-size shared memory")
    return ty


def _sized_for(ty: wasmtime.MemoryType, spec: ModelSpec, threads: int) -> wasmtime.MemoryType:
    """The shared memory for running on ``threads``: what the spec's table says they need, between the
    module's initial and max (specs without the table, built when initial was max: max)."""
    lim = ty.limits
    need = spec.memory_for(threads)
    pages = lim.max if need is None else min(lim.max, max(lim.min, -(-need // 65536)))
    return wasmtime.MemoryType(wasmtime.Limits(pages, lim.max), shared=True)


class _Workers:
    """Threads 1..n-1 of a threaded model: each its own instance over the shared memory, parked in
    ``cuvil_worker`` between jobs (no Python runs per inference). A trap in one stops them all."""

    def __init__(self, engine: wasmtime.Engine, module: wasmtime.Module, memory: _SharedMemory,
                 count: int, epoch: bool, stacks: int, stride: int) -> None:
        self.error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        for tid in range(1, count):
            store = wasmtime.Store(engine)
            if epoch:
                store.set_epoch_deadline(_NO_DEADLINE)
            ex = wasmtime.Instance(store, module, [memory]).exports(store)
            ex[EXPORT_STACK_POINTER].set_value(store, stacks + tid * stride)  # its region's top
            t = threading.Thread(target=self._park, args=(store, ex, tid), daemon=True,
                                 name=f"cuvil-thread-{tid}")
            self._threads.append(t)
        for t in self._threads:
            t.start()

    def _park(self, store: wasmtime.Store, ex: Any, tid: int) -> None:
        try:
            ex[EXPORT_WORKER](store, tid)
        except (wasmtime.WasmtimeError, wasmtime.Trap) as exc:
            if self.error is None:
                self.error = exc
            ex[EXPORT_STOP](store)  # the others (and the caller's barrier) wake up and stop

    def join(self) -> None:
        for t in self._threads:
            t.join()
        self._threads = []


def _stop_workers(stop: _FastCall, workers: _Workers) -> None:
    stop()
    workers.join()


class WasmModel:
    """An instantiated model: weights loaded, inputs/outputs exposed as numpy views of linear memory.

    Views stay valid for the life of the instance (the module never grows its memory after start).
    Use ``input_views`` / ``run()`` / ``output_views`` for zero-copy serving, or ``predict``.
    A stateful model (``spec.states``) carries its state from one run to the next in linear memory,
    starting from the initial values; ``reset_state`` restores them.
    On more than one thread, each run goes on the count ``thread_chooser`` picks (the full count, or 1
    while another process holds a core: ``runtime_wasm.contention``); None runs every one on ``threads``.
    ``weights`` given as a path are read in chunks straight into linear memory, so no copy of their size
    exists outside it; with ``check_weights`` they are hashed on the way in against the spec's tree hash
    (else its flat sha256) and a mismatch is a ``SpecError`` (one pass over the bytes, however they come).
    """

    def __init__(self, engine: wasmtime.Engine, module: wasmtime.Module, spec: ModelSpec,
                 weights: Weights, memory_limit: int | None = None,
                 epoch_deadline: int | None = None, check_weights: bool = False, threads: int = 1) -> None:
        self.spec = spec
        self.threads = 1
        self.thread_chooser: ThreadChooser | None = None
        self._closed = True  # until fully built: close() of a half-built model does nothing
        shared = _shared_memory_type(module)
        exports = self._export_names = {e.name for e in module.exports}
        required = REQUIRED_EXPORTS if shared is None else (*REQUIRED_EXPORTS[1:], *THREAD_EXPORTS)
        missing = [e for e in required if e not in exports]
        if missing:
            raise ModuleLoadError(f"module lacks required exports: {', '.join(missing)}")
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self._store = wasmtime.Store(engine)
        if epoch_deadline is not None:  # engines built with epoch_interruption only (costly: RUNTIME.md)
            self._store.set_epoch_deadline(epoch_deadline)
        self._shared: _SharedMemory | None = None
        try:
            if shared is None:
                if memory_limit is not None:
                    self._store.set_limits(memory_size=memory_limit)
                instance = wasmtime.Instance(self._store, module, [])
            else:
                # sized once for the threads it runs (the module never grows it): the limit is checked here
                shared = _sized_for(shared, spec, min(threads, spec.threads))
                size = shared.limits.min * 65536
                if memory_limit is not None and size > memory_limit:
                    raise ModuleLoadError(f"module needs {size} bytes of memory, the limit is {memory_limit}")
                self._shared = _SharedMemory(engine, shared)
                instance = wasmtime.Instance(self._store, module, [self._shared])
        except (wasmtime.WasmtimeError, wasmtime.Trap) as exc:
            raise ModuleLoadError(f"cannot instantiate module: {str(exc).splitlines()[0]}") from exc
        ex = instance.exports(self._store)
        self._memory: wasmtime.Memory | None = ex[EXPORT_MEMORY] if shared is None else None
        weights_base = ex[EXPORT_WEIGHTS](self._store)
        arena_base = ex[EXPORT_ARENA](self._store)
        mem_len = self._mem_len()
        if shared is not None and weights_base == 0:  # its static data grew into the fixed-address weights
            raise ModuleLoadError("module reports no room for its weights (its static data overlaps them)")
        if weights_base < 0 or arena_base < 0:  # wasmtime returns i32 signed; an address is never negative
            raise ModuleLoadError(f"module reports a negative weights/arena address ({weights_base}, "
                                  f"{arena_base})")
        if weights_base + spec.weights_size > mem_len or arena_base + spec.arena_size > mem_len:
            raise SpecError("spec does not fit the module's memory (module and spec do not match)")
        self._load_weights(weights_base, weights, check_weights)
        self._exports = ex
        self._run = _FastCall(self._store, ex[EXPORT_RUN])
        self.input_views = {t.name: self._tensor_view(arena_base, t) for t in spec.inputs}
        self.output_views = {t.name: self._tensor_view(arena_base, t) for t in spec.outputs}
        #: each state's current value (read-only between runs: write it through ``reset_state``)
        self.state_views = {t.name: self._tensor_view(arena_base, t) for t in spec.states}
        self._state_init = [self._view(weights_base + t.init_offset, storage_dtype(t.dtype), t.shape)
                            for t in spec.states]
        self._workers: _Workers | None = None
        self._engine, self._module, self._epoch = engine, module, epoch_deadline is not None
        self._closed = False
        self.reset_state()
        if shared is not None:
            self._start_threads(min(threads, spec.threads))
            if self.threads > 1:
                self.thread_chooser = ThreadChooser(self.threads)

    def _start_threads(self, count: int) -> None:
        """Thread 0 is the caller of ``run``; threads 1..count-1 park inside the module until a job."""
        assert self._shared is not None
        ex = self._exports
        ex[EXPORT_SET_THREADS](self._store, count)
        self.threads = self._running = count
        if count > 1:
            stacks = ex[EXPORT_STACKS](self._store)  # thread t's stack: the t-th region, growing down
            stride = ex[EXPORT_THREAD_STRIDE](self._store) if EXPORT_THREAD_STRIDE in self._export_names \
                else LEGACY_THREAD_STRIDE
            self._workers = _Workers(self._engine, self._module, self._shared, count, self._epoch, stacks,
                                     stride)
            self._finalizer = weakref.finalize(self, _stop_workers, _FastCall(self._store, ex[EXPORT_STOP]),
                                               self._workers)

    def _mem_len(self) -> int:
        return self._shared.data_len() if self._shared is not None else self._memory.data_len(self._store)

    def _load_weights(self, base: int, weights: Weights, check: bool) -> None:
        spec = self.spec
        size = spec.weights_size
        dst = self._view(base, np.dtype(np.uint8), (size,)) if size else np.empty(0, np.uint8)
        advise_huge_pages(dst.ctypes.data, size)  # written in full below: one fault per huge page
        with contextlib.ExitStack() as stack:
            if isinstance(weights, (str, os.PathLike)) or hasattr(weights, "fileno"):
                fd = stack.enter_context(open(weights, "rb", buffering=0)).fileno() \
                    if isinstance(weights, (str, os.PathLike)) else weights.fileno()
                if (n := os.fstat(fd).st_size) != size:
                    raise SpecError(f"weights file is {n} bytes, spec says {size}")
                fill = lambda piece, start: _read_exactly(fd, piece, start)  # noqa: E731
            else:
                w = np.frombuffer(weights, dtype=np.uint8) if not isinstance(weights, np.ndarray) else weights
                if w.nbytes != size:
                    raise SpecError(f"weights are {w.nbytes} bytes, spec says {size}")
                w = w.view(np.uint8).reshape(-1)
                fill = lambda piece, start: np.copyto(piece, w[start:start + piece.nbytes])  # noqa: E731
            if check and spec.weights_tree_sha256:  # read and hashed on every core at once
                check_tree(spec.weights_tree_sha256, spec.weights_tree_chunk, dst, available_cores(), fill)
                return
            digest = stack.enter_context(FlatDigest(spec.weights_sha256, WEIGHTS_CHUNK)) \
                if check and spec.weights_sha256 else None
            for start in range(0, size, WEIGHTS_CHUNK):
                chunk = dst[start:start + WEIGHTS_CHUNK]
                fill(chunk, start)
                if digest is not None:
                    digest.update(chunk)
            if digest is not None:
                digest.check()

    def _view(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A view of linear memory; ``get_buffer_ptr`` does no bounds check, so one outside memory is refused
        here (otherwise numpy would read and write host memory)."""
        if any(d < 0 for d in shape):
            raise SpecError(f"tensor shape {shape} has a negative dimension")
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset < 0 or offset + n > self._mem_len():
            raise SpecError(f"{n} bytes at {offset} lie outside the module's linear memory")
        if self._shared is not None:
            base = ctypes.addressof(self._shared.data_ptr().contents)
            buf = (ctypes.c_ubyte * n).from_address(base + offset)
        else:
            buf = self._memory.get_buffer_ptr(self._store, n, offset)
        return np.frombuffer(buf, dtype=dtype, count=n // dtype.itemsize).reshape(shape)

    def _tensor_view(self, base: int, t: TensorSpec | StateSpec) -> np.ndarray:
        return self._view(base + t.offset, storage_dtype(t.dtype), t.shape)

    def run(self) -> None:
        """One inference on whatever is in ``input_views``; results land in ``output_views``."""
        if self._closed:
            raise RuntimeError("model is closed")
        if self._workers is None:
            self._run()
            return
        chooser = self.thread_chooser
        count = chooser.next() if chooser is not None else self.threads
        if count != self._running:  # between runs every other thread is parked: it takes effect next job
            self._exports[EXPORT_SET_THREADS](self._store, count)
            self._running = count
        start = time.perf_counter()
        try:
            self._run()
        except InferenceTrap:
            self._restart_threads()  # the job is void; the next one starts clean
            raise
        if self._workers.error is not None:  # a parked thread trapped and stopped this job
            err = self._workers.error
            self._restart_threads()
            raise InferenceTrap(f"module trapped in a worker thread: {err}")
        if chooser is not None:
            chooser.record(count, time.perf_counter() - start)

    def reset_state(self) -> None:
        """Put every state back to its initial value (copied from the weights, which hold it), as if no
        run had happened; a stateless model has nothing to reset."""
        if self._closed:
            raise RuntimeError("model is closed")
        for view, init in zip(self.state_views.values(), self._state_init):
            np.copyto(view, init)

    def _restart_threads(self) -> None:
        assert self._workers is not None
        self._finalizer()  # stop and join every parked thread
        self._exports[EXPORT_RESET](self._store)
        self._start_threads(self.threads)

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
        return caller_outputs(self.spec.outputs, self.output_views)

    def close(self) -> None:
        if not getattr(self, "_closed", True):
            self._closed = True
            if self._workers is not None:
                self._finalizer()
                self._workers = None
            self.input_views = {}
            self.output_views = {}
            self.state_views = {}
            self._state_init = []
            self._run = None  # type: ignore[assignment]
            self._exports = None
            self._store = None  # type: ignore[assignment]

    def __enter__(self) -> WasmModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_exactly(fd: int, buf: np.ndarray, offset: int) -> None:
    """Fill ``buf`` from ``offset`` of the file (positioned: several threads read one file at once)."""
    got = 0
    while got < buf.nbytes:  # a read may return less than asked
        n = os.preadv(fd, [buf[got:]], offset + got)
        if not n:
            raise SpecError("weights file shrank while it was being read")
        got += n


def check_inputs(specs: Sequence[TensorSpec], inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
    """Inputs in spec order, checked against names (or their aliases), count, shape, dtype kind (not yet
    cast) and, for ids into a table, the table's bounds."""
    if isinstance(inputs, Mapping):
        named = by_canonical_name(specs, inputs, "input")  # a TFLite input by its tensor name too
        arrays = [named[t.name] for t in specs]
    else:
        arrays = list(inputs)
        if len(arrays) != len(specs):
            raise InferenceInputError(f"model takes {len(specs)} inputs, got {len(arrays)}")
    checked = []
    for t, a in zip(specs, arrays):
        a = np.asarray(a)
        if a.shape != t.shape:
            raise InferenceInputError(f"input {t.name!r} must have shape {t.shape}, got {a.shape}")
        want = storage_dtype(t.dtype)
        if want.kind == "S":
            a = encode_strings(t, a)
        elif t.dtype in STORED_DTYPES:
            a = to_storage(t, a)
        if a.dtype != want and a.dtype.kind != want.kind:
            # float64 -> float32 is a convenience; int/bool/complex for a float input is a bug
            raise InferenceInputError(f"input {t.name!r} must be {t.dtype}, got {a.dtype}")
        check_index_bound(t, a, f"input {t.name!r}")
        checked.append(a)
    return checked
