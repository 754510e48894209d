"""Start-up cost in fresh processes (issue 10): process start -> ready and -> first result, and peak RSS.

(a) Device path: ``load_model_dir`` (warm precompiled-module cache) then one inference, next to
    onnxruntime session creation + first inference (one thread); "ready" is when the model could take a
    request (the start proper), "first" adds one inference (where the per-inference gap shows), both
    from process start and, inside the process after its imports, the model's own load (our
    ``load_model_dir``, ORT's session creation) and first run (issue 40's ready and first targets), for
    the DistilBERT-shaped encoder fp32, int8 and int4 (ours: static int8 on 4 calibration samples, int4
    weights; ORT: dynamic int8 for both) and MobileNetV2 224 fp32 and int8 (ours static on 4 random
    calibration images, ORT dynamic). Our peak RSS is also shown against onnxruntime fp32 on the same
    model (the issue's targets: fp32 <= 1.0x, int8 <= 0.5x, int4 <= 0.35x).
(b) Host path: ``CuvilModel.load(onnx).optimize(...).predict(...)`` in a new process, first (empty
    build cache) and second (the build cache holds the first's build).
(c) In-agent swap: a real ``cuvil_agent.Agent`` on a real Mosquitto serves release 1 while a client
    thread asks it continuously (``ModelHost.predict``, what its servers call); release 2 is published
    (signed, chunked over MQTT), downloaded, installed (self-test, module precompiled) and swapped in.
    "swap" is install done (the installer's ``pointer_switched`` step) -> first answer by release 2;
    "gap" the longest wait between two answers across the switch, next to the steady interval between
    answers before the publish; failed requests are counted. Next to it onnxruntime's naive update: a
    new ``InferenceSession`` in a process that already ran one, and its first run. Release 2 holds the
    same model as release 1 (the switch's work does not depend on the weights' values). One table then
    shows ready, first result and swap with their ratios to onnxruntime's.

(a) and (b) run every start in its own process (``python -c``); runs of different engines interleave;
the device-side children of (a) and (c), ours and onnxruntime's, keep numpy's OpenBLAS to one thread as the
agent does (``DEVICE_ENV``);
medians of ``--repeat`` runs are printed with ratios. Peak RSS is VmHWM from ``/proc/self/status`` in the
child.

    python benchmarks/bench_startup.py [--repeat 3] [--workdir DIR] [--tiny] [--no-host-path]

``--tiny`` runs every step on small models (a check that the script works, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from bench_real_size import mobilenet_v2

from cuvil_agent.agent import Agent
from cuvil_agent.config import AgentConfig
from cuvil_edge import CuvilModel
from cuvil_edge.fleet.publisher import Publisher
from cuvil_edge.here import host_target
from cuvil_edge.signing import Keyring, build_bundle, golden_vectors
from cuvil_edge.testing.broker import LocalBroker
from cuvil_edge.testing.zoo_transformers import bert_encoder, bert_feeds
from ota import Installer
from ota.errors import OtaError
from runtime_wasm import RuntimePolicy, RuntimeWasmError

CALIB_SAMPLES = 4
#: our peak RSS over onnxruntime fp32's on the same model, by precision (issue 10)
RSS_TARGETS = {"fp32": 1.0, "int8": 0.5, "int4": 0.35}
#: issue 40: ready <= 0.5x onnxruntime's, first result <= 0.8x
READY_TARGET, FIRST_TARGET = 0.5, 0.8
HW, FLEET = "bench-device", "startup"
#: the agent serves on one thread like onnxruntime here, with a deadline no busy box reaches
POLICY = RuntimePolicy(threads=1, deadline_ms=30_000.0)
#: device-side children, ours and onnxruntime's, run as the agent runs its workers (``cuvil_agent.launch``):
#: numpy's OpenBLAS on one thread, whose other threads would spin ~120 ms after import on a core of this box
DEVICE_ENV = {"OPENBLAS_NUM_THREADS": "1"}

_CHILD = """
import json, sys, time
import numpy as np

def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

def ready():
    print("ready", flush=True)

mode, path, feeds_path = sys.argv[1:4]
steps = [0.0, 0.0]
with np.load(feeds_path) as z:
    feeds = {k: z[k] for k in z.files}
if mode == "device":
    from runtime_wasm.loader import load_model_dir
    t0 = time.perf_counter()
    model = load_model_dir(path)
    t1 = time.perf_counter()
    ready()
    t2 = time.perf_counter()
    out = model.predict(feeds)
    steps = [t1 - t0, time.perf_counter() - t2]
