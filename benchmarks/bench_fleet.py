"""Fleet at scale: one real Mosquitto, one publisher process, many devices; a staged rollout to all.

Devices are simulated by default: each is its own MQTT session (``ota.transport.MqttClient``) speaking
the device side of the protocol, so the broker and the publisher see exactly what a real fleet sends:
a retained status with the device's targets, the signed announcement verified with the device's trust
root (``ota.protocol.verify_announcement``), the chunks of its stage fetched and hash-checked against the
signed list, then ``active`` on the new release. They skip what only costs the device (wasmtime compile,
self-test, A/B install), which is what lets 2,000 of them share a 2-core machine. ``--real-agents``
runs the real ``ota.Agent`` instead (installs included; a few hundred at most here).

Reports, per device, MQTT messages and bytes (topic + payload, both directions, as the device's client
counts them; MQTT framing adds a few bytes per message), the publisher's peak RSS (its own process) and
the broker's, and the time to full rollout.

    python benchmarks/bench_fleet.py                      # 200 simulated devices
    python benchmarks/bench_fleet.py --devices 2000 --procs 8
    python benchmarks/bench_fleet.py --devices 100 --real-agents
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import queue
import shutil
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cuvil_agent.agent import Agent
from cuvil_agent.config import AgentConfig
from cuvil_agent.log import JsonLog
from cuvil_edge.fleet.publisher import Publisher, Rollout
from cuvil_edge.signing import Keyring
from cuvil_edge.testing.broker import LocalBroker
from cuvil_edge.testing.release import tiny_release
from ota import BrokerSettings, Installer, TransferLimits
from ota.errors import OtaError
from ota.protocol import Announcement, Topics, bucket, status_payload, verify_announcement
from ota.transport import MqttClient
from ota.trust import TrustState

HW = "bench-device"
FLEET = "bench"
WORKERS = 4  # per device process: publishes wait for their PUBACK, so a few run side by side


class SimDevice:
    """The device side of the protocol without an install (see the module docstring); its client's
    network thread only records what arrived, and a worker thread of its process acts on it."""

    def __init__(self, name: str, broker: BrokerSettings, root: dict[str, Any], limits: TransferLimits,
                 work: queue.Queue[tuple[SimDevice, str]]) -> None:
        self.name, self.limits, self._work = name, limits, work
        self.topics = Topics(broker.topic_prefix, FLEET)
        self.trust = TrustState(root, 1)
        self.release, self.seq = 1, 0
        self.rx_bytes = self.tx_bytes = 0
        self._lock = threading.Lock()
        self._announcements: list[bytes] = []
        self._target: Announcement | None = None
        self._chunks: dict[int, bytes] = {}
        self.mqtt = MqttClient(broker, f"sim-{name}", self._on, limits,
                               on_connect=lambda: work.put((self, "status")))
        self.mqtt.subscribe([self.topics.release])

    def _on(self, topic: str, payload: bytes, _retained: bool) -> None:
        with self._lock:
            self.rx_bytes += len(topic) + len(payload)
            if topic == self.topics.release:
                self._announcements.append(payload)
                self._work.put((self, "announcement"))
                return
            where = self.topics.parse_chunk(topic)
            target = self._target
            if not (where and target and where[0] == target.bundle_sha256):
                return
            index = where[1]
            if index < len(target.chunks) and hashlib.sha256(payload).hexdigest() == target.chunks[index]:
                self._chunks[index] = payload
                if len(self._chunks) == len(target.chunks):
                    self._work.put((self, "complete"))

    def _publish_status(self, state: str, **fields: Any) -> None:
        payload = status_payload(self.name, state, release=self.release, hardware_id=HW, profile="", **fields)
        topic = self.topics.status(self.name)
        self.tx_bytes += len(topic) + len(payload)
        self.mqtt.publish(topic, payload, retain=True)

    def act(self, what: str) -> None:
        """One step, in the device's worker: report, consider announcements, or finish a download."""
        if what == "status":
            self._publish_status("active")
        elif what == "announcement":
            with self._lock:
                pending, self._announcements = self._announcements, []
            for payload in pending:
                self._consider(payload)
        elif what == "complete":
            with self._lock:
                target, data = self._target, b"".join(self._chunks[i] for i in sorted(self._chunks))
                self._target, self._chunks = None, {}
            if target is None or hashlib.sha256(data).hexdigest() != target.bundle_sha256:
                return
            sha = target.bundle_sha256
            self.mqtt.unsubscribe(self.topics.chunk(sha, i) for i in range(len(target.chunks)))
            self.release = target.release
            self._publish_status("active", bundle=target.bundle_sha256)

    def _consider(self, payload: bytes) -> None:
        try:
            a = verify_announcement(payload, self.trust, FLEET, datetime.now(timezone.utc), self.limits)
        except OtaError:
            return
        if a.seq <= self.seq:
            return
        self.seq = a.seq
        with self._lock:
            if a.halted and self._target and self._target.bundle_sha256 == a.bundle_sha256:
                self._target, self._chunks = None, {}  # withdrawn: abandon the download
            if a.halted or a.release <= self.release or self._target is not None \
                    or bucket(a.bundle_sha256, self.name) >= a.select_below:
                return
            self._target = a
        self._publish_status("downloading", bundle=a.bundle_sha256, target_release=a.release, have=0,
                             total=len(a.chunks))
        self.mqtt.subscribe(self.topics.chunk(a.bundle_sha256, i) for i in range(len(a.chunks)))


