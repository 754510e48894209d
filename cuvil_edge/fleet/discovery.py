"""Finding every device of a fleet whatever the broker's queue limits (issue 39).

A subscription to every retained status (``status/+``) gets only what the broker queues for one client
at once: Mosquitto's defaults (20 messages in flight, 1,000 queued) let 1,020 of 20,000 statuses through
and drop the rest without telling anyone. Discovery takes that one round first (all a small fleet needs,
and the only way to see agents from before the registry), then reads in rounds that stay under the bound:
the registry's shards (``ota.protocol.Topics.registry``: every agent registers there, retained, at each
connect) a few at a time, sized from what the shards read so far hold, then every registered device's
status by its exact topic, a batch at a time. A round ends at a fence: a message the client sends itself
after subscribing, which the broker delivers after the round's retained messages. A round that delivered
the broker's whole per-client bound may have lost messages: its shards are read again one at a time, and
a shard that fills the bound alone is reported (``Census.saturated``), so a census says exactly which part
of the fleet it could not see.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ota import BrokerSettings, TransferLimits
from ota.errors import OtaError
from ota.protocol import REGISTRY_SHARDS, Topics, read_registration, read_status

log = logging.getLogger(__name__)
_ROUNDS = itertools.count(1)
_CLIENTS = itertools.count()  # host tool connections made by this process


def tool_client_id(role: str, fleet: str, model: str = "") -> str:
    """The MQTT client id of a host tool's connection: its role, fleet and line, this process and the
    connection's number in it (two connections must never take over each other's). Host tools connect with
    clean sessions (``persistent=False``), so a run leaves no session behind queueing the fleet's statuses.
    Here because discovery is the host tools' lowest module (the publisher and dashboard import it)."""
    line = [model] if model else []
    return "-".join(["cuvil", role, fleet, *line, str(os.getpid()), str(next(_CLIENTS))])


@dataclass(frozen=True)
class DiscoveryLimits:
    """How discovery reads a broker. ``broker_queue``: what the broker lets through one subscription at
    once (Mosquitto: ``max_inflight_messages`` + ``max_queued_messages``; 20 + 1,000 unless configured);
    a round that delivers that many may have lost some. ``round_messages``: what a round aims to read
    (under ``broker_queue``). ``round_timeout_s``: a round's wait for its fence."""

    broker_queue: int = 1020
    round_messages: int = 500
    round_timeout_s: float = 10.0
    fence_every_s: float = 0.25

    def __post_init__(self) -> None:
        if not 1 <= self.round_messages < self.broker_queue:
            raise ValueError(f"round_messages {self.round_messages} must be in [1, broker_queue "
                             f"{self.broker_queue})")
        if not 0 < self.fence_every_s <= self.round_timeout_s:
            raise ValueError("fence_every_s must be in (0, round_timeout_s]")


@dataclass
class Census:
    """What discovery found: every registered device, the statuses read, and what it could not see."""

    registered: dict[str, dict[str, Any]] = field(default_factory=dict)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: registry shards that filled the broker's per-client bound alone: devices there may be missing
    saturated: list[str] = field(default_factory=list)
    #: registrations and statuses refused (malformed, or naming another device than their topic)
    refused: int = 0
    rounds: int = 0
    limits: DiscoveryLimits = field(default_factory=DiscoveryLimits)
    #: the first round (every retained status at once, for agents from before the registry) filled the bound
    wildcard_full: bool = False

    @property
    def unreported(self) -> list[str]:
        """Registered devices without a retained status (never reported, or their status was cleared)."""
        return sorted(set(self.registered) - set(self.statuses))

    @property
    def complete(self) -> bool:
        return not self.saturated

    def describe(self) -> str:
        text = (f"{len(self.registered)} devices registered, {len(self.statuses)} statuses read "
                f"({self.rounds} rounds under the broker's per-client bound of {self.limits.broker_queue})")
        if missing := self.unreported:
            text += f"; no status from {len(missing)} registered: {', '.join(missing[:10])}" + (
                ", ..." if len(missing) > 10 else "")
        if unregistered := sorted(set(self.statuses) - set(self.registered)):
            text += f"; {len(unregistered)} reported without registering (agents from before the registry)"
            if self.wildcard_full:
                text += (", read from every status at once, which filled the broker's bound: more such "
                         "devices may be missing")
        if self.refused:
            text += f"; {self.refused} malformed messages refused"
        if self.saturated:
            text += (f"; INCOMPLETE: registry shards {', '.join(self.saturated)} reached the bound on their "
                     "own, so devices registered there may be missing (raise the broker's "
                     "max_queued_messages, or pass its real bound as the broker queue)")
        return text


