"""Fleet publisher (host side): announce a signed bundle to a fleet group, ship it in retained chunks,
widen the rollout in stages and halt (optionally rolling back) when too many devices fail, or when a quality
gate (``gates``: latency, output drift, golden vectors, per device class, from the devices' telemetry) fails
before a stage is widened.

A publisher follows one release line: the fleet's (single-model devices) or one model line of
multi-model devices (``model``: its own release and rollout topics, state file and announcement counter),
so rollouts on several model lines of one fleet run side by side without touching each other.

The wire format is ``ota.protocol``'s; this module adds the private keys, the rollout policy and the
bookkeeping (``ledger``: a state file written atomically, or a fleet store) so a restarted publisher
carries on where it stopped, with its announcement counter intact.
"""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ota.bundle import read_header
from ota.config import BrokerSettings, OtaConfig, TransferLimits, check_name
from ota.errors import FormatError, TransportError, VerificationError
from ota.metadata import Manifest
from ota.protocol import (
    Announcement,
    Command,
    TelemetryRecord,
    Topics,
    check_url,
    format_time,
    read_status,
    sha256_hex,
    split_chunks,
)
from ota.transport import MqttClient

from ..errors import CuvilError
from ..signing import sign_envelope
from .discovery import Census, DiscoveryLimits, discover, read_statuses, tool_client_id
from .gates import ROLLOUT_TYPE, Evidence, GateConfig, judge
from .ledger import FileLedger, LedgerError, StoreLedger, copy_record, targets
from .lines import line_status as line_status  # where the dashboard and tools have imported it from
from .store import FleetStoreError, StoreUnavailable

if TYPE_CHECKING:
    from .store import FleetStore

log = logging.getLogger(__name__)
DEFAULT_CHUNK_BYTES = 32 << 10
LATER_STAGES = (25.0, 50.0, 100.0)  # after the canary, unless --stages says otherwise
_FINAL = ("failed", "timeout", "rolled_back", "not_targeted")  # outcomes a later status does not change
BACKOFF_MAX_S = 60.0  # the longest wait before a failed rollout step is tried again
#: ``watch`` waits at least this many times a step's CPU time before the next: a step's fixed part (the
#: rollout record's outcomes copied, compared and counted) grows with the stage, so the polls thin out
#: instead, and bookkeeping stays under ~5% of a core whatever the fleet's size
STEP_SPACING = 20.0
RECHECK_S = 15.0


class FleetError(CuvilError):
    """The publisher cannot do what was asked (bad percentage, no devices, broker unreachable)."""


def parse_percent(text: str | float) -> float:
    value = float(str(text).rstrip("%"))
    if not 0 <= value <= 100:
        raise FleetError(f"a percentage must be within 0-100, got {text!r}")
    return value


def stages_for(canary: float, later: Iterable[float] = LATER_STAGES) -> list[float]:
    return [canary] + sorted({p for p in later if p > canary} | ({100.0} if canary < 100 else set()))