elif mode == "ort":
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    t0 = time.perf_counter()
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    t1 = time.perf_counter()
    ready()
    t2 = time.perf_counter()
    out = sess.run(None, feeds)
    steps = [t1 - t0, time.perf_counter() - t2]
elif mode == "ort-update":  # a naive update in a running app: a new session beside the first, first run
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    ready()
    t0 = time.perf_counter()
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    t1 = time.perf_counter()
    out = sess.run(None, feeds)
    steps = [t1 - t0, time.perf_counter() - t1]
else:  # host: precision [calibration dir]
    from cuvil_edge import CuvilModel
    from cuvil_edge.here import host_target
    precision, calib = sys.argv[4], (sys.argv[5] if len(sys.argv) > 5 else None)
    t0 = time.perf_counter()
    loaded = CuvilModel.load(path)
    t1 = time.perf_counter()
    m = loaded.optimize(precision, targets=[host_target()], calibration=calib)
    steps = [t1 - t0, time.perf_counter() - t1]
    ready()
    out = m.predict(feeds)
print(json.dumps({"peak": peak(), "steps": steps}), flush=True)
"""


@dataclass(frozen=True)
class Case:
    """One model as both sides run it: our model directory, ORT's .onnx, the inputs, the host build."""

    name: str
    model_dir: Path
    ort_model: Path
    onnx_path: Path
    feeds: Path
    precision: str
    calib: Path | None


@dataclass(frozen=True)
class Start:
    """One fresh process: seconds from spawn until the model could take a request (``ready``) and until
    the first result, and the child's peak RSS in bytes."""

    ready: float
    result: float
    peak: int
    #: in the process, after its imports: device and ORT (and ORT update): seconds loading the model (our
    #: ``load_model_dir``, ORT's session creation) and in its first run; host path: in load() and optimize()
    steps: tuple[float, float] = (0.0, 0.0)

    @property
    def model_first(self) -> float:
        """Load and first run, in the process (what an app that already runs pays for a model)."""
        return self.steps[0] + self.steps[1]


def run_child(args: list[str], env: dict[str, str] | None = None) -> Start:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, *args], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    first = proc.stdout.readline()
    ready = time.perf_counter() - t0
    line = proc.stdout.readline()
    result = time.perf_counter() - t0
    proc.wait()
    if proc.returncode or first.strip() != "ready" or not line:
        raise SystemExit(f"child {args[:2]} failed (rc {proc.returncode})")
    got = json.loads(line)
    return Start(ready, result, got["peak"], tuple(got["steps"]))


def median_start(runs: list[Start]) -> Start:
    return Start(statistics.median(r.ready for r in runs), statistics.median(r.result for r in runs),
                 int(statistics.median(r.peak for r in runs)),
                 (statistics.median(r.steps[0] for r in runs), statistics.median(r.steps[1] for r in runs)))


def prepare(wd: Path, name: str, proto: onnx.ModelProto, feeds: dict[str, np.ndarray], precision: str,
            calib: list[dict[str, np.ndarray]] | None) -> Case:
    onnx_path = wd / f"{name}.onnx"
    onnx.save(proto, onnx_path)
    np.savez(wd / f"{name}.feeds.npz", **feeds)
    calib_dir = None
    if calib is not None:
        calib_dir = wd / f"{name}.calib"
        calib_dir.mkdir(exist_ok=True)
        for i, sample in enumerate(calib):
            np.savez(calib_dir / f"{i}.npz", **sample)
    model = CuvilModel.load(onnx_path).optimize(precision, targets=[host_target()], calibration=calib_dir)
    model_dir = model.save(wd / f"{name}.cuvil")
    ort_model = onnx_path
    if precision != "fp32":
        from onnxruntime.quantization import quantize_dynamic

        ort_model = wd / f"{name}.ort-int8.onnx"
        quantize_dynamic(str(onnx_path), str(ort_model))
    return Case(name, model_dir, ort_model, onnx_path, wd / f"{name}.feeds.npz", precision, calib_dir)


def interleave(runs: dict[str, Callable[[], Start]], repeat: int) -> dict[str, Start]:
    """Medians per run name, the names taking turns."""
    got: dict[str, list[Start]] = {k: [] for k in runs}
    for _ in range(repeat):
        for k, fn in runs.items():
            got[k].append(fn())
    return {k: median_start(v) for k, v in got.items()}


