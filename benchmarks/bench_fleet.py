"""Fleet at scale: one real Mosquitto, one or two controller processes, many devices; a staged rollout to all.

Devices are simulated by default (``fleet_sim.py``): many per MQTT connection (``--per-connection``), each
speaking the device side of the protocol for itself: a retained registration and status, every signed
announcement verified with its own trust root, the chunks of its stage hash-checked against the signed
list, then ``active`` on the new release. They skip what only costs the device (wasmtime compile,
self-test, A/B install). ``--real-agents`` runs the real ``ota.Agent`` instead (installs included; a few
hundred at most here).

The controller keeps its bookkeeping in a fleet store (``--store sqlite``, the default, or ``postgresql``: a
local server started for the run, or ``none``: the JSON state file). It finds the fleet by discovery
(``cuvil_edge.fleet.discovery``: the registry under the broker's per-client queue), then publishes and
watches. ``--controllers 2`` adds a second controller process on the same store; both take statuses
through one MQTT shared subscription, so each ingests part of the stream, and the leader (by the store's
lease) steps the rollout.

Reports: the time to discover the fleet and to roll out to all; controller CPU per device (user + system of
each controller process over the rollout, and over discovery), which must not grow with the fleet; MQTT
messages and bytes per device as a device of its own would count them (topic + payload), and the broker's
deliveries per connection; peak RSS of each controller and of the broker; the broker settings used.

    python benchmarks/bench_fleet.py                                   # 1,000 devices, SQLite
    python benchmarks/bench_fleet.py --devices 100000 --per-connection 500
    python benchmarks/bench_fleet.py --devices 50000 --store postgresql --controllers 2
    python benchmarks/bench_fleet.py --devices 100 --real-agents --store none
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import multiprocessing as mp
import resource
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from fleet_sim import FLEET, HW, run_gateways

from cuvil_agent.agent import Agent
from cuvil_agent.config import AgentConfig
from cuvil_agent.log import JsonLog
from cuvil_edge.fleet.discovery import DiscoveryLimits
from cuvil_edge.fleet.publisher import Publisher, Rollout
from cuvil_edge.signing import Keyring
from cuvil_edge.testing.broker import LocalBroker
from cuvil_edge.testing.release import tiny_release
from ota import BrokerSettings, Installer, TransferLimits

SHARE = "bench"


def run_agents(names: list[str], template: str, base: str, broker: BrokerSettings, limits: TransferLimits,
               stop: mp.synchronize.Event, done: mp.Queue) -> None:
    """One process of real agents, each in a thread; bytes are not counted (None)."""
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
    counts = [(a.mqtt.received, a.mqtt.sent, None, None, a.host.release) for a in agents]
    halt.set()
    for t in threads:
        t.join(30)
    done.put((counts, None))


def cpu_s() -> float:
    """This process's CPU time so far (user + system), seconds."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def run_controller(role: str, broker: BrokerSettings, keys_dir: str, store_url: str, state: str, bundle: str,
                   devices: int, share: str, args: dict[str, Any], stop: Any, out: mp.Queue) -> None:
    """A controller in its own process, so its CPU and peak RSS are its own. The leader discovers the
    fleet, publishes and watches the rollout; a standby ingests its part of the statuses until ``stop``."""
    from cuvil_edge.fleet.store import open_store

    faulthandler.dump_traceback_later(900, exit=False)  # a controller that hangs says where
    store = open_store(store_url) if store_url else None
    keys = Keyring(Path(keys_dir)).release_keys()
    pub = Publisher(broker, FLEET, keys, None if store else state, store=store, share=share,
                    lease_s=30.0 if share else None).start(60)
    result: dict[str, Any] = {"role": role}
    if role == "standby":
        stop.wait()
    else:
        if share:
            pub.lead(60)
        t0, c0 = time.perf_counter(), cpu_s()
        census = pub.discover(DiscoveryLimits(broker_queue=args["broker_queue"]))
        result |= {"t_discover": time.perf_counter() - t0, "cpu_discover": cpu_s() - c0,
                   "census": census.describe(), "seen": pub.wait_for_devices(devices, 600),
                   "rss_start_kb": memory_kb(field="VmRSS")}
        stage_times: dict[float, float] = {}
        t1, c1 = time.perf_counter(), cpu_s()

        def progress(r: Rollout) -> None:
            stage_times.setdefault(r.stages[r.stage], time.perf_counter() - t1)

        pub.publish(bundle, canary=args["canary"], halt_on=5.0, chunk_bytes=args["chunk_kb"] << 10)
        rollout = pub.watch(timeout_s=3600, stage_timeout_s=args["stage_timeout_s"], poll_s=0.2,
                            progress=progress)
        result |= {"t_roll": time.perf_counter() - t1, "cpu_roll": cpu_s() - c1, "stage_times": stage_times,
                   "status": rollout.status, "stages": rollout.stages, "chunks": len(rollout.chunks),
                   "retries": pub.retries}
    result |= {"cpu_total": cpu_s(), "rss_peak_kb": memory_kb(), "received": pub.mqtt.received,
               "sent": pub.mqtt.sent}
    pub.close()
    if store is not None:
        store.close()
    out.put(result)