@dataclass
class Rollout:
    """One release's way through a fleet; persisted in the publisher's state file."""

    bundle_sha256: str
    name: str
    release: int
    version: str
    chunk_bytes: int
    chunks: list[str]
    bundle_length: int
    stages: list[float]
    halt_on: float  # percent of a stage's devices failing that halts the rollout
    rollback_on_halt: bool
    stage: int = 0
    select_below: int = 0
    status: str = "rolling"  # rolling, halted, complete
    #: device: active, failed, timeout, not_targeted (refused before download: another hardware id or
    #: profile; not a failure); after a halt also rollback_pending, rolled_back, withdrawn
    outcomes: dict[str, str] = field(default_factory=dict)
    stage_started: float = 0.0
    reason: str = ""
    #: the signed manifest's targets, repeated in every announcement (absent in older state files)
    hardware_ids: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    #: where devices fetch the same bytes over HTTP(S) first (signed into every announcement); "": MQTT only
    http_url: str = ""
    #: the model line it is for (multi-model devices); "": the fleet's release topic
    model: str = ""
    #: its quality gates (``GateConfig.to_dict``; {}: none) and their latest verdicts (``Verdict.to_dict``)
    gates: dict[str, Any] = field(default_factory=dict)
    gate_results: list[dict[str, str]] = field(default_factory=list)

    @property
    def pending_rollbacks(self) -> list[str]:
        """Devices ordered to roll back whose confirmation has not arrived yet."""
        return sorted(d for d, o in self.outcomes.items() if o == "rollback_pending")

    def summary(self, fleet: str, stage_devices: int) -> dict[str, Any]:
        """The rollout as operators watch it (the ``rollout`` topic): counts per outcome rather than one
        entry per device, so the message stays small in a fleet of thousands; failures are named."""
        counts: dict[str, int] = {}
        for outcome in self.outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        return {"type": ROLLOUT_TYPE, "format": 1, "fleet": fleet, "bundle_sha256": self.bundle_sha256,
                "model": self.model, "name": self.name, "release": self.release, "version": self.version,
                "stages": self.stages, "stage": self.stage, "status": self.status, "reason": self.reason,
                "halt_on": self.halt_on, "gates": self.gates, "gate_results": self.gate_results,
                "stage_devices": stage_devices, "outcomes": counts,
                "failed": sorted(d for d, o in self.outcomes.items() if o in ("failed", "timeout"))}


def rollout_topic(topics: Topics, model: str = "") -> str:
    """Where the publisher tells the rollout's state (unsigned, like status: only it may write there); a
    model line's rollout has its own topic below it, so two lines' rollouts never overwrite each other."""
    return f"{topics.base}/rollout" + (f"/{check_name(model, 'model name')}" if model else "")


def format_rollout(r: Rollout) -> str:
    """One line for people: release, stage, status, devices per outcome and why it halted."""
    counts: dict[str, int] = {}
    for outcome in r.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    done = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no outcomes yet"
    reason = f" - {r.reason}" if r.reason else ""
    return (f"  release {r.release} ({r.version}) stage {r.stage + 1}/{len(r.stages)} "
            f"({r.stages[r.stage]:g}%): {r.status}; {done}{reason}")