@dataclass(frozen=True)
class Swap:
    """One in-agent switch to release 2, in seconds: install done -> first answer by release 2 (``swap``),
    of which that request's own time (``first2``: the rest is the switch plus the old model's last
    request), the longest wait between two answers across it (``gap``), the median interval between answers
    before the publish (``steady``), and how many requests got an error instead of an answer."""

    swap: float
    first2: float
    gap: float
    steady: float
    failed: int


class Releases:
    """One case as a device gets it: releases 1 and 2 signed (the same model), and a device state with
    release 1 installed and its module precompiled (copied per run: the agent starts warm)."""

    def __init__(self, wd: Path, case: Case, ring: Keyring) -> None:
        self.keys, self.feeds = ring.directory, case.feeds
        self.bundles = {r: wd / f"{case.name}-r{r}.cvb" for r in (1, 2)}
        golden = golden_vectors(case.model_dir, count=1)  # one self-test run per install
        for release, bundle in self.bundles.items():
            build_bundle(case.model_dir, bundle, ring.release_keys(), version=f"1.0.{release}",
                         release=release, hardware_ids=[HW], golden=golden)
        self.template = wd / f"{case.name}.device"
        shutil.rmtree(self.template, ignore_errors=True)
        Installer(self.template, HW, root=ring.root_envelope(), policy=POLICY).install(self.bundles[1])


def _ask(agent: Agent, feeds: dict[str, np.ndarray], answers: list[tuple[float, float, int | None]],
         until: threading.Event) -> None:
    """The client: one request after the other, each one's start, end and release (None: an error)."""
    while not until.is_set():
        start = time.perf_counter()
        try:
            release: int | None = agent.host.predict(feeds)[0]
        except (OtaError, RuntimeWasmError):
            release = None
        answers.append((start, time.perf_counter(), release))


#: a swap runs with ``-c`` as ``__main__``, as the device's ``cuvil-agent`` entry point keeps it light:
#: multiprocessing re-runs the parent's ``__main__`` in every worker it starts, and this script's imports
#: (onnx, the compiler, the zoo) added ~1 s to each swap's new worker
_SWAP_CHILD = """
import dataclasses, json, sys
sys.path.insert(0, sys.argv[1])
from bench_startup import swap_here
print(json.dumps(dataclasses.asdict(swap_here(*sys.argv[2:]))))
"""


def measure_swap(wd: Path, rel: Releases, run: int) -> Swap:
    """A fresh broker and device (release 1 served), release 2 published to it while a client asks; in a
    child process (``_SWAP_CHILD``)."""
    proc = subprocess.run([sys.executable, "-c", _SWAP_CHILD, str(Path(__file__).resolve().parent), str(wd),
                           str(rel.template), str(rel.bundles[2]), str(rel.feeds), str(rel.keys), str(run)],
                          stdout=subprocess.PIPE, text=True, env={**os.environ, **DEVICE_ENV})
    if proc.returncode:
        raise SystemExit(f"swap run {run} failed (rc {proc.returncode})")
    return Swap(**json.loads(proc.stdout.splitlines()[-1]))


def swap_here(wd: str, template: str, bundle: str, feeds_path: str, keys: str, run: str,
              timeout_s: float = 600.0) -> Swap:
    """``measure_swap``'s run, in this process."""
    with np.load(feeds_path) as z:
        feeds = {k: z[k] for k in z.files}
    work = Path(wd)
    state = work / f"device-{run}"
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(template, state)
    switched: list[float] = []
    answers: list[tuple[float, float, int | None]] = []
    stop, until = threading.Event(), threading.Event()
    with LocalBroker(work / f"broker-{run}") as broker:
        cfg = AgentConfig(device_id=f"dev{run}", fleet=FLEET, state_dir=str(state), hardware_id=HW,
                          log_file=str(state / "agent.log"), telemetry_interval_s=0, broker=broker.settings(),
                          policy=POLICY)
        agent = Agent(cfg, on_step=lambda s: switched.append(time.perf_counter()) if s == "pointer_switched"
                      else None)
        threads = [threading.Thread(target=agent.run, args=(stop,), daemon=True),
                   threading.Thread(target=_ask, args=(agent, feeds, answers, until), daemon=True)]
        for t in threads:
            t.start()
        publisher = Publisher(broker.settings(), FLEET, Keyring(keys).release_keys(),
                              work / f"publisher-{run}.json")
        try:
            while len(answers) < 5:  # serving steadily before the update
                time.sleep(0.01)
            published = time.perf_counter()
            publisher.start()
            publisher.publish(Path(bundle), canary=100.0, halt_on=0.0)
            end = time.monotonic() + timeout_s
            while sum(r == 2 for *_, r in answers) < 3:
                if time.monotonic() > end or not threads[0].is_alive():
                    raise SystemExit(f"run {run}: release 2 never answered ({agent.state})")
                time.sleep(0.01)
        finally:
            until.set()
            publisher.close()
            stop.set()
            for t in threads:
                t.join(60)
    shutil.rmtree(state, ignore_errors=True)
    shutil.rmtree(work / f"broker-{run}", ignore_errors=True)
    times = [t for _, t, _ in answers]
    start2, first2 = next((s, t) for s, t, r in answers if r == 2)
    across = [b - a for a, b in zip(times, times[1:]) if b >= switched[0] and a <= first2]
    before = [b - a for a, b in zip(times, times[1:]) if b < published]
    return Swap(first2 - switched[0], first2 - start2, max(across), statistics.median(before),
                sum(r is None for *_, r in answers))