def _work(q: queue.Queue[tuple[SimDevice, str]]) -> None:
    while (item := q.get()) is not None:
        item[0].act(item[1])


def run_sims(names: list[str], root: dict[str, Any], broker: BrokerSettings, limits: TransferLimits,
             stop: mp.synchronize.Event, done: mp.Queue) -> None:
    """One process of simulated devices; on ``stop``, report (received, sent, rx bytes, tx bytes,
    release) per device and exit."""
    queues: list[queue.Queue] = [queue.Queue() for _ in range(WORKERS)]
    workers = [threading.Thread(target=_work, args=(q,), daemon=True) for q in queues]
    for w in workers:
        w.start()
    sims = [SimDevice(n, broker, root, limits, queues[i % WORKERS]) for i, n in enumerate(names)]
    for s in sims:
        s.mqtt.start()
    stop.wait()
    for q in queues:
        q.put(None)
    for w in workers:
        w.join(30)
    done.put([(s.mqtt.received, s.mqtt.sent, s.rx_bytes, s.tx_bytes, s.release) for s in sims])
    for s in sims:
        s.mqtt.close()


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
    done.put(counts)


def run_publisher(broker: BrokerSettings, keys_dir: str, state: str, bundle: str, devices: int,
                  canary: float, chunk_bytes: int, out: mp.Queue) -> None:
    """The publisher in its own process, so that its peak RSS is its own: discover, publish, watch."""
    keys = Keyring(Path(keys_dir)).release_keys()
    pub = Publisher(broker, FLEET, keys, state).start()
    rss_start = memory_kb(field="VmRSS")
    t0 = time.perf_counter()
    seen = pub.wait_for_devices(devices, 600)
    t_up = time.perf_counter() - t0
    stage_times: dict[float, float] = {}
    t1 = time.perf_counter()

    def progress(r: Rollout) -> None:
        stage_times.setdefault(r.stages[r.stage], time.perf_counter() - t1)

    pub.publish(bundle, canary=canary, halt_on=5.0, chunk_bytes=chunk_bytes)
    rollout = pub.watch(timeout_s=1800, stage_timeout_s=900, poll_s=0.1, progress=progress)
    t_roll = time.perf_counter() - t1
    pub.close()
    out.put({"seen": seen, "t_up": t_up, "stage_times": stage_times, "t_roll": t_roll,
             "status": rollout.status, "stages": rollout.stages, "chunks": len(rollout.chunks),
             "rss_start_kb": rss_start, "rss_end_kb": memory_kb(field="VmRSS"), "rss_peak_kb": memory_kb(),
             "pub_received": pub.mqtt.received, "pub_sent": pub.mqtt.sent})