class Publisher:
    """Publishes rollouts to one fleet group (``model``: to one model line of it) and watches its devices'
    retained status topics.

    Its bookkeeping goes to the JSON file at ``state_path``, or, given a ``store``, to that fleet store
    (``ledger.StoreLedger``: statuses in batches, the line's devices queried, announcement numbers that two
    publishers sharing the store never both use); the store stays the caller's to close. With a store and
    ``lease_s``, ``lead`` makes it the line's one leader (others wait as standbys) before it may announce.
    With ``gates`` (or a stored rollout that has gates) it also reads the fleet's telemetry, the evidence
    its rollouts' gates judge before each stage is widened. With ``share`` (a group name), statuses arrive
    through an MQTT shared subscription (``$share/<group>/...``): the publishers of one group split the
    stream, each writing its part to the shared store; the broker sends no retained statuses there, so
    ``discover`` reads the fleet first."""

    def __init__(self, broker: BrokerSettings, fleet: str, keys: Sequence[Ed25519PrivateKey],
                 state_path: str | os.PathLike[str] | None, limits: TransferLimits | None = None,
                 announce_ttl: timedelta = timedelta(days=7),
                 command_ttl: timedelta = timedelta(minutes=30), model: str = "",
                 store: FleetStore | None = None, lease_s: float | None = None,
                 gates: GateConfig | None = None, share: str = "") -> None:
        try:
            if share:
                check_name(share, "shared subscription group")
            self.topics = Topics(broker.topic_prefix, fleet)
            self.release_topic = self.topics.model_release(model) if model else self.topics.release
        except ValueError as exc:
            raise FleetError(str(exc)) from None
        self.model, self.share = model, share
        self.keys = list(keys)
        self.announce_ttl, self.command_ttl = announce_ttl, command_ttl
        if store is not None:
            self.ledger: FileLedger | StoreLedger = StoreLedger(store, fleet, model, lease_s=lease_s)
        elif state_path is None:
            raise FleetError("a publisher needs a state file or a fleet store")
        else:
            try:
                self.ledger = FileLedger(state_path, fleet, model)
            except LedgerError as exc:
                raise FleetError(str(exc)) from None
        self._told: dict[str, Any] | None = None  # the rollout summary last published
        self.retries = 0  # rollout steps that failed on a slow broker or store and were tried again
        #: a stage waiting this long since it began (or since the last re-read) re-reads its devices' statuses
        self.recheck_s, self._rechecked = RECHECK_S, 0.0
        self.gates = gates or GateConfig()
        stored = self.ledger.rollout()
        #: what the gates judge; None: no gates here, the fleet's telemetry is not read
        self.evidence = Evidence(model) if self.gates.enabled or (stored and stored.get("gates")) else None
        if self.evidence and isinstance(self.ledger, StoreLedger):  # what earlier controllers were told
            self.evidence.restore(self.ledger.store.gate_windows(model))
        self.mqtt = MqttClient(broker, tool_client_id("publisher", fleet, model), self._on_message, limits,
                               persistent=False)

    # -- connection and device status ---------------------------------------------------------
    def start(self, timeout_s: float = 15.0) -> Publisher:
        status = f"$share/{self.share}/{self.topics.all_status}" if self.share else self.topics.all_status
        self.mqtt.subscribe([status] + ([self.topics.all_telemetry] if self.evidence else []))
        self.mqtt.start(wait_s=timeout_s)
        return self

    def discover(self, limits: DiscoveryLimits | None = None) -> Census:
        """Read every registered device's status into the bookkeeping, under the broker's per-client queue
        bound (``discovery``: what a retained-status subscription cannot promise past ~1,000 devices)."""
        census = discover(self.mqtt.settings, self.topics.fleet, limits, self.mqtt.limits)
        for status in census.statuses.values():
            self._keep_status(status)
        self.ledger.flush()
        return census

    def close(self) -> None:
        self.mqtt.close()
        try:
            self._keep_evidence()
        except FleetStoreError as exc:
            log.warning("gate evidence not kept in the store: %s", exc)
        self.ledger.close()

    def _keep_evidence(self) -> None:
        """Write the gate evidence that changed to the store, where a restarted or standby controller
        finds it (``Evidence.restore``); kept for the next step when the write fails."""
        if self.evidence is None or not isinstance(self.ledger, StoreLedger):
            return
        changed = self.evidence.take_changed()
        try:
            self.ledger.store.save_gate_windows(self.model, changed)
        except BaseException:
            self.evidence.requeue(changed)
            raise

    def lead(self, timeout_s: float) -> bool:
        """Wait as a standby until this publisher leads its line (the store's lease), at most ``timeout_s``;
        then the rollout is the one the last leader stored, and ``publish`` of its bundle carries it on."""
        if not isinstance(self.ledger, StoreLedger) or self.ledger.lease_s is None:
            raise FleetError("only a publisher on a fleet store with a lease time leads its line")
        return self.ledger.lead(timeout_s)

    @property
    def state(self) -> dict[str, Any]:
        """The state file's document (fleet, model, seq, devices, rollout); a store has no such document."""
        if not isinstance(self.ledger, FileLedger):
            raise FleetError("this publisher keeps its state in a fleet store, not in a state file")
        return self.ledger.state

    def _on_message(self, topic: str, payload: bytes, retained: bool) -> None:
        """A device's status, or (with gates) a telemetry record for the gates' evidence."""
        if self.evidence is None or not topic.startswith(f"{self.topics.base}/telemetry/"):
            return self._on_status(topic, payload, retained)
        try:
            record = TelemetryRecord.from_bytes(payload)
        except VerificationError as exc:
            log.warning("telemetry on %s refused: %s", topic, exc)
            return
        if topic == self.topics.telemetry(record.device):
            self.evidence.add(record)

    def _on_status(self, topic: str, payload: bytes, _retained: bool) -> None:
        """Keep a device's status when it is well formed (``read_status``: rollouts compare its fields)
        and names the device whose topic it came on; an empty payload clears nothing here."""
        if not payload:
            return
        try:
            status = read_status(payload, topic.rsplit("/", 1)[-1])
        except VerificationError as exc:
            log.warning("status on %s refused: %s", topic, exc)
            return
        self._keep_status(status)

    def _keep_status(self, status: dict[str, Any]) -> None:
        """A device's status, however it was read (live, discovered, re-read), into the bookkeeping and
        the gates' device classes."""
        self.ledger.add(status)
        if self.evidence:
            self.evidence.saw_status(status)

    @property
    def devices(self) -> dict[str, dict[str, Any]]:
        """Every known device's last status, whichever lines it follows."""
        return self.ledger.devices()

    @property
    def line_devices(self) -> dict[str, dict[str, Any]]:
        """The devices that follow this publisher's line, each with its status for that line
        (``line_status``): what rollouts stage, count and watch."""
        return self.ledger.line_devices()

    def wait_for_devices(self, count: int, timeout_s: float) -> int:
        """Collect retained statuses until ``count`` devices of this line are known or the time is up."""
        end = time.monotonic() + timeout_s
        while self.ledger.count() < count and time.monotonic() < end:
            time.sleep(0.05)
        return self.ledger.count()

    @property
    def rollout(self) -> Rollout | None:
        r = self.ledger.rollout()
        return Rollout(**r) if r else None

    def _store(self, rollout: Rollout, stage_size: int | None = None) -> None:
        """Save the rollout (a copy of its fields: ``dataclasses.asdict`` costs 20x more per outcome) and
        tell it; ``stage_size``: the current stage's, when the caller has counted it."""
        self.ledger.save_rollout(copy_record(vars(rollout)))
        self._tell(rollout, stage_size)

    def _tell(self, rollout: Rollout, stage_size: int | None = None) -> None:
        """Publish the rollout's summary (retained, on ``<prefix>/<fleet>/rollout``) when it changed, so
        dashboards anywhere see stages, progress and the halt reason without the publisher's state file."""
        if not self.mqtt.connected:
            return  # offline: the next step tells it (watching the rollout does not wait on the view)
        summary = rollout.summary(self.topics.fleet, self.ledger.stage_size(rollout) if stage_size is None
                                  else stage_size)
        if summary == self._told:
            return
        stamped = {**summary, "time": format_time(datetime.now(timezone.utc))}
        try:
            self.mqtt.publish(rollout_topic(self.topics, self.model),
                              json.dumps(stamped, sort_keys=True).encode(), retain=True)
        except TransportError as exc:
            log.warning("rollout state not published (told again at the next step): %s", exc)
            return
        self._told = summary

    # -- publishing ---------------------------------------------------------------------------
    def publish(self, bundle: str | os.PathLike[str], canary: float, halt_on: float,
                stages: Sequence[float] | None = None, rollback_on_halt: bool = False,
                chunk_bytes: int = DEFAULT_CHUNK_BYTES, http_url: str = "") -> Rollout:
        """Chunks first (retained), then the stage-0 announcement; resumes an unfinished rollout of the
        same bundle instead of starting over. ``http_url`` (a static server, object store or CDN serving
        this very file) is signed into the announcements; the retained chunks stay the fallback. On a model
        line the bundle's signed name must be that model (devices would refuse it: ``WrongModel``)."""
        if http_url:
            try:
                check_url(http_url, "--http-url")
            except FormatError as exc:
                raise FleetError(str(exc)) from None
        data = Path(bundle).read_bytes()
        sha = sha256_hex(data)
        manifest = Manifest.from_dict(read_header(io.BytesIO(data), OtaConfig())["signed"])
        if self.model and manifest.name != self.model:  # refused before anything of the rollout changes
            raise FleetError(f"{bundle} is model {manifest.name!r}, not model line {self.model!r}'s")
        self.ledger.renew()  # a leader busy past its lease (discovering a large fleet) leads again, or stops
        current = self.rollout
        if current and current.bundle_sha256 == sha and current.status == "rolling":
            return current
        if current and current.bundle_sha256 != sha:
            self._clear_chunks(current)
        pieces = split_chunks(data, chunk_bytes)
        for i, piece in enumerate(pieces):
            self.mqtt.publish(self.topics.chunk(sha, i), piece, retain=True,
                              user={"index": str(i), "sha256": sha256_hex(piece)})
        rollout = Rollout(sha, manifest.name, manifest.release, manifest.version, chunk_bytes,
                          [sha256_hex(p) for p in pieces], len(data), list(stages or stages_for(canary)),
                          halt_on, rollback_on_halt, hardware_ids=list(manifest.hardware_ids),
                          profiles=list(manifest.profiles), http_url=http_url, model=self.model,
                          gates=self.gates.to_dict())
        self.ledger.new_rollout()
        self._announce(rollout)
        return rollout

    def publish_chunks(self, rollout: Rollout, data: bytes, indices: Iterable[int]) -> None:
        """Re-publish some chunks (a broker that lost its retained store; tests that ship in parts)."""
        pieces = split_chunks(data, rollout.chunk_bytes)
        for i in indices:
            self.mqtt.publish(self.topics.chunk(rollout.bundle_sha256, i), pieces[i], retain=True)

    def _clear_chunks(self, rollout: Rollout) -> None:
        for i in range(len(rollout.chunks)):
            self.mqtt.publish(self.topics.chunk(rollout.bundle_sha256, i), b"", retain=True)

    def targeted(self, rollout: Rollout) -> list[str]:
        """Known devices of this line the release is for (``ledger.targets``: the device's own rule)."""
        return sorted(d for d, status in self.line_devices.items() if targets(rollout, status))

    def stage_devices(self, rollout: Rollout) -> list[str]:
        """The devices of the rollout's current stage: targeted, with a bucket under ``select_below``
        (devices the release is not for neither fill a canary nor count against its threshold)."""
        return sorted(self.ledger.stage_members(rollout))

    def _announce(self, rollout: Rollout, halted: bool = False) -> None:
        """Sign and publish (retained) the next announcement. The record is stored first, then the number
        is taken and saved with the signed announcement (a store records both in one transaction) before
        it goes out. The lease is renewed first: shipping a large bundle's chunks may outlast it."""
        self.ledger.renew()
        if not halted:
            rollout.select_below = self.ledger.bound(rollout, rollout.stages[rollout.stage])
            rollout.stage_started = time.time()
        now = datetime.now(timezone.utc)
        self._store(rollout)

        def sign(seq: int) -> bytes:
            ann = Announcement(self.topics.fleet, seq, format_time(now), format_time(now + self.announce_ttl),
                               rollout.bundle_sha256, rollout.bundle_length, rollout.release, rollout.name,
                               rollout.version, rollout.chunk_bytes, tuple(rollout.chunks),
                               rollout.select_below, halted, tuple(rollout.hardware_ids),
                               tuple(rollout.profiles), rollout.http_url)
            return self.signed(ann.to_dict())

        self.mqtt.publish(self.release_topic, self.ledger.announce(sign), retain=True)

    def signed(self, body: Mapping[str, Any]) -> bytes:
        return json.dumps(sign_envelope(body, self.keys), sort_keys=True).encode()

    def command(self, device: str, action: str, bundle_sha256: str = "") -> bytes:
        """Sign a one-time command (fresh nonce, short expiry) for this publisher's line and send it;
        returns the signed bytes."""
        now = datetime.now(timezone.utc)
        cmd = Command(self.topics.fleet, device, action, secrets.token_hex(16), format_time(now),
                      format_time(now + self.command_ttl), bundle_sha256, self.model)
        payload = self.signed(cmd.to_dict())
        self.mqtt.publish(self.topics.command(device), payload,
                          expiry_s=int(self.command_ttl.total_seconds()))
        return payload

    # -- watching -----------------------------------------------------------------------------
    def _outcome(self, rollout: Rollout, status: Mapping[str, Any] | None) -> str | None:
        if not status:
            return None
        release = status.get("release") or 0
        state = status.get("state")
        if state in ("active", "offline") and release >= rollout.release:
            return "active"
        if status.get("bundle") == rollout.bundle_sha256:
            if status.get("error") == "WrongTarget":  # refused before the download (older agents: after)
                return "not_targeted"
            if state == "failed":
                return "failed"
        ordered = rollout.outcomes.get(status["device"]) in ("active", "rollback_pending")
        if state == "rolled_back" and ordered:
            return "rolled_back"
        if rollout.status == "halted" and state in ("active", "idle", "offline") \
                and release < rollout.release:
            return "withdrawn"  # after the halt: kept (or went back to) the old release without installing
        return None

    def step(self, stage_timeout_s: float) -> Rollout:
        """Record outcomes of the current stage; halt past the threshold, widen when the stage is done.
        Only the stage's devices whose status changed since the last step (or that are new to the stage)
        are read and judged (``ledger.stage``); the counts below rest on outcomes being given to stage
        devices only, and stages only widening."""
        self.ledger.renew()
        self._keep_evidence()
        rollout = self.rollout
        if rollout is None or rollout.status != "rolling":
            raise FleetError("no rollout in progress")
        if time.time() - max(rollout.stage_started, self._rechecked) > self.recheck_s:
            self._recheck(rollout)
        stage = self.ledger.stage(rollout)
        for d, status in stage.due.items():
            outcome = self._outcome(rollout, status)
            if outcome:
                rollout.outcomes[d] = outcome
        pending = stage.size - len(rollout.outcomes)
        if pending > 0 and time.time() - rollout.stage_started > stage_timeout_s:
            for d in self.ledger.stage_members(rollout):  # once per stage at most: it ends the stage
                rollout.outcomes.setdefault(d, "timeout")
            pending = 0
        bad = sum(outcome in ("failed", "timeout") for outcome in rollout.outcomes.values())
        size: int | None = stage.size
        if stage.size and bad / stage.size * 100 > rollout.halt_on:
            # stages counted from 1, as format_rollout does
            self.halt(rollout, f"{bad} of {stage.size} devices failed in stage {rollout.stage + 1} of "
                               f"{len(rollout.stages)} ({rollout.stages[rollout.stage]:g}%), over the "
                               f"{rollout.halt_on:g}% threshold")
        elif pending <= 0 and (stage.size or rollout.stages[rollout.stage] >= 100) \
                and not self._gates_hold(rollout, stage_timeout_s):
            if rollout.stage + 1 < len(rollout.stages):
                rollout.stage += 1
                self._announce(rollout)
                size = None  # the next stage's: counted again
            else:
                rollout.status = "complete"
        self._store(rollout, size)
        return rollout

    def _recheck(self, rollout: Rollout) -> None:
        """Read again the retained statuses of the stage's devices without an outcome (``read_statuses``):
        a live status the broker dropped at this publisher's queue, or gave to a share-group member that
        died, would otherwise leave the stage waiting for its timeout."""
        self._rechecked = time.time()
        waiting = [d for d in self.ledger.stage_members(rollout) if d not in rollout.outcomes]
        if waiting:
            for status in read_statuses(self.mqtt.settings, self.topics.fleet, waiting,
                                        transfer=self.mqtt.limits).values():
                self._keep_status(status)

    def _gates_hold(self, rollout: Rollout, stage_timeout_s: float) -> bool:
        """Judge the rollout's gates on its stage's devices now on the release (``gates.judge``; verdicts
        kept in the record): True when the stage may not be widened yet, because a gate failed (the
        rollout is halted with its verdict) or still waits for evidence (past the stage timeout: halted)."""
        config = GateConfig.from_dict(rollout.gates)
        if not config.enabled:
            return False
        active = [d for d, o in rollout.outcomes.items() if o == "active"]
        verdicts = judge(config, self.evidence or Evidence(self.model), rollout.release, active)
        rollout.gate_results = [v.to_dict() for v in verdicts]
        where = f"stage {rollout.stage + 1} of {len(rollout.stages)} ({rollout.stages[rollout.stage]:g}%)"
        if failed := next((v for v in verdicts if v.status == "fail"), None):
            self.halt(rollout, f"{failed.gate} gate failed in {where}: {failed.detail}")
        elif waiting := next((v for v in verdicts if v.status == "wait"), None):
            if time.time() - rollout.stage_started <= stage_timeout_s:
                return True
            self.halt(rollout, f"{waiting.gate} gate had too little evidence in {where} within "
                               f"{stage_timeout_s:g}s: {waiting.detail}")
        else:
            return False
        return True

    def halt(self, rollout: Rollout, reason: str) -> None:
        """Withdraw the release (downloads in progress stop); optionally roll back devices that took it."""
        rollout.status, rollout.reason = "halted", reason
        self._announce(rollout, halted=True)
        self._settle(rollout)

    def _settle(self, rollout: Rollout) -> list[str]:
        """One pass over a halted stage: record where each device ended up and order a rollback from every
        device found on the withdrawn release (also one that finished installing after the halt). Returns
        the devices whose outcome is not final yet (still installing, or a rollback not yet confirmed)."""
        members = self.ledger.stage_members(rollout)
        unsettled = []
        for d in sorted(members):
            outcome = rollout.outcomes.get(d)
            if outcome not in _FINAL:
                outcome = self._outcome(rollout, members[d]) or outcome
            if outcome == "rollback_pending" or (outcome == "active" and rollout.rollback_on_halt):
                if rollout.outcomes.get(d) != "rollback_pending":
                    self.command(d, "rollback")
                outcome = "rollback_pending"
            if outcome:
                rollout.outcomes[d] = outcome
            if outcome in (None, "rollback_pending"):
                unsettled.append(d)
        self._store(rollout, len(members))
        return unsettled

    def wait_settled(self, timeout_s: float, poll_s: float = 0.05) -> Rollout:
        """After a halt, wait (at most ``timeout_s``) until every device of the halted stage has a final
        outcome: failed, timeout, rolled_back, withdrawn (or active, without ``rollback_on_halt``).
        Devices still waiting stay ``rollback_pending`` (or without an outcome) in the stored record, so a
        later call, or a restarted publisher, can wait for them again."""
        rollout = self.rollout
        if rollout is None or rollout.status != "halted":
            raise FleetError("no halted rollout to settle")
        end = time.monotonic() + timeout_s
        while self._settle(rollout) and time.monotonic() < end:
            time.sleep(poll_s)
        return rollout

    def watch(self, timeout_s: float = 3600.0, stage_timeout_s: float = 600.0, poll_s: float = 0.2,
              progress: Callable[[Rollout], None] | None = None, settle_s: float = 30.0) -> Rollout:
        """Step until the rollout is complete or halted; after a halt, wait up to ``settle_s`` for the
        stage's devices to settle (see ``wait_settled``; unconfirmed rollbacks stay ``rollback_pending``)."""
        end = time.monotonic() + timeout_s
        seen: tuple[Any, ...] = ()
        backoff, failed = poll_s, False
        while time.monotonic() < end:
            try:
                if failed and isinstance(self.ledger, StoreLedger):
                    self.ledger.reload()  # what the failed step read but did not save is read again
                began = time.thread_time()
                rollout = self.step(stage_timeout_s)
                cost = time.thread_time() - began
            except (StoreUnavailable, TransportError) as exc:
                # a slow broker or database: the step is tried again from the stored rollout until the
                # deadline, waiting twice as long each time (up to BACKOFF_MAX_S), not ending the rollout
                backoff, failed = min(backoff * 2, BACKOFF_MAX_S, max(end - time.monotonic(), 0.0)), True
                self.retries += 1
                log.warning("rollout step failed, tried again in %.1fs: %s", backoff, exc)
                time.sleep(backoff)
                continue
            backoff, failed = poll_s, False
            now = (rollout.stage, rollout.status, len(rollout.outcomes))
            if progress and now != seen:
                progress(rollout)
            seen = now
            if rollout.status != "rolling":
                break
            time.sleep(max(poll_s, STEP_SPACING * cost))
        else:
            raise FleetError(f"rollout still running after {timeout_s}s (state kept in {self.ledger})")
        if rollout.status == "halted":
            rollout = self.wait_settled(min(settle_s, max(end - time.monotonic(), 0.0)))
        return rollout
