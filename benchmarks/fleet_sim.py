"""Simulated devices for bench_fleet.py: many devices per MQTT connection, each speaking the device side of
the protocol for itself.

A ``Gateway`` is one MQTT session carrying ``len(devices)`` devices (the way a fleet behind a site gateway
reaches a broker, and the only way 100,000 devices fit the 20,000 file descriptors of this machine). Each
device publishes its own retained registration and status on its own topics, verifies every signed
announcement with its own trust state (``ota.protocol.verify_announcement``), decides by its own bucket
whether the stage takes it, reports ``downloading`` and then ``active`` on the new release once every
chunk of its stage's bundle arrived and hash-checked against the signed list. What the gateway shares is
the wire: one subscription to the release topic and the chunk topics, so the broker delivers an
announcement or a chunk once per connection, not once per device. Per device, messages and bytes are
counted as a device of its own would send and receive them (``rx``/``tx``); the broker's own deliveries
are counted per connection (``wire_rx``). Skipped, as in the one-session simulator before it: what only
costs the device (wasmtime compile, self-test, A/B install).
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import queue
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ota import BrokerSettings, TransferLimits
from ota.errors import OtaError
from ota.protocol import (
    Announcement,
    Topics,
    bucket,
    registration_payload,
    status_payload,
    verify_announcement,
)
from ota.transport import MqttClient
from ota.trust import TrustState

HW = "bench-device"
FLEET = "bench"


@dataclass
class SimDevice:
    """One device's protocol state and counters."""

    name: str
    trust: TrustState
    profile: str = ""  # the device class a rollout's gates judge by
    release: int = 1
    seq: int = 0
    target: Announcement | None = None
    rx: int = 0
    rx_bytes: int = 0
    tx: int = 0
    tx_bytes: int = 0

    def message(self, topic: str, state: str, **fields: Any) -> tuple[str, bytes]:
        """A status to publish, counted as sent."""
        return self._sent(topic, status_payload(self.name, state, release=self.release, hardware_id=HW,
                                                profile=self.profile, **fields))

    def registration(self, topic: str) -> tuple[str, bytes]:
        return self._sent(topic, registration_payload(self.name, hardware_id=HW, profile=self.profile))

    def _sent(self, topic: str, payload: bytes) -> tuple[str, bytes]:
        self.tx, self.tx_bytes = self.tx + 1, self.tx_bytes + len(topic) + len(payload)
        return topic, payload

    def received(self, topic: str, payload: bytes) -> None:
        self.rx, self.rx_bytes = self.rx + 1, self.rx_bytes + len(topic) + len(payload)