def memory_kb(pid: int | str = "self", field: str = "VmHWM") -> int:
    """A process's peak (``VmHWM``) or current (``VmRSS``) resident set, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=200)
    ap.add_argument("--procs", type=int, default=4, help="device processes")
    ap.add_argument("--real-agents", action="store_true", help="real ota.Agent installs, not simulators")
    ap.add_argument("--chunk-kb", type=int, default=1, help="small chunks: more messages per device")
    ap.add_argument("--canary", type=float, default=10.0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="cuvil-bench-fleet-") as tmp:
        base = Path(tmp)
        ring = Keyring.init(base / "keys", 1, 1, 1, 1)
        bundles = [tiny_release(base, ring, r, HW) for r in (1, 2)]
        size = bundles[1].stat().st_size
        limits = TransferLimits(chunk_timeout_s=2.0, max_retries=50, backoff_max_s=2.0)
        with LocalBroker(base / "broker") as broker:
            ctx = mp.get_context("spawn")
            stop, done, out = ctx.Event(), ctx.Queue(), ctx.Queue()
            names = [f"d{i:05d}" for i in range(args.devices)]
            if args.real_agents:
                template = base / "template"
                Installer(template, HW, root=ring.root_envelope()).install(bundles[0])
                target, extra = run_agents, (str(template), str(base))
            else:
                target, extra = run_sims, (ring.root_envelope(),)
            procs = [ctx.Process(target=target, args=(names[p::args.procs], *extra, broker.settings(), limits,
                                                      stop, done)) for p in range(args.procs)]
            for p in procs:
                p.start()
            publisher = ctx.Process(target=run_publisher, args=(
                broker.settings(), str(ring.directory), str(base / "fleet.json"), str(bundles[1]),
                args.devices, args.canary, args.chunk_kb << 10, out))
            publisher.start()
            result = out.get(timeout=3600)
            publisher.join(60)
            stop.set()
            counts = [c for _ in procs for c in done.get(timeout=300)]
            for p in procs:
                p.join(60)
            broker_rss = memory_kb(broker.proc.pid) if broker.proc else 0
    n = len(counts)
    kind = "real agents" if args.real_agents else "simulated devices"
    print(f"fleet: {args.devices} {kind} in {args.procs} processes, one Mosquitto; bundle "
          f"{size} B in {result['chunks']} chunks of {args.chunk_kb} KiB, stages "
          f"{result['stages']}")
    print("| metric | value |\n|---|---|")
    print(f"| devices connected and reporting (s) | {result['t_up']:.1f} ({result['seen']} seen) |")
    for percent, t in result["stage_times"].items():
        print(f"| stage {percent:g}% started at (s) | {t:.1f} |")
    print(f"| time to full rollout (s) | {result['t_roll']:.1f} ({result['status']}, "
          f"{sum(c[4] == 2 for c in counts)}/{n} on release 2) |")
    print(f"| MQTT messages per device, received / sent | {sum(c[0] for c in counts) / n:.1f} / "
          f"{sum(c[1] for c in counts) / n:.1f} |")
    if not args.real_agents:
        rx, tx = sum(c[2] for c in counts) / n, sum(c[3] for c in counts) / n
        print(f"| bytes per device, received / sent (topic + payload) | {rx:,.0f} / {tx:,.0f} |")
    print(f"| publisher messages received / sent | {result['pub_received']} / {result['pub_sent']} |")
    print(f"| publisher peak RSS (MiB) | {result['rss_peak_kb'] / 1024:.1f} (RSS after connecting "
          f"{result['rss_start_kb'] / 1024:.1f}, after the rollout {result['rss_end_kb'] / 1024:.1f}) |")
    print(f"| broker peak RSS (MiB) | {broker_rss / 1024:.1f} |")


if __name__ == "__main__":
    main()