def memory_kb(pid: int | str = "self", field: str = "VmHWM") -> int:
    """A process's peak (``VmHWM``) or current (``VmRSS``) resident set, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def store_for(kind: str, base: Path) -> tuple[str, Any]:
    """The store URL for ``--store`` and the server to stop after the run (None for SQLite or no store)."""
    if kind == "none":
        return "", None
    if kind == "sqlite":
        return f"sqlite:///{base / 'fleet.db'}", None
    from cuvil_edge.testing.postgres import LocalPostgres

    pg = LocalPostgres(durable=True).start()
    return pg.url, pg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--procs", type=int, default=2, help="device processes")
    ap.add_argument("--per-connection", type=int, default=0,
                    help="simulated devices per MQTT connection (default: enough for <= 200 connections)")
    ap.add_argument("--real-agents", action="store_true", help="real ota.Agent installs, not simulators")
    ap.add_argument("--store", choices=("sqlite", "postgresql", "none"), default="sqlite")
    ap.add_argument("--controllers", type=int, choices=(1, 2), default=1)
    ap.add_argument("--queue-limit", type=int, default=10_000,
                    help="Mosquitto's max_queued_messages (0: its default, 1,000)")
    ap.add_argument("--chunk-kb", type=int, default=1, help="small chunks: more messages per device")
    ap.add_argument("--canary", type=float, default=10.0)
    ap.add_argument("--stage-timeout-s", type=float, default=600.0,
                    help="devices of a stage without an outcome by then count as failed")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    per = args.per_connection or max(1, -(-args.devices // 200))

    with tempfile.TemporaryDirectory(prefix="cuvil-bench-fleet-") as tmp:
        base = Path(tmp)
        ring = Keyring.init(base / "keys", 1, 1, 1, 1)
        bundles = [tiny_release(base, ring, r, HW) for r in (1, 2)]
        size = bundles[1].stat().st_size
        limits = TransferLimits(chunk_timeout_s=2.0, max_retries=50, backoff_max_s=2.0)
        store_url, server = store_for(args.store, base)
        queue_limit = args.queue_limit or None
        try:
            with LocalBroker(base / "broker", queue_limit=queue_limit) as broker:
                conf = [line for line in (base / "broker" / "mosquitto.conf").read_text().splitlines()
                        if line.split()[0] in ("max_queued_messages", "persistence", "autosave_interval")]
                ctx, settings = mp.get_context("spawn"), broker.settings()
                stop, halt, done, out = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
                ready = ctx.Value("i", 0)
                names = [f"d{i:06d}" for i in range(args.devices)]
                expect_ready = 0  # real agents register themselves; the controller waits for them
                if args.real_agents:
                    template = base / "template"
                    Installer(template, HW, root=ring.root_envelope()).install(bundles[0])
                    procs = [ctx.Process(target=run_agents, args=(
                        names[p::args.procs], str(template), str(base), settings, limits, stop, done))
                             for p in range(args.procs)]
                else:
                    groups = [names[i:i + per] for i in range(0, len(names), per)]
                    expect_ready = len(groups)
                    procs = [ctx.Process(target=run_gateways, args=(p * len(groups), groups[p::args.procs],
                                                                    ring.root_envelope(), settings, limits,
                                                                    stop, done, ready))
                             for p in range(args.procs)]
                t0 = time.perf_counter()
                for p in procs:
                    p.start()
                while ready.value < expect_ready and time.perf_counter() - t0 < 1800:
                    time.sleep(0.2)
                t_up = time.perf_counter() - t0
                share = SHARE if args.controllers > 1 else ""
                bq = 20 + (queue_limit or 1000)
                common = (broker.settings(), str(ring.directory), store_url, str(base / "fleet.json"),
                          str(bundles[1]), args.devices, share,
                          {"canary": args.canary, "chunk_kb": args.chunk_kb, "broker_queue": bq,
                           "stage_timeout_s": args.stage_timeout_s})
                controllers = [ctx.Process(target=run_controller, args=(role, *common, halt, out))
                               for role in ("leader", "standby")[:args.controllers]]
                for c in controllers:
                    c.start()
                results = [out.get(timeout=7200)]  # the leader's, when its rollout ended
                halt.set()
                results += [out.get(timeout=120) for _ in controllers[1:]]
                for c in controllers:
                    c.join(60)
                stop.set()
                reports = [done.get(timeout=600) for _ in procs]
                for p in procs:
                    p.join(60)
                broker_rss = memory_kb(broker.proc.pid) if broker.proc else 0
                db = base / "broker" / "mosquitto.db"
                persisted = db.stat().st_size if db.exists() else 0
        finally:
            if server is not None:
                server.stop()
    counts = [c for r in reports for c in r[0]]
    wire = sum(r[1] or 0 for r in reports)
    report(args, per, size, conf, t_up, results, counts, wire, (broker_rss, persisted))


def report(args: argparse.Namespace, per: int, size: int, conf: list[str], t_up: float,
           results: list[dict[str, Any]], counts: list[tuple[Any, ...]], wire: int,
           broker: tuple[int, int]) -> None:
    broker_rss, persisted = broker
    lead = next(r for r in results if r["role"] == "leader")
    n = len(counts)
    kind = "real agents" if args.real_agents else f"simulated devices, {per} per connection"
    connections = -(-n // per) if not args.real_agents else n
    print(f"fleet: {args.devices} {kind} in {args.procs} processes; store {args.store}, {args.controllers} "
          f"controller(s); bundle {size} B in {lead['chunks']} chunks of {args.chunk_kb} KiB, stages "
          f"{lead['stages']}; broker: Mosquitto 2, {', '.join(conf)}")
    per_device = 1e6 * lead["cpu_discover"] / n
    rows = [("devices connected, registered and reporting (s)", f"{t_up:.1f}"),
            ("discovery", f"{lead['t_discover']:.1f} s, {per_device:.0f} us CPU per device: "
                          f"{lead['census']}"),
            *((f"stage {p:g}% started at (s)", f"{t:.1f}") for p, t in lead["stage_times"].items()),
            ("time to full rollout (s)", f"{lead['t_roll']:.1f} ({lead['status']}, "
                                         f"{sum(c[4] == 2 for c in counts)}/{n} on release 2, "
                                         f"{lead['retries']} steps retried)"),
            ("leader CPU over the rollout", f"{lead['cpu_roll']:.1f} s, {1e6 * lead['cpu_roll'] / n:.0f} us "
                                            "per device"),
            *((f"{r['role']} CPU in all, statuses received", f"{r['cpu_total']:.1f} s, "
               f"{1e6 * r['cpu_total'] / n:.0f} us per device; {r['received']}") for r in results),
            ("MQTT messages per device, received / sent", f"{sum(c[0] for c in counts) / n:.1f} / "
                                                          f"{sum(c[1] for c in counts) / n:.1f}")]
    if not args.real_agents:
        rows += [("bytes per device, received / sent (topic + payload)",
                  f"{sum(c[2] for c in counts) / n:,.0f} / {sum(c[3] for c in counts) / n:,.0f}"),
                 ("broker deliveries per connection (all its devices)", f"{wire / connections:.1f}")]
    rows += [(f"{r['role']} peak RSS (MiB)", f"{r['rss_peak_kb'] / 1024:.1f}") for r in results]
    rows.append(("broker peak RSS (MiB), persistence file (MB)",
                 f"{broker_rss / 1024:.1f}, {persisted / 1e6:.1f}"))
    print("| metric | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    if args.json:
        figures = {"args": vars(args), "per_connection": per, "results": results, "devices": n, "t_up": t_up,
                   "on_release_2": sum(c[4] == 2 for c in counts), "wire": wire, "broker_rss_kb": broker_rss,
                   "broker_db_bytes": persisted}
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
