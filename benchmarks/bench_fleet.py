"""Fleet simulation: many lightweight agents (threads, spread over a few processes) on one Mosquitto.

Each agent is the real ``ota.Agent``: its own MQTT session, verified chunked download, A/B install
with wasmtime self-test. The publisher rolls release 2 out in stages (canary, 50%, 100%). Reports
time to full rollout and MQTT messages per device (received + sent by the agents' clients).

    python benchmarks/bench_fleet.py --agents 200 --procs 4
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import tempfile
import threading
import time
from pathlib import Path

from cuvil_edge.fleet import LocalBroker, Publisher, Rollout, tiny_release
from cuvil_edge.signing import Keyring
from ota import Agent, AgentConfig, BrokerSettings, Installer, TransferLimits
from ota.agent import JsonLog

HW = "bench-device"
FLEET = "bench"


def run_agents(names: list[str], template: str, base: str, broker: BrokerSettings, limits: TransferLimits,
               stop: mp.synchronize.Event, done: mp.Queue) -> None:
    """One process: an agent per name, each in a thread; on ``stop``, report message counts and exit."""
    log = JsonLog(f"proc-{names[0]}", str(Path(base) / f"{names[0]}.log"))
    agents, threads, halt = [], [], threading.Event()
    for name in names:
        state = shutil.copytree(template, Path(base) / name)
        cfg = AgentConfig(device_id=name, fleet=FLEET, state_dir=str(state), hardware_id=HW,
                          telemetry_interval_s=0, broker=broker, limits=limits)
        agents.append(Agent(cfg, log_sink=log))
        threads.append(threading.Thread(target=agents[-1].run, args=(halt,), daemon=True))
        threads[-1].start()
    stop.wait()
    counts = [(a.mqtt.received, a.mqtt.sent, a.host.release) for a in agents]
    halt.set()
    for t in threads:
        t.join(30)
    done.put(counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agents", type=int, default=200)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--chunk-kb", type=int, default=1, help="small chunks: more messages per device")
    ap.add_argument("--canary", type=float, default=10.0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="cuvil-bench-fleet-") as tmp:
        base = Path(tmp)
        ring = Keyring.init(base / "keys", 1, 1, 1, 1)
        bundles = [tiny_release(base, ring, r, HW) for r in (1, 2)]
        template = base / "template"
        Installer(template, HW, root=ring.root_envelope()).install(bundles[0])
        size = bundles[1].stat().st_size
        limits = TransferLimits(chunk_timeout_s=2.0, max_retries=50, backoff_max_s=2.0)
        with LocalBroker(base / "broker") as broker:
            ctx = mp.get_context("spawn")
            stop, done = ctx.Event(), ctx.Queue()
            names = [f"d{i:04d}" for i in range(args.agents)]
            procs = [ctx.Process(target=run_agents, args=(names[p::args.procs], str(template), str(base),
                                                          broker.settings(), limits, stop, done))
                     for p in range(args.procs)]
            t0 = time.perf_counter()
            for p in procs:
                p.start()
            pub = Publisher(broker.settings(), FLEET, ring.release_keys(), base / "fleet.json").start()
            seen = pub.wait_for_devices(args.agents, 300)
            t_up = time.perf_counter() - t0
            t1 = time.perf_counter()
            stage_times: dict[float, float] = {}

            def progress(r: Rollout) -> None:
                stage_times.setdefault(r.stages[r.stage], time.perf_counter() - t1)

            pub.publish(bundles[1], canary=args.canary, halt_on=5.0, chunk_bytes=args.chunk_kb << 10)
            rollout = pub.watch(timeout_s=900, stage_timeout_s=600, poll_s=0.1, progress=progress)
            t_roll = time.perf_counter() - t1
            stop.set()
            counts = [c for _ in procs for c in done.get(timeout=120)]
            for p in procs:
                p.join(60)
            pub.close()
    received = sum(c[0] for c in counts)
    sent = sum(c[1] for c in counts)
    on_new = sum(c[2] == 2 for c in counts)
    chunks = len(rollout.chunks)
    print(f"fleet simulation: {args.agents} agents in {args.procs} processes, bundle {size} B in {chunks} "
          f"chunks of {args.chunk_kb} KiB, stages {rollout.stages}")
    print("| metric | value |\n|---|---|")
    print(f"| agents connected and reporting (s) | {t_up:.1f} ({seen} seen) |")
    for percent, t in stage_times.items():
        print(f"| stage {percent:g}% reached at (s) | {t:.1f} |")
    print(f"| time to full rollout (s) | {t_roll:.1f} ({rollout.status}, {on_new}/{len(counts)} on "
          "release 2) |")
    print(f"| MQTT messages received per device | {received / len(counts):.1f} (chunks: {chunks}) |")
    print(f"| MQTT messages sent per device | {sent / len(counts):.1f} |")


if __name__ == "__main__":
    main()