class Gateway:
    """One MQTT connection for many devices (see the module docstring). Its network thread records what
    arrived; one worker thread of its process acts on it."""

    def __init__(self, index: int, devices: list[SimDevice], broker: BrokerSettings, limits: TransferLimits,
                 work: queue.Queue[tuple[Gateway, str, bytes]], ready: Any = None) -> None:
        self.topics = Topics(broker.topic_prefix, FLEET)
        self.limits, self._work = limits, work
        self.devices = devices
        self.ready = ready  # a shared counter of gateways whose devices all registered and reported
        self.said_hello = False
        self.wire_rx = 0
        self._chunks: dict[int, bytes] = {}
        self._fetching: Announcement | None = None
        self.mqtt = MqttClient(broker, f"gw-{index}", self._on, limits,
                               on_connect=lambda: work.put((self, "connected", b"")))
        self.mqtt.subscribe([self.topics.release])

    def _on(self, topic: str, payload: bytes, _retained: bool) -> None:
        self.wire_rx += 1
        self._work.put((self, topic, payload))

    def act(self, topic: str, payload: bytes) -> None:
        """In the worker thread: register and report at connect, consider an announcement, take a chunk."""
        if topic == "connected":
            hello = []
            for d in self.devices:
                hello.append(d.registration(self.topics.registry(d.name)))
                hello.append(d.message(self.topics.status(d.name), "active"))
            self.mqtt.publish_many(hello, retain=True, timeout_s=600)
            if self.ready is not None and not self.said_hello:
                self.said_hello = True
                with self.ready.get_lock():
                    self.ready.value += 1
        elif topic == self.topics.release:
            self._announcement(payload)
        else:
            self._chunk(topic, payload)

    def _announcement(self, payload: bytes) -> None:
        now = datetime.now(timezone.utc)
        reports = []
        for d in self.devices:
            d.received(self.topics.release, payload)
            try:
                a = verify_announcement(payload, d.trust, FLEET, now, self.limits)
            except OtaError:
                continue
            if a.seq <= d.seq:
                continue
            d.seq = a.seq
            if a.halted and d.target and d.target.bundle_sha256 == a.bundle_sha256:
                d.target = None
            if a.halted or a.release <= d.release or d.target is not None \
                    or bucket(a.bundle_sha256, d.name) >= a.select_below:
                continue
            d.target = a
            reports.append(d.message(self.topics.status(d.name), "downloading", bundle=a.bundle_sha256,
                                     target_release=a.release, have=0, total=len(a.chunks)))
        if reports:
            self.mqtt.publish_many(reports, retain=True, timeout_s=600)
        wanted = next((d.target for d in self.devices if d.target), None)
        if wanted is not None and self._fetching is None:
            self._fetching, self._chunks = wanted, {}
            self.mqtt.subscribe(self.topics.chunk(wanted.bundle_sha256, i) for i in range(len(wanted.chunks)))
        elif self._chunks and wanted is not None:
            self._finish()  # devices newly in a stage take the chunks this connection already has

    def _chunk(self, topic: str, payload: bytes) -> None:
        target, where = self._fetching, self.topics.parse_chunk(topic)
        if not (target and where and where[0] == target.bundle_sha256):
            return
        index = where[1]
        if index < len(target.chunks) and hashlib.sha256(payload).hexdigest() == target.chunks[index]:
            self._chunks[index] = payload
            if len(self._chunks) == len(target.chunks):
                self._finish()

    def _finish(self) -> None:
        """Every device waiting for the bundle the connection holds whole: counted, checked, active."""
        target = self._fetching
        if target is None or len(self._chunks) < len(target.chunks):
            return
        data = b"".join(self._chunks[i] for i in range(len(target.chunks)))
        if hashlib.sha256(data).hexdigest() != target.bundle_sha256:
            return
        reports = []
        for d in self.devices:
            if d.target is None or d.target.bundle_sha256 != target.bundle_sha256:
                continue
            for i, piece in self._chunks.items():
                d.received(self.topics.chunk(target.bundle_sha256, i), piece)
            d.release, d.target = target.release, None
            reports.append(d.message(self.topics.status(d.name), "active", bundle=target.bundle_sha256))
        if reports:
            self.mqtt.publish_many(reports, retain=True, timeout_s=600)


def _work(q: queue.Queue[tuple[Gateway, str, bytes] | None]) -> None:
    while (item := q.get()) is not None:
        try:
            item[0].act(item[1], item[2])
        except OtaError as exc:  # a slow broker: the next announcement or chunk tries again
            print(f"gateway: {exc}", flush=True)


def run_gateways(first: int, groups: list[list[str]], root: dict[str, Any], broker: BrokerSettings,
                 limits: TransferLimits, stop: Any, done: mp.Queue, ready: Any) -> None:
    """One process of gateways (one worker thread each); ``ready`` (a shared ``mp.Value``) counts those
    whose devices all registered and reported; on ``stop``, report per device (rx, tx, rx bytes, tx bytes,
    release) and the connections' own deliveries, and exit."""
    queues: list[queue.Queue] = [queue.Queue() for _ in groups]
    workers = [threading.Thread(target=_work, args=(q,), daemon=True) for q in queues]
    for w in workers:
        w.start()
    gateways = [Gateway(first + i, [SimDevice(n, TrustState(root, 1)) for n in names], broker, limits,
                        queues[i], ready) for i, names in enumerate(groups)]
    for g in gateways:
        g.mqtt.start()
    stop.wait()
    for q in queues:
        q.put(None)
    for w in workers:
        w.join(30)
    done.put(([(d.rx, d.tx, d.rx_bytes, d.tx_bytes, d.release) for g in gateways for d in g.devices],
              sum(g.wire_rx for g in gateways)))
    for g in gateways:
        g.mqtt.close()