def device_path(cases: list[Case], repeat: int) -> dict[str, tuple[Start, Start]]:
    """(a): per case (ours, ORT) medians, printed with peak RSS; returned for the summary table."""
    print(f"\n(a) device path, process start -> ready (model loaded) and -> first result; medians of "
          f"{repeat} (ORT: int8 dynamic on the quantized rows; 'vs fp32': ours over ORT fp32 peak RSS)")
    print(f"{'model':18s} {'ours ready':>10s} {'ORT ready':>9s} {'ratio':>6s} {'ours first':>10s} "
          f"{'ORT first':>9s} {'ratio':>6s} {'ours MB':>8s} {'ORT MB':>7s} {'ratio':>6s} "
          f"{'ORT fp32 MB':>11s} {'vs fp32':>7s} {'target':>7s}")
    got = {}
    for c in cases:
        runs = {"ours": lambda c=c: run_child(["device", str(c.model_dir), str(c.feeds)], DEVICE_ENV),
                "ort": lambda c=c: run_child(["ort", str(c.ort_model), str(c.feeds)], DEVICE_ENV)}
        if c.ort_model != c.onnx_path:  # the memory targets compare with ORT fp32
            runs["ort-fp32"] = lambda c=c: run_child(["ort", str(c.onnx_path), str(c.feeds)], DEVICE_ENV)
        r = interleave(runs, repeat)
        us, ort = got[c.name] = r["ours"], r["ort"]
        fp32 = r.get("ort-fp32", ort).peak
        print(f"{c.name:18s} {us.ready:10.2f} {ort.ready:9.2f} {us.ready / ort.ready:5.2f}x "
              f"{us.result:10.2f} {ort.result:9.2f} {us.result / ort.result:5.2f}x {us.peak / 1e6:8.0f} "
              f"{ort.peak / 1e6:7.0f} {us.peak / ort.peak:5.2f}x {fp32 / 1e6:11.0f} {us.peak / fp32:6.2f}x "
              f"{'<= ' + str(RSS_TARGETS[c.precision]):>7s}", flush=True)
    return got


def host_path(wd: Path, cases: list[Case], repeat: int) -> None:
    """(b): the host path's first (empty build cache) and second run in new processes."""
    print(f"\n(b) host path load().optimize().predict() in new processes; medians of {repeat}")
    print(f"{'model':18s} {'first s':>8s} {'second s':>9s} {'first/second':>13s} {'ORT start s':>12s}"
          f"   second's load() + optimize() s")
    for c in cases:
        host = ["host", str(c.onnx_path), str(c.feeds), c.precision, *([str(c.calib)] if c.calib else [])]
        rounds: dict[str, list[Start]] = {"first": [], "second": [], "ort": []}
        for i in range(repeat):
            env = {"CUVIL_BUILD_CACHE_DIR": str(wd / f"builds-{c.name}-{i}")}  # empty: the first run builds
            rounds["first"].append(run_child(host, env))
            rounds["second"].append(run_child(host, env))
            rounds["ort"].append(run_child(["ort", str(c.onnx_path), str(c.feeds)]))
        first, second, ort = (median_start(rounds[k]).result for k in ("first", "second", "ort"))
        load_s, optimize_s = median_start(rounds["second"]).steps
        print(f"{c.name:18s} {first:8.2f} {second:9.2f} {first / second:12.1f}x {ort:12.2f}"
              f"   {load_s:.3f} + {optimize_s:.3f}   (second / ORT {second / ort:.2f}x)", flush=True)


