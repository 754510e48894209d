"""Footprint of an agent serving three small always-on models (issue 40, must-show 2), before and after.

Three models a device keeps loaded, made with onnx.helper on seeded weights and built fp32 with default
options: a keyword-spotting conv net (1x1x49x10 MFCC), a voice-activity MLP (1x40 frame) and a tiny
image classifier (1x3x32x32). Each is signed, installed as its own model line and served by a real agent
(``cuvil-agent run`` in its own process, ``[[models]]``, the HTTP API, a real Mosquitto). Once every model
has answered one request (checked against onnxruntime), the script reads:

- each model's linear memory: the size of the memory its runtime creates for the threads the agent gives
  it (a ``WasmModel`` opened from the installed slot in a separate process with that thread count), and
  the spec's per-thread table where the tree has one;
- VmRSS and VmHWM (``/proc/<pid>/status``) of each model's worker process, of the agent process and of
  its helper processes (the forkserver the workers fork from, multiprocessing's resource tracker).

The agent divides ``--cores`` (default 4, a Raspberry Pi-class device) among the lines by priority (keyword
spotter 10, VAD 5, classifier 1): 2, 1 and 1 threads. The same script runs against the code before the
footprint work with ``--before DIR`` (a read-only tree, e.g. ``git archive e330326 | tar -x -C DIR``):
every step that imports the project runs in a child process with ``PYTHONPATH`` set to the tree it
measures, so both trees use the same Python and dependencies. Runs of the two trees interleave; medians of
``--repeat`` fresh agent starts are printed.

    python benchmarks/bench_footprint.py [--before DIR] [--repeat 3] [--cores 4] [--workdir DIR] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HW, FLEET = "bench-device", "footprint"
#: model line -> priority: the wake word first, the classifier last
PRIORITY = {"kws": 10, "vad": 5, "img": 1}
#: a module past this on one thread is reported (the issue's test bound)
ONE_THREAD_LIMIT = 2 << 20
START_TIMEOUT_S = 300.0


# ----------------------------------------------------------------------------------------------- models
def _conv_net(name: str, shape: list[int], convs: list[tuple[int, int, int]], classes: int, seed: int) -> Any:
    """x -> (Conv k x k, stride s, pad k//2) + Relu per ``(channels, k, s)`` -> GlobalAveragePool -> Gemm."""
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, cur, cin = [], [], "x", shape[1]

    def weight(arr_shape: tuple[int, ...], fan_in: int, label: str) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(arr_shape) / np.sqrt(fan_in))
                                             .astype(np.float32), label))
        return label

    for i, (cout, k, s) in enumerate(convs):
        w, b = weight((cout, cin, k, k), cin * k * k, f"w{i}"), weight((cout,), 1, f"b{i}")
        nodes += [helper.make_node("Conv", [cur, w, b], [f"c{i}"], kernel_shape=[k, k], strides=[s, s],
                                   pads=[k // 2] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        cur, cin = f"r{i}", cout
    wf, bf = weight((classes, cin), cin, "wf"), weight((classes,), 1, "bf")
    nodes += [helper.make_node("GlobalAveragePool", [cur], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", wf, bf], ["y"], transB=1)]
    return _model(name, nodes, inits, shape, [shape[0], classes])


def _mlp(name: str, width_in: int, hidden: list[int], classes: int, seed: int) -> Any:
    """x [1, width_in] -> Gemm + Relu per hidden width -> Gemm -> y [1, classes]."""
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    dims, nodes, inits, cur = [width_in, *hidden, classes], [], [], "x"
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(b)).astype(np.float32), f"b{i}")]
        last = i == len(dims) - 2
        nodes.append(helper.make_node("Gemm", [cur, f"w{i}", f"b{i}"], ["y" if last else f"g{i}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [f"r{i}"]))
            cur = f"r{i}"
    return _model(name, nodes, inits, [1, width_in], [1, classes])


def _model(name: str, nodes: list[Any], inits: list[Any], x: list[int], y: list[int]) -> Any:
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def small_models() -> dict[str, Any]:
    """The three always-on models, by line name (the order of ``PRIORITY``)."""
    return {"kws": _conv_net("kws", [1, 1, 49, 10], [(32, 3, 2), (32, 3, 1), (64, 3, 2), (64, 3, 1)], 12, 1),
            "vad": _mlp("vad", 40, [64, 32], 2, 2),
            "img": _conv_net("img", [1, 3, 32, 32], [(16, 3, 1), (32, 3, 2), (64, 3, 2), (64, 3, 1)], 10, 3)}


# ----------------------------------------------------------------------- steps run with the measured tree
def prepare(work: Path) -> None:
    """Build, sign and install the three models as lines of one device state; save inputs and onnxruntime's
    outputs for the answers' check."""
    import numpy as np
    import onnxruntime as ort

    from cuvil_edge import CuvilModel
    from cuvil_edge.signing import Keyring, build_bundle
    from ota import Installer

    ring = Keyring.init(work / "keys", root_keys=1, root_threshold=1, release_keys=1, release_threshold=1)
    (work / "root.json").write_text(json.dumps(ring.root_envelope()))
    arrays = {}
    for seed, (name, proto) in enumerate(small_models().items()):
        shape = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
        x = np.random.default_rng(100 + seed).standard_normal(shape).astype(np.float32)
        sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        arrays[f"{name}_x"], arrays[f"{name}_y"] = x, sess.run(None, {"x": x})[0]
        model = CuvilModel.load(proto).optimize()
        bundle = work / f"{name}.cvb"
        build_bundle(model.save(work / name), bundle, ring.release_keys(), version="1.0.0", release=1,
                     hardware_ids=[HW])
        Installer(work / "state" / "models" / name, HW, root=ring.root_envelope(), model=name).install(bundle)
    np.savez(work / "io.npz", **arrays)


def linear_memory(config: Path) -> dict[str, dict[str, Any]]:
    """Per line: the threads the agent gives it, the bytes of the memory its runtime creates for them, and
    the spec's per-thread table (None in trees without one)."""
    from cuvil_agent.config import load_agent_config, model_policies
    from ota import Installer
    from runtime_wasm.loader import load_model_dir

    cfg = load_agent_config(config)
    out = {}
    for line, policy in zip(cfg.models, model_policies(cfg)):
        slot = Installer(Path(cfg.state_dir) / "models" / line.name, HW, read_only=True,
                         model=line.name).active_dir()
        model = load_model_dir(slot, threads=policy.threads)
        out[line.name] = {"threads": model.threads, "linear": model._mem_len(),
                          "table": list(getattr(model.spec, "memory", None) or []) or None}
        model.close()
    return out


# ------------------------------------------------------------------------------------------ the driver
def _child(tree: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], env=env, text=True,
                          capture_output=True, cwd=tempfile.gettempdir())
    if done.returncode:
        raise RuntimeError(f"{args[0]} under {tree} failed:\n{done.stderr[-4000:]}")
    return done.stdout


def write_config(work: Path, broker_port: int, http_port: int, cores: int) -> Path:
    """The agent.toml a device with the three lines is provisioned with (plain TOML: both trees read it)."""
    q = json.dumps
    lines = "".join(f"[[models]]\nname = {q(n)}\npriority = {p}\n" for n, p in PRIORITY.items())
    path = work / "agent.toml"
    path.write_text(f"[agent]\ndevice_id = \"bench\"\nfleet = {q(FLEET)}\n"
                    f"state_dir = {q(str(work / 'state'))}\ntrust_root = {q(str(work / 'root.json'))}\n"
                    f"hardware_id = {q(HW)}\n"
                    f"log_file = {q(str(work / 'agent.log'))}\ntelemetry_interval_s = 0\n\n"
                    f"[broker]\nhost = \"127.0.0.1\"\nport = {broker_port}\n\n[http]\nport = {http_port}\n\n"
                    f"[admission]\ncores = {cores}\n\n{lines}")
    return path


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
    return {k: int(v.split()[0]) * 1024 for k, v in fields.items()}


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _worker_line(pid: int, inputs: dict[str, bytes]) -> str | None:
    """The model line a worker serves: the one whose request input lies at the start of the shared block
    the process has open (slot 0 holds the last request's input); None for a helper (no block)."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        path = os.readlink(f"/proc/{pid}/fd/{fd}")
        if path.startswith("/dev/shm/"):
            with open(path, "rb") as f:
                head = f.read(max(map(len, inputs.values())))
            return next((n for n, x in inputs.items() if head.startswith(x)), None)
    return None


def serve_once(work: Path, tree: Path, cores: int) -> dict[str, Any]:
    """A fresh agent under ``tree`` serving the three lines: its processes' RSS once each line answered."""
    import numpy as np

    from cuvil_agent.http_client import InferenceClient
    from cuvil_edge.testing.broker import LocalBroker, free_port

    io = np.load(work / "io.npz")
    with LocalBroker(work / "broker") as broker:
        http_port = free_port()
        config = write_config(work, broker.port, http_port, cores)
        env = {**os.environ, "PYTHONPATH": str(tree)}
        agent = subprocess.Popen([sys.executable, "-m", "cuvil_agent.cli", "run", "--config", str(config)],
                                 env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            with InferenceClient(f"http://127.0.0.1:{http_port}", timeout_s=60) as client:
                for name in PRIORITY:
                    got = _answer(client, agent, name, io[f"{name}_x"])
                    np.testing.assert_allclose(got, io[f"{name}_y"], rtol=1e-4, atol=1e-4, err_msg=name)
            time.sleep(0.5)  # what the answers left behind settles
            procs = {"agent": _status(agent.pid)}
            for pid in _descendants(agent.pid):
                line = _worker_line(pid, {n: io[f"{n}_x"].tobytes() for n in PRIORITY})
                key = line or f"helper {pid}"
                if key in procs:
                    raise RuntimeError(f"two worker processes for {key}")
                procs[key] = _status(pid)
        finally:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(60)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
    missing = [n for n in PRIORITY if n not in procs]
    if missing:
        raise RuntimeError(f"no worker process found for {missing}")
    helpers = [v for k, v in procs.items() if k.startswith("helper")]
    return {**{k: v for k, v in procs.items() if not k.startswith("helper")},
            "helpers": {f: sum(h[f] for h in helpers) for f in ("VmRSS", "VmHWM")},
            "helper_count": len(helpers)}


def _answer(client: Any, agent: subprocess.Popen[bytes], name: str, x: Any) -> Any:
    """The line's first answer, retried while the agent starts (connection refused, line not ready yet)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if agent.poll() is not None:
            raise RuntimeError(f"the agent exited {agent.returncode}: {agent.stderr.read().decode()[-4000:]}")
        try:
            return client.infer(name, {"x": x}).outputs["y"]
        except Exception:  # noqa: BLE001 - not serving yet: the agent reports no typed "starting" state
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _mb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:.2f}"


def report(results: dict[str, dict[str, Any]]) -> None:
    """One table, MB: linear memory, then median RSS and peak RSS, each tree side by side, per model worker,
    the agent and its helpers, and their totals."""
    trees, rows = list(results), [*PRIORITY, "agent", "helpers"]
    cols: dict[str, dict[str, float | None]] = {}
    for t in trees:
        cols[f"linear {t}"] = {r: results[t]["memory"][r]["linear"] if r in PRIORITY else None for r in rows}
    for field, label in (("VmRSS", "RSS"), ("VmHWM", "HWM")):
        for t in trees:
            runs = results[t]["runs"]
            cols[f"{label} {t}"] = {r: statistics.median(run[r][field] for run in runs) for r in rows}
    for col in cols.values():
        col["total"] = sum(v for v in col.values() if v is not None)
    threads = {r: str(results[trees[-1]]["memory"][r]["threads"]) if r in PRIORITY else "" for r in rows}
    print(f"\n{'MB':<8} | threads | " + " | ".join(cols))
    for r in [*rows, "total"]:
        cells = " | ".join(f"{_mb(c[r]):>{len(h)}}" for h, c in cols.items())
        print(f"{r:<8} | {threads.get(r, ''):>7} | {cells}")
    for t in trees:
        for name in PRIORITY:
            mem = results[t]["memory"][name]
            over = " - over 2 MB on 1 thread" if mem["table"] and mem["table"][0] > ONE_THREAD_LIMIT else ""
            print(f"{t}: {name} on {mem['threads']} thread(s): {mem['linear']:,} bytes; "
                  f"per-thread table {mem['table'] or 'absent'}{over}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, help="the tree before the footprint work (read-only copy)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cores", type=int, default=4, help="the device's core budget the lines share")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    ap.add_argument("--prepare", type=Path, help=argparse.SUPPRESS)  # child: build and install
    ap.add_argument("--memory", type=Path, help=argparse.SUPPRESS)  # child: linear memory per line
    args = ap.parse_args()
    if args.prepare:
        return prepare(args.prepare)
    if args.memory:
        return print(json.dumps(linear_memory(args.memory)))
    sys.path.insert(0, str(ROOT))  # the driver's own client and broker, whatever is installed
    base = args.workdir or Path(tempfile.mkdtemp(prefix="cuvil-footprint-"))
    trees = {**({"before": args.before.resolve()} if args.before else {}), "after": ROOT}
    print(f"start: {_uptime()}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for label, tree in trees.items():
        work = base / label
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        _child(tree, "--prepare", str(work))
        write_config(work, 0, 0, args.cores)
        memory = json.loads(_child(tree, "--memory", str(work / "agent.toml")))
        results[label] = {"tree": str(tree), "memory": memory, "runs": []}
    for i in range(args.repeat):
        for label, tree in trees.items():
            run = serve_once(base / label, tree, args.cores)
            results[label]["runs"].append(run)
            rss = sum(v["VmRSS"] for k, v in run.items() if k != "helper_count")
            print(f"run {i + 1} {label}: total RSS {_mb(rss)} MB ({run['helper_count']} helper processes)",
                  flush=True)
    report(results)
    print(f"end: {_uptime()}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
