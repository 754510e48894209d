"""Sandbox supervision: each model runs in its own worker process that a watchdog can kill.

Why processes: wasmtime can stop a runaway guest in-process only through fuel or epoch checks, which
instrument every loop back-edge and cost 37-55% on GEMM kernels (docs/RUNTIME.md). A worker process
runs the kernels uninstrumented; the parent waits for its reply at most the deadline and otherwise
kills it (SIGKILL), raises ``DeadlineExceeded`` and starts a fresh worker for the next request. Other
models live in other workers and never notice.

I/O goes through one shared-memory block per model, split into ``slots`` (one per request of a
batch): the parent writes inputs into a slot and reads outputs from it, the worker copies between the
slot and its linear memory (one memcpy each way); the pipe only carries "run n" and n latencies.
Memory: the worker's ``Store`` is capped (``memory_cap_bytes``), so a module whose minimum exceeds the
cap fails to instantiate and ``memory.grow`` past it returns -1.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from . import errors
from .cache import ModuleCache
from .errors import DeadlineExceeded, InferenceTrap, RuntimeWasmError, WorkerCrashed
from .instance import WasmModel, check_inputs
from .loader import instantiate, read_model_dir
from .spec import ModelSpec, TensorSpec, VariantSpec, from_storage, storage_dtype
from .variants import HostProbes, deterministic_variant

_ALIGN = 64  # bytes: every tensor in a slot starts on a cache line


@lru_cache(maxsize=1)
def _context() -> Any:
    """forkserver: a (re)start forks a clean, single-threaded server that has numpy and wasmtime imported
    (milliseconds), instead of forking the multi-threaded agent or starting a new interpreter."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


@dataclass(frozen=True)
class ModelSource:
    """Everything a worker needs to (re)load one model variant; it travels to each new worker.

    ``weights`` is bytes, or the path of a weights file (``from_dir``): each worker then reads it straight
    into its linear memory, checked against the spec's (tree) hash, so weights are neither pickled to
    workers nor held by the supervising process."""

    spec: ModelSpec
    wasm: bytes
    weights: bytes | str
    variant: VariantSpec
    cache_dir: str = ""  # precompiled-module cache; empty: the default directory
    deterministic: bool = False  # determinism mode: the fleet-wide variant and engine settings

    @classmethod
    def from_dir(cls, path: str | os.PathLike[str], variant: str | None = None,
                 probes: HostProbes | None = None, cache_dir: str = "",
                 deterministic: bool = False) -> ModelSource:
        """A compiled model directory (an installed slot): its named variant, or the best for this host
        (in determinism mode: the one every host runs)."""
        spec, chosen, wasm, weights = read_model_dir(path, variant, probes, deterministic)
        return cls(spec, wasm, str(weights.resolve()), chosen, cache_dir, deterministic)

    def in_mode(self, deterministic: bool) -> ModelSource:
        """This source as a policy with ``deterministic`` runs it. Determinism mode needs the module every
        host runs, under the deterministic engine settings: a source loaded for the host's best variant is
        switched when it already holds that module, else refused (``PolicyError``) rather than served
        relaxed while the policy says deterministic."""
        if not deterministic or self.deterministic:
            return self
        want = deterministic_variant(self.spec.variants)
        if want.name != self.variant.name:
            raise errors.PolicyError(
                f"the policy is deterministic but this source holds variant {self.variant.name!r}; "
                f"determinism mode runs {want.name!r}: load it with ModelSource.from_dir(path, "
                "deterministic=True)")
        return replace(self, deterministic=True)

    def load(self, memory_cap_bytes: int, threads: int = 1) -> WasmModel:
        cache = ModuleCache(self.cache_dir) if self.cache_dir else None
        return instantiate(self.spec, self.wasm, self.weights, self.variant, cache, memory_cap_bytes,
                           self.deterministic, threads)


def same_signature(a: ModelSpec, b: ModelSpec) -> bool:
    """Interchangeable for callers: same input and output names, dtypes and shapes (offsets may differ)."""
    sig = lambda s: [(t.name, t.dtype, t.shape) for t in (*s.inputs, *s.outputs)]  # noqa: E731
    return sig(a) == sig(b)


Views = dict[str, np.ndarray]