def swaps(wd: Path, cases: list[Case], repeat: int, starts: dict[str, tuple[Start, Start]]) -> None:
    """(c): the in-agent swap next to ORT's naive update, in one table with (a)'s ready and first."""
    shutil.rmtree(wd / "keys", ignore_errors=True)  # a kept --workdir: fresh keys, fresh releases
    ring = Keyring.init(wd / "keys", root_keys=1, root_threshold=1, release_keys=1, release_threshold=1)
    print(f"\n(c) the model's start in the process (from (a), after imports: ready = our load_model_dir vs "
          f"ORT's session creation, first = + the first run), process start -> ready / first ratios from "
          f"(a), and the in-agent swap (install done -> first answer by release 2) next to ORT; medians of "
          f"{repeat}; ORT update: a new session beside a running one, + its first run; targets: ready <= "
          f"{READY_TARGET}x, first <= {FIRST_TARGET}x")
    print(f"{'model':18s} {'ready ms':>8s} {'ORT ms':>7s} {'ratio':>6s} {'first ms':>8s} {'ORT ms':>7s} "
          f"{'ratio':>6s} {'proc ready':>10s} {'proc first':>10s} {'swap ms':>8s} {'ORT sess+run ms':>15s} "
          f"{'ratio':>6s} {'its req ms':>10s} {'gap ms':>7s} {'steady ms':>9s} {'failed':>6s}")
    for n, c in enumerate(cases):
        rel = Releases(wd / "swap", c, ring)
        got: list[Swap] = []
        ort: list[Start] = []
        for i in range(repeat):
            got.append(measure_swap(wd / "swap", rel, n * repeat + i))
            ort.append(run_child(["ort-update", str(c.ort_model), str(c.feeds)], DEVICE_ENV))
        timed = ("swap", "first2", "gap", "steady")
        us = Swap(*(statistics.median(getattr(s, f) for s in got) for f in timed), sum(s.failed for s in got))
        session, run = median_start(ort).steps
        ours, theirs = starts[c.name]
        print(f"{c.name:18s} {ours.steps[0] * 1e3:8.0f} {theirs.steps[0] * 1e3:7.0f} "
              f"{ours.steps[0] / theirs.steps[0]:5.2f}x {ours.model_first * 1e3:8.0f} "
              f"{theirs.model_first * 1e3:7.0f} {ours.model_first / theirs.model_first:5.2f}x "
              f"{ours.ready / theirs.ready:9.2f}x {ours.result / theirs.result:9.2f}x {us.swap * 1e3:8.0f} "
              f"{(session + run) * 1e3:15.0f} {us.swap / (session + run):5.2f}x {us.first2 * 1e3:10.0f} "
              f"{us.gap * 1e3:7.0f} {us.steady * 1e3:9.1f} {us.failed:6d}", flush=True)
        shutil.rmtree(rel.template, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", help="keep models and caches here (default: a temp dir)")
    ap.add_argument("--tiny", action="store_true", help="small models: check that the script runs")
    ap.add_argument("--no-host-path", action="store_true", help="skip (b), the host path's builds")
    args = ap.parse_args()
    wd = Path(args.workdir or tempfile.mkdtemp(prefix="cuvil-startup-"))
    wd.mkdir(parents=True, exist_ok=True)
    os.environ["CUVIL_BUILD_CACHE_DIR"] = str(wd / "builds-prepare")  # keep big entries out of ~/.cache

    seq, size = (16, 32) if args.tiny else (128, 224)
    encoder = bert_encoder(layers=1, hidden=64, heads=2, ffn=128, seq=seq) if args.tiny else bert_encoder()
    feeds = bert_feeds(seq=seq)
    calib = [bert_feeds(seq=seq, seed=i) for i in range(1, CALIB_SAMPLES + 1)]
    rng = np.random.default_rng(0)
    image, *images = ({"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)}
                      for _ in range(CALIB_SAMPLES + 1))
    print(f"preparing models in {wd} ...", flush=True)
    cases = [prepare(wd, "encoder-fp32", encoder, feeds, "fp32", None),
             prepare(wd, "encoder-int8", encoder, feeds, "int8", calib),
             prepare(wd, "encoder-int4", encoder, feeds, "int4", None),
             prepare(wd, f"mobilenetv2-{size}", mobilenet_v2(size), image, "fp32", None),
             prepare(wd, f"mobilenetv2-{size}-int8", mobilenet_v2(size), image, "int8", images)]
    for c in cases:  # warm the precompiled-module cache (the device path is measured warm)
        run_child(["device", str(c.model_dir), str(c.feeds)])

    starts = device_path(cases, args.repeat)
    if not args.no_host_path:
        host_path(wd, cases, args.repeat)
    swaps(wd, cases, args.repeat, starts)


if __name__ == "__main__":
    main()
