"""Threads that survive a busy core (issue 40): the heavy kernels (f32 conv-as-GEMM, Winograd, depthwise,
the qs8 GEMM and convs, a batch-1 Gemm) take their chunks from a shared counter, so a thread that lost its
core does fewer of them. Outputs stay the same bits for 1, 2 and 4 threads, also while another process
holds a core; a counting copy of the module shows the counter is what the threads use, and that each run
goes on the thread count the instance's chooser picks (``runtime_wasm.contention``). Correctness only:
timings are benchmarks/bench_threads.py's."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from cuvil_edge.codegen.toolchain import compile_c
from cuvil_edge.model import CuvilModel
from cuvil_edge.oracle import ort_session
from cuvil_edge.testing import zoo, zoo_transformers
from runtime_wasm.contention import ThreadChooser
from runtime_wasm.loader import instantiate
from tests.support.threads import TARGET, build_threaded, open_threaded, seeded_inputs

pytestmark = pytest.mark.integration


def _calibration(proto) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    inputs = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in proto.graph.input]
    return [{name: rng.standard_normal(shape).astype(np.float32) for name, shape in inputs} for _ in range(2)]


#: name -> (model, precision): MobileNet-style (1x1 GEMMs, depthwise, the im2col stem), ResNet-style (the
#: Winograd GEMMs and transforms), an MLP (batch-1 Gemm: f32 GEMV chunks; int8: the qs8 GEMM's panels), an
#: encoder (attention's (batch, head) pairs)
CASES = {
    "mobilenet-fp32": (lambda: zoo.mobilenet(size=96), "fp32"),
    "mobilenet-int8": (lambda: zoo.mobilenet(size=96), "int8"),
    "resnet-fp32": (lambda: zoo.resnet(size=64), "fp32"),
    "mlp-fp32": (zoo.mlp, "fp32"),
    "mlp-int8": (zoo.mlp, "int8"),
    "encoder-fp32": (lambda: zoo_transformers.bert_encoder(layers=1, hidden=128, heads=4, ffn=256, seq=32),
                     "fp32"),
}


def _build(case: str) -> tuple[object, CuvilModel]:
    make, precision = CASES[case]
    proto = make()
    calib = _calibration(proto) if precision == "int8" else None
    return proto, build_threaded(proto, precision, calibration=calib)


@contextmanager
def _busy_core() -> Iterator[None]:
    """A child process spinning on a core for as long as the block runs."""
    child = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    try:
        yield
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("case", sorted(CASES))
def test_claimed_chunks_give_the_same_bits_on_any_thread_count_and_under_contention(case):
    """1, 2 and 4 threads, quiet and with a core held by a busy process: every output bit for bit equal
    to one thread's (any schedule of chunks), and fp32 close to onnxruntime's."""
    proto, model = _build(case)
    xs = seeded_inputs(model.spec)
    with open_threaded(model, 1) as m:
        ref = m.predict(xs)
    for busy in (False, True):
        for n in (2, 4):
            with (_busy_core() if busy else _nothing()), open_threaded(model, n) as m:
                for _ in range(3):  # later jobs reuse the parked threads and the counters' slots
                    out = m.predict(xs)
                    for name, want in ref.items():
                        assert np.array_equal(out[name], want), (case, n, busy, name)
    if CASES[case][1] == "fp32":
        feeds = {i.name: x for i, x in zip(proto.graph.input, xs)}
        got = next(iter(ref.values()))
        want = ort_session(proto).run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@contextmanager
def _nothing() -> Iterator[None]:
    yield


#: (text, replacement) in the generated C: a counter of the claims threads make on a shared counter
_CLAIMS = (
    ("static int cuvil_chunk(CuvilChunks* d",
     "static int32_t cuvil_claims;\n"
     'EXPORT("cuvil_claims") int cuvil_claims_get(void) { return cuvil_claims; }\n'
     "static int cuvil_chunk(CuvilChunks* d"),
    ("static int cuvil_chunk(CuvilChunks* d, int* lo, int* hi) {\n",
     "static int cuvil_chunk(CuvilChunks* d, int* lo, int* hi) {\n"
     "  if (d->count) __atomic_add_fetch(&cuvil_claims, 1, __ATOMIC_RELAXED);\n"),
)


def _patched(model: CuvilModel, edits: tuple[tuple[str, str], ...], threads: int):
    """An instance of a copy of the module with ``edits`` made to its generated C."""
    program, spec = model.compiled.program, model.spec
    source = program.source
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    wasm = compile_c(source, TARGET, extra_flags=program.link_flags())
    variant = dataclasses.replace(next(v for v in spec.variants if v.name == TARGET.name),
                                  sha256=hashlib.sha256(wasm).hexdigest())
    return instantiate(spec, wasm, model._built().weights, variant, threads=threads)


def _claims_per_run(model: CuvilModel, threads: int, busy: bool, runs: int = 3) -> list[int]:
    """Shared-counter claims of each run on ``threads`` threads, from a counting copy of the module."""
    xs = seeded_inputs(model.spec)
    counts = []
    with (_busy_core() if busy else _nothing()), _patched(model, _CLAIMS, threads) as m:
        claims = m._exports["cuvil_claims"]
        for _ in range(runs):
            before = claims(m._store)
            m.predict(xs)
            counts.append(claims(m._store) - before)
    return counts


@pytest.mark.parametrize("case", ["mobilenet-int8", "resnet-fp32"])
def test_split_kernels_claim_their_chunks_from_the_shared_counter(case):
    """One thread claims nothing (a plain loop); on 2 threads every run makes the same number of claims
    (each loop's chunks plus one final claim a thread), quiet or contended: the schedule changes, the
    work does not."""
    _, model = _build(case)
    assert _claims_per_run(model, 1, busy=False, runs=1) == [0]
    quiet = _claims_per_run(model, 2, busy=False)
    assert quiet[0] > 0 and len(set(quiet)) == 1, quiet
    assert _claims_per_run(model, 2, busy=True) == quiet


def test_a_thread_that_runs_a_ring_of_loops_ahead_waits_for_its_slot():
    """With 2 counter slots instead of 64, threads with no barrier between loops reuse a slot while a
    late one may still be on its last claim there: the early one waits until it is cleared, and the bits
    stay one thread's (4 threads, a core held)."""
    _, model = _build("mobilenet-fp32")
    xs = seeded_inputs(model.spec)
    with open_threaded(model, 1) as m:
        ref = m.predict(xs)
    two_slots = (("#define CUVIL_DYN_SLOTS 64", "#define CUVIL_DYN_SLOTS 2"),)
    with _busy_core(), _patched(model, two_slots, 4) as m:
        for _ in range(3):
            out = m.predict(xs)
            for name, want in ref.items():
                assert np.array_equal(out[name], want), name


def test_gemms_of_four_rows_or_more_keep_the_static_split():
    """f32_gemm_part packs its A rows once per call: claimed chunks would pack them again for every chunk,
    so a MatMul / Gemm of 4 rows or more keeps the static split and claims nothing (an MLP on a batch of
    8), and gives the same bits on 2 threads."""
    model = build_threaded(zoo.mlp(batch=8))
    assert {k for k in model.compiled.program.kernels_used.values() if k.startswith("f32-gemm")} \
        == {"f32-gemm-4x8"}
    assert _claims_per_run(model, 2, busy=False, runs=1) == [0]
    xs = seeded_inputs(model.spec)
    with open_threaded(model, 1) as one, open_threaded(model, 2) as two:
        for name, want in one.predict(xs).items():
            assert np.array_equal(two.predict(xs)[name], want), name


def test_runs_switch_thread_count_as_the_chooser_says_with_the_same_bits():
    """A threaded instance runs each job on the count its ``thread_chooser`` picks (both counts timed,
    outputs bit for bit the same across switches); with no chooser every run uses all its threads. The
    counting copy tells the counts apart: a run on 1 thread claims nothing from the shared counter."""
    _, model = _build("resnet-fp32")
    xs = seeded_inputs(model.spec)
    with open_threaded(model, 1) as m:
        ref = m.predict(xs)
    with _patched(model, _CLAIMS, 2) as m:
        assert m.thread_chooser is not None and m.thread_chooser.most == 2  # on by default
        m.thread_chooser = ThreadChooser(2, probe_every=2)
        claims = m._exports["cuvil_claims"]
        counts = []
        for _ in range(6):
            before = claims(m._store)
            out = m.predict(xs)
            counts.append(claims(m._store) - before)
            assert all(np.array_equal(out[k], v) for k, v in ref.items())
        assert counts[0] > 0 and counts[1] == 0  # all threads first, then the probe of 1 (later: by time)
        assert set(m.thread_chooser.seconds) == {1, 2}
        m.thread_chooser = None
        for _ in range(3):
            before = claims(m._store)
            m.predict(xs)
            assert claims(m._store) - before == counts[0]