def _slot_bytes(spec: ModelSpec) -> int:
    return sum(-(-t.nbytes // _ALIGN) * _ALIGN for t in (*spec.inputs, *spec.outputs))


def _slot_views(buf: memoryview, spec: ModelSpec, slot: int) -> tuple[Views, Views]:
    """Numpy views of one slot's inputs and outputs inside the shared block (same layout both sides)."""
    offset = slot * _slot_bytes(spec)

    def view(t: TensorSpec) -> np.ndarray:
        nonlocal offset
        arr = np.ndarray(t.shape, dtype=storage_dtype(t.dtype), buffer=buf, offset=offset)
        offset += -(-t.nbytes // _ALIGN) * _ALIGN
        return arr

    inputs = {t.name: view(t) for t in spec.inputs}
    return inputs, {t.name: view(t) for t in spec.outputs}


def _as_error(name: str, message: str) -> RuntimeWasmError:
    """Rebuild a worker's error in the parent: the runtime's own types survive, anything else is a crash."""
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, RuntimeWasmError):
        return cls(message)
    return WorkerCrashed(f"{name}: {message}")


def _worker_main(conn: Connection, source: ModelSource, shm_name: str, slots: int, memory_cap: int,
                 threads: int) -> None:
    """Worker process: load once, then per message ``n`` run slots 0..n-1 and reply per-slot results."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when a worker ends
    try:
        shm = shared_memory.SharedMemory(name=shm_name)
        model = source.load(memory_cap, threads)
    except Exception as exc:  # reported to the parent, which raises it in the caller
        conn.send(("error", type(exc).__name__, str(exc)))
        return
    conn.send(("ready", os.getpid()))
    views = [_slot_views(shm.buf, source.spec, i) for i in range(slots)]
    while True:
        try:
            n = conn.recv()
        except EOFError:
            break
        if n is None:
            break
        results: list[float | tuple[str, str]] = []
        for inputs, outputs in views[:n]:
            for name, v in inputs.items():
                np.copyto(model.input_views[name], v)
            start = time.perf_counter()
            try:
                model.run()
            except InferenceTrap as exc:
                results.append((type(exc).__name__, str(exc)))
                continue
            results.append((time.perf_counter() - start) * 1e3)
            for name, v in outputs.items():
                np.copyto(v, model.output_views[name])
        conn.send(results)
    del views
    model.close()
    shm.close()


class SupervisedModel:
    """One model served by a supervised worker process; ``run``/``predict`` mirror ``WasmModel``."""

    def __init__(self, source: ModelSource, memory_cap_bytes: int, slots: int = 1,
                 start_timeout_s: float = 60.0, threads: int = 1) -> None:
        """``threads``: how many the worker runs each inference on (0: every available core)."""
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.spec, self.slots, self.variant = source.spec, slots, source.variant.name
        self.restarts = 0
        self.deadline_kills = 0  # restarts because a dispatch overran its deadline (runaway guests)
        self._source, self._memory_cap, self.start_timeout_s = source, memory_cap_bytes, start_timeout_s
        self._threads = threads
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Connection | None = None
        self._ready = False
        self._closed = False
        self._shm = shared_memory.SharedMemory(create=True, size=max(_slot_bytes(source.spec) * slots, 1))
        self._views = [_slot_views(self._shm.buf, source.spec, i) for i in range(slots)]
        try:
            with self._lock:
                self._ensure_ready()
        except BaseException:
            self.close()
            raise

    def runs(self, source: ModelSource, memory_cap_bytes: int, slots: int, threads: int) -> bool:
        """Whether this worker is what ``SupervisedModel(source, memory_cap_bytes, slots, threads=threads)``
        would start (a worker loaded elsewhere, e.g. by an install's self-test, can then serve as it)."""
        return (self._source == source and self._memory_cap == memory_cap_bytes and self.slots == slots
                and self._threads == threads and not self._closed)

    # -- I/O ------------------------------------------------------------------------------------
    def slot(self, i: int) -> tuple[Views, Views]:
        """(inputs, outputs) views of slot ``i``: write inputs there for zero-copy serving."""
        return self._views[i]

    @property
    def input_views(self) -> Views:
        return self._views[0][0]

    @property
    def output_views(self) -> Views:
        return self._views[0][1]

    def set_inputs(self, inputs: Mapping[str, Any] | Sequence[Any], slot: int = 0) -> None:
        views = self._views[slot][0]
        for t, a in zip(self.spec.inputs, check_inputs(self.spec.inputs, inputs)):
            np.copyto(views[t.name], a, casting="same_kind")

    def predict(self, inputs: Mapping[str, Any] | Sequence[Any], timeout_s: float) -> dict[str, np.ndarray]:
        """Copy inputs in, run once under ``timeout_s``, return copies of the outputs."""
        self.set_inputs(inputs)
        result = self.run(1, timeout_s)[0]
        if isinstance(result, Exception):
            raise result
        return {t.name: from_storage(t.dtype, self.output_views[t.name].copy()) for t in self.spec.outputs}

    # -- running --------------------------------------------------------------------------------
    def run(self, n: int, timeout_s: float) -> list[float | RuntimeWasmError]:
        """Run slots 0..n-1 back to back in one dispatch; per slot its compute ms or its error.

        Raises ``DeadlineExceeded`` when the whole dispatch takes longer than ``timeout_s`` (the worker
        is killed and a new one started) and ``WorkerCrashed`` when the worker dies.
        """
        if not 1 <= n <= self.slots:
            raise ValueError(f"n must be in 1..{self.slots}")
        with self._lock:
            self._ensure_ready()
            assert self._conn is not None
            try:
                self._conn.send(n)
                done = self._conn.poll(timeout_s)
                replies = self._conn.recv() if done else None
            except (EOFError, OSError) as exc:
                self._restart()
                raise WorkerCrashed(f"worker for {self.spec.name!r} died ({exc or type(exc).__name__}); "
                                    "restarted") from None
            if replies is None:
                self.deadline_kills += 1
                self._restart()
                raise DeadlineExceeded(f"{self.spec.name!r} ran past its {timeout_s * 1e3:.0f} ms deadline; "
                                       "worker killed and restarted")
        return [r if isinstance(r, float) else _as_error(*r) for r in replies]

    def wait_ready(self) -> None:
        """Block until the worker has loaded the model (after a restart: process start + compile)."""
        with self._lock:
            self._ensure_ready()

    def _ensure_ready(self) -> None:
        if self._closed:
            raise RuntimeError("supervised model is closed")
        if self._proc is None:
            self._spawn()
        if self._ready:
            return
        assert self._conn is not None
        try:
            msg = self._conn.recv() if self._conn.poll(self.start_timeout_s) else None
        except (EOFError, OSError):
            msg = ("error", "WorkerCrashed", "worker exited while loading the model")
        if msg is None:
            msg = ("error", "WorkerCrashed", f"worker did not load the model in {self.start_timeout_s} s")
        if msg[0] == "error":
            self._stop()
            raise _as_error(msg[1], msg[2])
        self._ready = True

    def _spawn(self) -> None:
        ours, theirs = _context().Pipe()
        proc = _context().Process(target=_worker_main, name=f"cuvil-worker-{self.spec.name}", daemon=True,
                            args=(theirs, self._source, self._shm.name, self.slots, self._memory_cap,
                                  self._threads))
        proc.start()
        theirs.close()
        self._proc, self._conn, self._ready = proc, ours, False

    def _stop(self, graceful: bool = False) -> None:
        """End the worker: ask it to exit when ``graceful``, kill it otherwise (or if it does not exit)."""
        proc, conn = self._proc, self._conn
        self._proc, self._conn, self._ready = None, None, False
        if proc is None or conn is None:
            return
        if graceful:
            try:
                conn.send(None)
            except OSError:
                pass
            proc.join(2.0)
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)
        conn.close()

    def _restart(self) -> None:
        """Kill now, start the replacement now (it loads while the caller handles the error)."""
        self._stop()
        self.restarts += 1
        self._spawn()

    def restart(self) -> None:
        """Replace the worker (e.g. to drop a model's accumulated state); counted in ``restarts``."""
        with self._lock:
            if self._closed:
                raise RuntimeError("supervised model is closed")
            self._restart()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop(graceful=True)
            self._views = []
            try:
                self._shm.close()
            except BufferError:
                pass  # a caller still holds a slot view; the mapping goes when that view does
            self._shm.unlink()

    def __enter__(self) -> SupervisedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
