"""Which thread count the next inference runs on, when another process may hold a core (issue 40).

An op split across threads ends at a barrier, so a peer thread that the OS descheduled for another
process holds every other thread there until it runs again: with a busy loop on one of two cores,
2 threads ran MobileNetV2 224 and ResNet-50 224 at 0.81x and 0.89x the speed of 1 thread (fp32; int8
0.63x and 0.83x; onnxruntime 0.47x and 0.89x). The module's own waits cannot see it (they count spin
rounds; a module has no clock), but the caller can: ``ThreadChooser`` times the runs, stays on the count
in use until the other, tried now and then, runs faster by a margin, so a change of load is seen.
Outputs are the same bits on any count, so switching is invisible but for time.
"""

from __future__ import annotations


class ThreadChooser:
    """Chooses between ``most`` threads and 1 for each run: the count in use until the other ran faster by
    more than ``margin`` (its figure: the latest probe of it; the count in use: an exponential moving
    average of seconds per run, ``weight`` for the newest); ``most`` to start. The other count runs on
    the 4th, 8th and 16th runs (a new instance learns both counts early: with the 4th alone, one noisy
    sample decided its first 32 runs) and every ``probe_every``-th after them (3% of runs at the default
    32: below a p95)."""

    def __init__(self, most: int, probe_every: int = 32, weight: float = 0.25, margin: float = 0.05) -> None:
        if most < 2 or probe_every < 2 or not 0 < weight <= 1 or not 0 <= margin < 1:
            raise ValueError("ThreadChooser: most, probe_every >= 2; weight in (0, 1]; margin in [0, 1)")
        self.most, self.probe_every, self.weight, self.margin = most, probe_every, weight, margin
        self.seconds: dict[int, float] = {}  # thread count -> seconds per run (see record)
        self.runs = 0
        self.current = most  # the count in use between probes

    def best(self) -> int:
        """The count the figures favour: the other count once it is faster by more than ``margin``, else
        the one in use (``most`` until 1 has been timed). The band between keeps a count that a held core
        made only a few percent faster (int8 ResNet-50 on 1 thread against 2 under a held core: 5-10%)
        from going back on every lucky probe of the other."""
        one, most = self.seconds.get(1), self.seconds.get(self.most)
        if one is None or most is None:
            return self.current
        if self.current == self.most:
            return 1 if one < most * (1 - self.margin) else self.most
        return self.most if most < one * (1 - self.margin) else 1

    def next(self) -> int:
        """The count for the next run."""
        self.runs += 1
        if self.runs in (4, 8, 16) or self.runs % self.probe_every == 0:
            return 1 if self.current == self.most else self.most
        return self.current

    def record(self, threads: int, seconds: float) -> None:
        """How long a run on ``threads`` took: the count in use keeps a moving average; a probe of the
        other replaces its figure, as that count is timed once in 4-32 runs (averaged, one slow probe in a
        new instance held int8 ResNet-50 on 2 threads under a held core for 60 runs, 0.87x the speed of 1
        thread in bench_threads)."""
        old = self.seconds.get(threads)
        probe = threads != self.current
        self.seconds[threads] = seconds if old is None or probe else old + self.weight * (seconds - old)
        self.current = self.best()
