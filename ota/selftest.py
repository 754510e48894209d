"""An install's self-test (``SelfTester``), and what it measured on the golden vectors, kept with the slot it
tested.

The rollout's golden gate (``cuvil_edge.fleet.gates.golden_gate``) judges these figures, which the agent
sends under ``models.<m>.golden`` in its telemetry summaries (``ota.protocol.SUMMARY_DATA_SCHEMA``): how
many vectors ran, the largest absolute error against their expected outputs, the tolerance applied, the
variant that ran them and whether in determinism mode (where the gate wants the error exactly 0). The
installer writes the record (``SELFTEST_FILE``) into the slot before it becomes active; a slot installed
by an older agent has none, and then nothing is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime_wasm import schema
from runtime_wasm.policy import RuntimePolicy

from .config import OtaConfig
from .errors import FormatError, SelfTestFailed
from .golden import decode_vector, release_vectors
from .metadata import Manifest
from .store import read_json

if TYPE_CHECKING:  # the runtime (wasmtime, worker processes) loads with the first self-test
    from runtime_wasm.cache import ModuleCache
    from runtime_wasm.supervisor import ModelSource, SupervisedModel

SELFTEST_FILE = "selftest.json"
#: ``SELFTEST_FILE``: a ``GoldenReport``
GOLDEN_SCHEMA = schema.record({
    "vectors": schema.integer(), "max_abs": schema.number(0), "atol": schema.number(0),
    "variant": schema.text(256), "deterministic": schema.boolean()})


@dataclass(frozen=True)
class GoldenReport:
    """One self-test's figures. ``atol`` is the absolute bound the check allowed at the largest expected
    magnitude (``selftest_atol + selftest_rtol * max |expected|``): every error of a passing self-test is
    within it, so the gate fails a device only on a stricter ``--gate-golden-atol`` or in determinism mode."""

    vectors: int
    max_abs: float
    atol: float
    variant: str
    deterministic: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class GoldenCheck:
    """``np.allclose`` per output, as the self-test always judged, measuring the errors as it goes."""

    def __init__(self, rtol: float, atol: float) -> None:
        self.rtol, self.atol = rtol, atol
        self.vectors, self.max_abs, self.largest = 0, 0.0, 0.0

    def differing(self, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> list[str]:
        """The outputs of one vector that are missing or not close (sorted names of the mismatch when the
        output names differ); their errors are counted only when every output is present."""
        if set(got) != set(want):
            return sorted(set(got) ^ set(want))
        self.vectors += 1
        bad = []
        for name, expected in want.items():
            a, b = np.asarray(got[name], np.float64), np.asarray(expected, np.float64)
            if a.shape != b.shape or not np.allclose(a, b, rtol=self.rtol, atol=self.atol):
                bad.append(name)
                continue
            if b.size:  # equal values (infinities included) count 0, not inf - inf
                self.max_abs = max(self.max_abs, float(np.max(np.where(a == b, 0.0, np.abs(a - b)))))
                self.largest = max(self.largest, float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0)))
        return bad

    def report(self, variant: str, deterministic: bool) -> GoldenReport:
        return GoldenReport(self.vectors, self.max_abs, self.atol + self.rtol * self.largest, variant,
                            deterministic)


def read_report(slot: Path) -> dict[str, Any] | None:
    """The slot's self-test record as summaries carry it; None when it has none or it is unreadable (it
    only informs a gate: a damaged record must not stop serving)."""
    try:
        return read_json(slot / SELFTEST_FILE, None, GOLDEN_SCHEMA)
    except FormatError:
        return None


class SelfTester:
    """Runs a slot's golden vectors before its commit point, in a supervised worker under the memory cap
    the model will be served with (``policy``) and the self-test deadline (``config``): a module that
    loops, or that would not fit when served, fails here, not in the agent afterwards. With ``keep_warm``
    an install's or rollback's worker runs with the policy's batch slots and threads and is kept, loaded,
    for the server to ``take`` once that slot is active, so a switch waits for no model load."""

    def __init__(self, config: OtaConfig, policy: RuntimePolicy, cache: ModuleCache,
                 step: Callable[[str], None], keep_warm: bool = False) -> None:
        self.config, self.policy, self.cache, self.keep_warm = config, policy, cache, keep_warm
        self._step = step
        self._warm: tuple[Path, SupervisedModel] | None = None

    def run(self, slot: Path, manifest: Manifest, keep: bool = True) -> GoldenReport:
        """Precompile the variant this host will run, then run every golden vector through it. Whatever
        goes wrong is a ``SelfTestFailed``; a pass returns what it measured (kept with the slot for the
        rollout's golden gate) and, with ``keep`` and ``keep_warm``, keeps the worker (not a stateful
        model's: the vectors moved its state)."""
        what = f"{manifest.name} release {manifest.release}"
        try:
            vectors = release_vectors(slot, manifest.golden)
        except FormatError as exc:
            raise SelfTestFailed(f"{what}: {exc}") from exc
        if not vectors:
            raise SelfTestFailed(f"{what}: bundle carries no golden vectors to self-test with")
        from runtime_wasm.engine import EngineConfig
        from runtime_wasm.supervisor import ModelSource

        try:
            det = self.policy.deterministic  # the variant and engine it will be served with
            source = ModelSource.from_dir(slot, cache_dir=str(self.cache.directory), deterministic=det)
            self.cache.load(source.wasm, EngineConfig(source.variant.tier, deterministic=det))
            self._step("precompiled")
            check = self._golden(slot, source, manifest, vectors,
                                 keep and self.keep_warm and not source.spec.stateful)
        except SelfTestFailed:
            raise
        except Exception as exc:  # DeadlineExceeded, WorkerCrashed, traps, malformed vectors, ...
            raise SelfTestFailed(f"{what}: {type(exc).__name__}: {exc}") from exc
        self._step("selftested")
        return check.report(source.variant.name, det)

    def _golden(self, slot: Path, source: ModelSource, manifest: Manifest, vectors: list[Any],
                keep: bool) -> GoldenCheck:
        from runtime_wasm.supervisor import SupervisedModel

        cfg, policy = self.config, self.policy
        check = GoldenCheck(cfg.selftest_rtol, cfg.selftest_atol)
        if keep:
            self.close()  # an earlier one's worker, never taken
        model = SupervisedModel(source, policy.memory_cap_bytes, policy.max_batch_size if keep else 1,
                                max(cfg.selftest_start_timeout_s, policy.worker_start_timeout_s),
                                policy.threads if keep else 1)
        try:
            for i, vector in enumerate(vectors):
                inputs, want = decode_vector(vector)
                if bad := check.differing(model.predict(inputs, cfg.selftest_deadline_s), want):
                    raise SelfTestFailed(f"{manifest.name} release {manifest.release}: golden vector {i} "
                                         f"differs in outputs {bad}")
        except BaseException:
            model.close()
            raise
        if keep:
            self._warm = (slot, model)
        else:
            model.close()
        return check

    def take(self, directory: Path) -> SupervisedModel | None:
        """The worker the latest kept self-test left loaded, when ``directory`` is its slot (ownership
        passes to the caller); None otherwise (one kept for another slot is closed)."""
        warm, self._warm = self._warm, None
        if warm is None:
            return None
        if Path(directory) != warm[0]:
            warm[1].close()
            return None
        return warm[1]

    def close(self) -> None:
        """End a kept worker nobody took. Idempotent."""
        warm, self._warm = self._warm, None
        if warm is not None:
            warm[1].close()
