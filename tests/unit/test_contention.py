"""The thread-count choice under contention (``runtime_wasm.contention``): pure, fed run times."""

from __future__ import annotations

import pytest

from runtime_wasm.contention import ThreadChooser


def _serve(chooser: ThreadChooser, seconds: dict[int, float], runs: int) -> list[int]:
    """``runs`` runs, each taking its count's ``seconds``; the counts chosen."""
    chosen = []
    for _ in range(runs):
        n = chooser.next()
        chooser.record(n, seconds[n])
        chosen.append(n)
    return chosen


def test_quiet_runs_stay_on_every_thread_but_for_the_probes():
    chooser = ThreadChooser(2, probe_every=32)
    chosen = _serve(chooser, {1: 0.027, 2: 0.016}, 128)
    probes = [i + 1 for i, n in enumerate(chosen) if n == 1]
    assert probes == [4, 8, 16, 32, 64, 96, 128]  # the 4th, 8th and 16th, then every 32nd


def test_a_held_core_moves_runs_to_one_thread_and_back_when_it_is_free():
    chooser = ThreadChooser(4, probe_every=8)
    assert _serve(chooser, {1: 0.027, 4: 0.010}, 8).count(4) == 6
    contended = _serve(chooser, {1: 0.027, 4: 0.033}, 40)  # 4 threads now slower than 1
    assert contended[-16:].count(1) == 14  # on 1 thread but for the probes of 4
    quiet = _serve(chooser, {1: 0.027, 4: 0.010}, 40)
    assert quiet[-16:].count(4) == 14 and chooser.best() == 4


def test_one_thread_must_be_faster_by_the_margin():
    chooser = ThreadChooser(2, probe_every=4, margin=0.05)
    _serve(chooser, {1: 0.0200, 2: 0.0205}, 16)  # 1 thread 2.4% faster: noise, keep both threads' cores busy
    assert chooser.best() == 2
    _serve(chooser, {1: 0.0190, 2: 0.0205}, 16)  # 7% faster
    assert chooser.best() == 1


def test_one_slow_probe_holds_the_slower_count_only_until_the_next_probe():
    chooser = ThreadChooser(2, probe_every=32)
    chosen = []
    for run in range(1, 41):  # a held core: 1 thread 95 ms, 2 threads 108; the first probe of 1 took 115
        n = chooser.next()
        chooser.record(n, {1: 0.115 if run == 4 else 0.095, 2: 0.108}[n])
        chosen.append(n)
    assert chosen[:8] == [2, 2, 2, 1, 2, 2, 2, 1]  # the 8th run probes 1 thread again and finds it faster
    assert chosen[8:15] == [1] * 7 and chosen[15] == 2  # then stays there but for the probes of 2
    assert chosen[16:31] == [1] * 15 and chooser.best() == 1


def test_a_lucky_probe_inside_the_margin_does_not_move_runs_back():
    chooser = ThreadChooser(2, probe_every=8)
    _serve(chooser, {1: 0.100, 2: 0.108}, 16)  # a held core: 1 thread 7% faster
    assert chooser.best() == 1
    chosen = _serve(chooser, {1: 0.100, 2: 0.097}, 16)  # probes of 2 threads 3% faster: within the margin
    assert chosen.count(1) == 14 and chooser.best() == 1
    chosen = _serve(chooser, {1: 0.100, 2: 0.060}, 16)  # the core is free again: back at the next probe
    assert chosen[-8:].count(2) == 7 and chooser.best() == 2


@pytest.mark.parametrize("kwargs", [{"most": 1}, {"most": 2, "probe_every": 1}, {"most": 2, "weight": 0.0},
                                    {"most": 2, "margin": 1.0}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        ThreadChooser(**kwargs)