class _Reader:
    """One clean-session connection that reads retained messages in fenced rounds."""

    def __init__(self, broker: BrokerSettings, topics: Topics, limits: DiscoveryLimits,
                 transfer: TransferLimits | None, client_id: str) -> None:
        from ota.transport import MqttClient

        self.limits = limits
        self.fence = f"{topics.base}/discovery/{client_id}"
        self._cond = threading.Condition()
        self._got: list[tuple[str, bytes]] = []
        self.mqtt = MqttClient(broker, client_id, self._on, transfer, persistent=False)
        self.mqtt.subscribe([self.fence])

    def _on(self, topic: str, payload: bytes, _retained: bool) -> None:
        with self._cond:
            self._got.append((topic, payload))
            self._cond.notify_all()

    def round(self, filters: list[str]) -> tuple[list[tuple[str, bytes]], bool]:
        """Subscribe to ``filters``, collect up to the fence, unsubscribe: the messages and whether the
        fence came (a broker that dropped it, too, dropped the round's tail)."""
        token = str(next(_ROUNDS)).encode()
        with self._cond:
            self._got = []
        self.mqtt.subscribe(filters)
        end = time.monotonic() + self.limits.round_timeout_s
        fenced = False
        try:
            while not fenced and time.monotonic() < end:
                self.mqtt.publish(self.fence, token, timeout_s=self.limits.round_timeout_s)
                wait_end = min(end, time.monotonic() + self.limits.fence_every_s)
                with self._cond:
                    while not (fenced := (self.fence, token) in self._got) and time.monotonic() < wait_end:
                        self._cond.wait(max(wait_end - time.monotonic(), 0.0))
        finally:
            self.mqtt.unsubscribe(filters)
        with self._cond:
            got, self._got = self._got, []
        cut = got.index((self.fence, token)) if fenced else len(got)
        return [m for m in got[:cut] if m[0] != self.fence], fenced


def discover(broker: BrokerSettings, fleet: str, limits: DiscoveryLimits | None = None,
             transfer: TransferLimits | None = None, client_id: str = "") -> Census:
    """Every device registered in ``fleet`` and its retained status, read under the broker's per-client
    bound (see the module docstring)."""
    return _census(broker, fleet, None, limits, transfer, client_id)


def read_statuses(broker: BrokerSettings, fleet: str, devices: Iterable[str],
                  limits: DiscoveryLimits | None = None, transfer: TransferLimits | None = None,
                  client_id: str = "") -> dict[str, dict[str, Any]]:
    """The retained statuses of ``devices``, by their exact topics in rounds under the broker's bound: what
    a controller reads again when a stage waits on devices whose live statuses it never got (dropped at
    its queue, or delivered to a member of its share group that died)."""
    return _census(broker, fleet, sorted(devices), limits, transfer, client_id).statuses


def _census(broker: BrokerSettings, fleet: str, devices: list[str] | None, limits: DiscoveryLimits | None,
            transfer: TransferLimits | None, client_id: str) -> Census:
    """Read every retained status at once and the registry (unless ``devices`` names whom to read), then
    the status of each device not read yet."""
    limits = limits or DiscoveryLimits()
    topics = Topics(broker.topic_prefix, fleet)
    reader = _Reader(broker, topics, limits, transfer, client_id or tool_client_id("discover", fleet))
    census = Census(limits=limits)
    reader.mqtt.start(wait_s=15.0)
    try:
        if devices is None:
            # every retained status at once first: all a small fleet needs, and the only way to see agents
            # that do not register; what it got need not be read again by name
            messages, fenced = reader.round([topics.all_status])
            census.rounds += 1
            census.wildcard_full = len(messages) >= limits.broker_queue or not fenced
            for topic, payload in messages:
                _keep_status(census, topics, topic, payload)
            _read_registry(reader, topics, census)
            devices = sorted(set(census.registered) - set(census.statuses))
        for batch in _batches(devices, limits.round_messages):
            messages, _ = reader.round([topics.status(d) for d in batch])
            census.rounds += 1
            for topic, payload in messages:
                _keep_status(census, topics, topic, payload)
    finally:
        reader.mqtt.close()
    return census


def _batches(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _read_registry(reader: _Reader, topics: Topics, census: Census) -> None:
    """The registry's shards in rounds of about ``round_messages``; a round that may have lost messages
    is read again one shard at a time."""
    limits = reader.limits
    pending = [f"{i:02x}" for i in range(REGISTRY_SHARDS)]
    singles: list[str] = []
    done = held = 0
    while pending or singles:
        if singles:
            group = [singles.pop()]
        else:
            size = 1 if not done else max(1, min(len(pending), limits.round_messages * done // max(held, 1)))
            group, pending = pending[:size], pending[size:]
        messages, fenced = reader.round([topics.registry_filter(s) for s in group])
        census.rounds += 1
        per_shard = Counter(_keep_registration(census, topics, t, p) for t, p in messages)
        if len(messages) >= limits.broker_queue or not fenced:
            if len(group) > 1:
                singles.extend(group)
                continue
            census.saturated.append(group[0])
            log.warning("registry shard %s filled the broker's per-client bound (%d messages)", group[0],
                        len(messages))
        done += len(group)
        held += sum(per_shard[s] for s in group)


def _keep_registration(census: Census, topics: Topics, topic: str, payload: bytes) -> str | None:
    """Record one registration; its shard (None for another topic or a refused one)."""
    where = topics.parse_registry(topic)
    if where is None or not payload:
        return where[0] if where else None
    try:
        doc = read_registration(payload)
    except OtaError:
        census.refused += 1
        return where[0]
    if doc["device"] != where[1]:
        census.refused += 1
    else:
        census.registered[where[1]] = doc
    return where[0]


def _keep_status(census: Census, topics: Topics, topic: str, payload: bytes) -> None:
    """Record one status read by its exact topic (a late message of another round is left alone)."""
    device = topics.status_device(topic)
    if device is None or not payload:
        return
    try:
        census.statuses[device] = read_status(payload, device)
    except OtaError:
        census.refused += 1
