"""The fuzzing driver every harness shares: a ``Target`` names a parser, how to set it up once, how to feed
it one input and which errors it documents; this module replays inputs (CI, the regression tests) and
runs atheris (coverage-guided, for minutes or hours) over the same function.

A finding is any exception outside the target's documented errors, an input that runs past its time
limit, or (replayed) one whose traced memory peaks past the target's bound for the input's size. Under
atheris libFuzzer's own ``-timeout`` and ``-rss_limit_mb`` stand for the last two.
"""

from __future__ import annotations

import contextlib
import signal
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "corpus"
REGRESSIONS = ROOT / "regressions"


class Finding(AssertionError):
    """What a harness reports: a parser broke its contract on one input."""


class Hang(BaseException):
    """One input ran past the target's time limit. Raised from a signal handler inside the code under test,
    so it is not an ``Exception``: a parser's broad ``except Exception`` (read_tflite's, around flatbuffers)
    must not turn a hang into its own error, as it would ``KeyboardInterrupt``."""


@dataclass(frozen=True)
class Target:
    """One parser under fuzzing. ``setup`` runs once per process and returns the function that takes one
    input; that function raises ``Finding`` for a broken contract it sees itself (no reply, a 500) and
    lets any other exception through, which is a finding unless it is one of ``documented``.

    ``side``: ``device`` (reachable on a device: remote clients, servers, local files) or ``host`` (the
    build host); ``memory_bound(n)`` is the most bytes one input of ``n`` bytes may allocate at peak."""

    name: str
    side: str
    setup: Callable[[], Callable[[bytes], None]]
    documented: tuple[type[BaseException], ...]
    #: the modules whose code atheris instruments for coverage (imported inside its instrumentation)
    instrument: tuple[str, ...]
    mutator: Callable[[bytes, int, int], bytes] | None = None
    time_limit_s: float = 5.0
    memory_bound: Callable[[int], int] = field(default=lambda n: 64 * n + (32 << 20))

    def checked(self) -> Callable[[bytes], None]:
        """``setup``'s function, with the documented errors taken as correct answers."""
        one = self.setup()

        def run(data: bytes) -> None:
            try:
                one(data)
            except self.documented:
                pass

        return run


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """``Hang`` in the main thread once ``seconds`` of wall time pass (SIGALRM)."""

    def fire(signum: int, frame: object) -> None:
        raise Hang(f"over the time limit of {seconds}s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def inputs(target: Target) -> list[Path]:
    """The checked-in corpus and the regression inputs of ``target``, in a stable order."""
    return sorted(p for d in (CORPUS / target.name, REGRESSIONS / target.name) if d.is_dir()
                  for p in d.iterdir() if p.is_file())


@dataclass
class ReplayResult:
    inputs: int
    seconds: float
    #: file name -> what went wrong
    findings: dict[str, str]


def replay(target: Target, paths: list[Path], one: Callable[[bytes], None] | None = None) -> ReplayResult:
    """Every input once, under the time limit and with its allocations traced against the bound."""
    run = one or target.checked()
    findings: dict[str, str] = {}
    start = time.monotonic()
    for path in paths:
        data = path.read_bytes()
        tracemalloc.start()
        try:
            with time_limit(target.time_limit_s):
                run(data)
            peak = tracemalloc.get_traced_memory()[1]
            if peak > target.memory_bound(len(data)):
                findings[path.name] = f"allocated {peak} bytes at peak for {len(data)} bytes of input"
        except (Exception, Hang) as exc:  # a finding, whatever it is: report them all, not the first
            findings[path.name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        finally:
            tracemalloc.stop()
    return ReplayResult(len(paths), time.monotonic() - start, findings)


def importer_target(name: str, setup: Callable[[], Callable[[bytes], None]], instrument: tuple[str, ...],
                    mutator: Callable[[bytes, int, int], bytes]) -> Target:
    """A model importer's target (ONNX, TFLite): ``CuvilError`` documented, memory and time bounded by
    what an import may materialise (``cuvil_edge.ir.limits``), not by the input's size alone.

    Time: first-touch page faults dominate a large fold on a small VM (the 2-core fuzzing box: numpy's
    ``arange`` of 10M int64 in 0.03 s, of 100M in 10 s), so materialising the whole base budget (1 GiB)
    takes ~12 s there. The limit sits above that: an import the budget allows is slow, not a hang."""
    from cuvil_edge.errors import CuvilError

    return Target(name, "host", setup, (CuvilError,), instrument, mutator=mutator,
                  time_limit_s=30.0, memory_bound=importer_memory_bound)


def importer_memory_bound(n: int) -> int:
    """The engine's 64 bytes per input byte, and twice what an import may materialise from a small
    model (``limits.BASE_BUDGET``: a fold's result and its temporaries) plus 64 MiB for the IR itself."""
    from cuvil_edge.ir.limits import BASE_BUDGET

    return 64 * n + 2 * BASE_BUDGET + (64 << 20)
