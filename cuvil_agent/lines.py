"""One model's signed release line on the device (``ModelLine``): its announcements, its transfer (over
MQTT or the signed URL), its installer, the host serving it and the state it reports through the agent."""

from __future__ import annotations

import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ota.bundle import read_header
from ota.chunks import PART_FILE, ChunkTransfer, file_sha256
from ota.errors import (
    HashMismatch,
    InstallError,
    NoActiveModel,
    OtaError,
    RollbackError,
    TransferFailed,
    VerificationError,
    WrongModel,
    WrongTarget,
)
from ota.http_download import HttpDownload
from ota.installer import Installer
from ota.protocol import Announcement, Command, sha256_hex, verify_announcement

from .serve import ModelHost
from .state import TRANSFER_DIR, AgentState

if TYPE_CHECKING:
    from .agent import Agent


#: installer steps that start a reported state
_STEP_STATES = {"verified": "installing", "reverified": "self-test"}
#: what a line's summary repeats from its last status (``ModelLine.summary``)
_SUMMARY_FIELDS = ("bundle", "target_release", "error")


class ModelLine:
    """One model's signed release line on the device: its announcements, transfer, installer (slots,
    release counter), the host serving it and the state it reports. A single-model agent has one line
    (``name`` empty) in ``state_dir`` on the fleet's release topic, exactly as before lines existed; each
    ``[[models]]`` entry is a line named after its model, in ``<state_dir>/models/<name>``, on the topic
    ``<fleet>/release/<name>``, installing only bundles signed for that name."""

    def __init__(self, agent: Agent, name: str, installer: Installer, host: ModelHost, topic: str,
                 store: AgentState) -> None:
        self.agent, self.name, self.installer, self.host, self.topic = agent, name, installer, host, topic
        self.store = store
        self._drop_installed_transfer()
        self._health: dict[str, Any] = {}  # why the model on disk is not served (sent with every status)
        self._served = self._disk_key()
        self.state = "active" if host.release is not None else "idle"
        if host.load_error is not None and not isinstance(host.load_error, NoActiveModel):
            self.state = self._fall_back(host.load_error, "at start")
        self.ann: Announcement | None = None
        self.transfer: ChunkTransfer | None = None
        self._http: HttpDownload | None = None  # the transfer's HTTP source, while it is the one used
        self._chunk_subs: set[str] = set()
        self._last_progress = 0.0
        self._update_state: str | None = None  # the last state sent as an ``update_state`` event
        self._reported: dict[str, Any] = {}  # the release fields of this line's last status (see summary)
        self._last: dict[str, Any] = {}  # every field of this line's last status but its event (see resend)

    @property
    def _state_dir(self) -> Path:
        return self.installer.state_dir

    def log(self, event: str, /, **fields: Any) -> None:
        self.agent.log(event, **({"model": self.name} if self.name else {}), **fields)

    def emit(self, event: str, /, **data: Any) -> None:
        self.agent.telemetry.emit(event, **({"model": self.name} if self.name else {}), **data)

    @property
    def busy(self) -> bool:
        """Downloading over HTTP with data ready: the agent's loop should not sleep."""
        return self._http is not None and not self._http.waiting

    def tick(self, check_disk: bool) -> None:
        if check_disk:
            self._follow_disk()
        if self.transfer and self._http:
            self._http_step(self.transfer, self._http)
        elif self.transfer and self.agent.mqtt.connected:
            try:
                if self.transfer.due():
                    self.log("transfer_retry", chunks=self.transfer.wanted(), retry=self.transfer.retries)
                    self.agent.mqtt.subscribe(self._chunk_topics(self.transfer.wanted()))
            except TransferFailed as exc:
                self._fail(self.transfer.ann, exc)

    def on_connected(self) -> None:
        if self.transfer:
            self.transfer.resume()
            self.log("transfer_resume", bundle=self.transfer.ann.bundle_sha256, from_chunk=self.transfer.have,
                     total=self.transfer.total)
        self.resend()

    # -- announcements ------------------------------------------------------------------------
    def on_announcement(self, payload: bytes) -> None:
        store = self.store.data
        try:
            ann = verify_announcement(payload, self.installer.trust, self.agent.cfg.fleet,
                                      datetime.now(timezone.utc), self.agent.cfg.limits)
            if self.name and ann.name != self.name:  # signed: a line never takes another model's release
                raise WrongModel(f"announcement {ann.seq} offers model {ann.name!r} on model {self.name!r}'s "
                                 "release topic")
            digest = sha256_hex(payload)
            last = store["announce_seq"]
            if ann.seq < last or (ann.seq == last and digest != store["announce_digest"]):
                raise RollbackError(f"announcement seq {ann.seq} is not newer than seq {last} (replayed)")
        except VerificationError as exc:
            self.refuse(exc, "announcement")
            return
        if ann.seq > last:
            self.store.save(announce_seq=ann.seq, announce_digest=digest)
            self.log("announcement", seq=ann.seq, release=ann.release, bundle=ann.bundle_sha256,
                     selected=ann.selects(self.agent.device), halted=ann.halted)
        self.ann = ann
        self._consider(ann, forced=False)

    def _consider(self, ann: Announcement, forced: bool) -> None:
        """Start, continue or abandon a download as the current announcement says."""
        if self.transfer and self.transfer.ann.bundle_sha256 != ann.bundle_sha256:
            self._abandon("superseded by another release")
        wanted = forced or ann.selects(self.agent.device)
        if not wanted or ann.halted:
            if self.transfer:
                self._abandon("rollout halted" if ann.halted else "device no longer selected")
            return
        if ann.release <= self.installer.trust.release_counter or self.transfer:
            return
        failed = self.store.data["failed"]
        if ann.bundle_sha256 in failed and not forced:
            return  # failed here before: only an explicit install command retries it
        try:
            ann.check_target(self.installer.hardware_id, self.installer.profile)
        except WrongTarget as exc:  # recorded like a failed release: a retained announcement is not retried
            self.store.save(failed={**failed, ann.bundle_sha256: f"{type(exc).__name__}: {exc}"})
            self.refuse(exc, "announcement", bundle=ann.bundle_sha256, target_release=ann.release)
            return
        self.transfer = ChunkTransfer(self._state_dir / TRANSFER_DIR, ann, self.agent.cfg.limits)
        if ann.url:  # the signed URL first; MQTT chunks when it fails
            self._http = HttpDownload(self.transfer, ann.url, self.agent.cfg.download, log=self.log)
        self.log("transfer_start", bundle=ann.bundle_sha256, release=ann.release, total=self.transfer.total,
                 from_chunk=self.transfer.have, source="http" if self._http else "mqtt")
        self.report("downloading", bundle=ann.bundle_sha256, target_release=ann.release,
                    have=self.transfer.have, total=self.transfer.total)
        self._request_window()

    def _abandon(self, why: str) -> None:
        assert self.transfer is not None
        bundle = self.transfer.ann.bundle_sha256
        self.log("transfer_abandoned", bundle=bundle, reason=why)
        self._close_http()
        self.transfer.discard()
        self.transfer = None
        self._request_window()
        self.report("active" if self.host.release is not None else "idle", event="withdrawn", detail=why,
                    bundle=bundle)

    def _close_http(self) -> None:
        if self._http:
            self._http.close()
            self._http = None

    # -- chunks -------------------------------------------------------------------------------
    def _chunk_topics(self, indices: list[int]) -> list[str]:
        assert self.transfer is not None
        return [self.agent.topics.chunk(self.transfer.ann.bundle_sha256, i) for i in indices]

    def _request_window(self) -> None:
        """Subscribe to the chunks of the current window only; drop subscriptions no longer needed."""
        want = set(self._chunk_topics(self.transfer.wanted())) if self.transfer and not self._http else set()
        self.agent.mqtt.unsubscribe(self._chunk_subs - want)
        self.agent.mqtt.subscribe(want - self._chunk_subs)
        self._chunk_subs = want

    def wants_chunk(self, bundle_sha: str) -> bool:
        return self.transfer is not None and self.transfer.ann.bundle_sha256 == bundle_sha

    def on_chunk(self, bundle_sha: str, index: int, data: bytes) -> None:
        t = self.transfer
        if t is None or bundle_sha != t.ann.bundle_sha256 or self._http:
            return  # left over from an earlier subscription of the persistent session
        try:
            if not t.accept(index, data):
                return
        except HashMismatch as exc:
            self.refuse(exc, "chunk", chunk=index)
            try:
                t.retry_later(str(exc))
            except TransferFailed as failed:
                self._fail(t.ann, failed)
            return
        self._request_window()
        self._progressed(t, source="mqtt")

    def _http_step(self, t: ChunkTransfer, h: HttpDownload) -> None:
        """Read a bounded piece over HTTP; when the server lies or retries run out, refuse it (a lie is
        reported like any refused input) and continue from the verified prefix over MQTT."""
        try:
            done = h.step()
        except (VerificationError, TransferFailed) as exc:
            if isinstance(exc, VerificationError):
                self.refuse(exc, "http download", bundle=t.ann.bundle_sha256, url=h.url)
            self.log("http_fallback", bundle=t.ann.bundle_sha256, error=type(exc).__name__, detail=str(exc),
                     from_chunk=t.have)
            self._close_http()
            t.resume()
            self._request_window()
            return
        except Exception as exc:  # the download area itself failed (disk full): as a failed MQTT transfer
            self._fail(t.ann, exc)
            return
        if done or not h.waiting:
            self._progressed(t, source="http", http_requests=h.requests, http_bytes=h.received)

    def _progressed(self, t: ChunkTransfer, **source: Any) -> None:
        """After verified chunks were stored: install when complete, else report progress (at most 1/s)."""
        now = time.monotonic()
        if t.done:
            self.log("transfer_done", bundle=t.ann.bundle_sha256, total=t.total, resumed_from=t.resumed_from,
                     fetched=t.fetched, **source)
            self.install(t)
        elif now - self._last_progress >= 1.0:
            self._last_progress = now
            self.report("downloading", bundle=t.ann.bundle_sha256, target_release=t.ann.release, have=t.have,
                        total=t.total)

    def install(self, t: ChunkTransfer) -> None:
        ann = t.ann
        self.report("verifying", bundle=ann.bundle_sha256, target_release=ann.release)
        self.emit("install_started", bundle=ann.bundle_sha256, target_release=ann.release)
        try:
            if file_sha256(t.path, self.agent.cfg.ota.chunk_bytes) != ann.bundle_sha256:
                raise HashMismatch("reassembled bundle does not match the announced sha256")
            manifest = self.installer.install(t.path, report=lambda msg: self.log("check", detail=msg))
        except Exception as exc:  # any failure is recorded: a retained announcement must not retry it forever
            self._fail(ann, exc)
            return
        self._close_http()
        self.transfer = None
        t.discard()
        self._served = self._disk_key()
        try:
            self.host.reload()
        except Exception as exc:  # committed, yet it cannot be served here: never a silent old model
            state = self._fall_back(exc, f"after installing release {manifest.release}")
            self._fail(ann, InstallError(f"release {manifest.release} was installed but cannot be served "
                                         f"({type(exc).__name__}: {exc}); now {state}"))
            return
        self._health = {}
        self.log("installed", release=manifest.release, version=manifest.version)
        self.emit("install_finished", bundle=ann.bundle_sha256, release=manifest.release,
                  version=manifest.version)
        self.report("active", bundle=ann.bundle_sha256, version=manifest.version)

    def step(self, name: str) -> None:
        """An installer step of this line: reported as the state it starts."""
        if name in _STEP_STATES and self.ann is not None:
            self.report(_STEP_STATES[name], bundle=self.ann.bundle_sha256, target_release=self.ann.release)

    def _fail(self, ann: Announcement, exc: Exception) -> None:
        """A release that failed here: reported with its reason and not retried unless commanded."""
        if self.transfer:
            self._close_http()
            self.transfer.discard()
            self.transfer = None
            self._request_window()
        reason = f"{type(exc).__name__}: {exc}"
        self.store.save(failed={**self.store.data["failed"], ann.bundle_sha256: reason})
        self.log("failed", bundle=ann.bundle_sha256, release=ann.release, reason=reason)
        self.emit("install_failed", bundle=ann.bundle_sha256, target_release=ann.release,
                  error=type(exc).__name__, reason=reason)
        self.report("failed", bundle=ann.bundle_sha256, target_release=ann.release, error=type(exc).__name__,
                    reason=reason)

    # -- commands -----------------------------------------------------------------------------
    def cmd_install(self, cmd: Command) -> None:
        if self.ann is None or self.ann.bundle_sha256 != cmd.bundle_sha256:
            self.report(self.state, event="command_failed", detail="that bundle is not announced here")
            return
        self.store.save(failed={k: v for k, v in self.store.data["failed"].items() if k != cmd.bundle_sha256})
        self._consider(self.ann, forced=True)

    def cmd_rollback(self, cmd: Command) -> None:
        try:
            manifest = self.installer.rollback()
        except (OtaError, OSError) as exc:
            self.report(self.state, event="command_failed", error=type(exc).__name__, detail=str(exc))
            return
        self._served = self._disk_key()
        try:
            self.host.reload()
        except Exception as exc:
            self.report(self._unhealthy(exc, "after the rollback command"))
            return
        self._health = {}
        self.log("rolled_back", release=manifest.release)
        self.emit("rolled_back", release=manifest.release, reason="rollback command")
        self.report("rolled_back", version=manifest.version)

    def cmd_report(self, cmd: Command) -> None:
        self.resend(event="report")

    # -- serving what the state directory says ------------------------------------------------
    def _disk_key(self) -> tuple[str, int, int] | None:
        """What the state directory serves now, from ``stat`` alone (checked every second)."""
        return self.installer.active_stamp()

    def _follow_disk(self) -> None:
        """An operator may install or roll back with ``cuvil-agent`` while the agent runs: serve what the
        state directory says (the trust state is re-read from disk at every use anyway)."""
        key = self._disk_key()
        if key == self._served:
            return
        self._served = key
        self.log("state_changed", active=key)
        try:
            self.host.reload()
        except Exception as exc:
            self.report(self._fall_back(exc, "after a change on disk"))
            return
        self._health = {}
        self.report("active" if self.host.release is not None else "idle", event="state_changed")

    def _fall_back(self, exc: BaseException, when: str) -> str:
        """The active model cannot be served (corrupt slot, does not load under the policy): go back to the
        other slot after re-verifying it under the current root; when that fails too, keep running, report
        ``unhealthy`` and wait for a rollback or install command. Returns the state to report."""
        self.log("load_failed", when=when, error=type(exc).__name__, detail=str(exc))
        try:
            manifest = self.installer.rollback()
            self._served = self._disk_key()
            self.host.reload()
        except Exception as again:
            return self._unhealthy(again, f"{when}: {type(exc).__name__}: {exc}")
        self._health = {"error": type(exc).__name__, "detail": f"{when}: {exc}; rolled back"}
        self.log("rolled_back", release=manifest.release, reason=str(exc))
        self.emit("rolled_back", release=manifest.release, reason=self._health["detail"],
                  error=type(exc).__name__)
        return "rolled_back"

    def _unhealthy(self, exc: BaseException, why: str) -> str:
        self._health = {"error": type(exc).__name__, "detail": f"no healthy model ({why}): {exc}"}
        self.log("unhealthy", **self._health)
        self.state = "unhealthy"
        return "unhealthy"

    def _drop_installed_transfer(self) -> None:
        """A crash between the install and removing its download leaves the whole bundle in ``transfer/``:
        drop it at start when its release is already installed (status would show it as in progress)."""
        part = self._state_dir / TRANSFER_DIR / PART_FILE
        try:
            with open(part, "rb") as f:
                release = read_header(f, self.agent.cfg.ota)["signed"]["release"]
        except (OSError, OtaError, KeyError, TypeError):
            return
        if isinstance(release, int) and release <= self.installer.trust.release_counter:
            shutil.rmtree(part.parent, ignore_errors=True)

    # -- reporting ----------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """This line in every status and telemetry summary of a multi-model device: its state and release,
        and the bundle (and error) its last status named, so a publisher following this line reads its
        outcome from whichever line's status arrives last."""
        return {"state": self.state, "release": self.host.release, **self._reported}

    def status_fields(self) -> dict[str, Any]:
        """What a status says about this line: its release (and model), and why it is unhealthy."""
        return {"release": self.host.release, **({"model": self.name} if self.name else {}), **self._health}

    def report(self, state: str, **fields: Any) -> None:
        """Retained status (the last word on this device); dropped when offline and re-sent on connect."""
        self.state = state
        self._reported = {k: fields[k] for k in _SUMMARY_FIELDS if k in fields}
        self._last = {k: v for k, v in fields.items() if k != "event"}
        if state != self._update_state:
            self._update_state = state
            self.emit("update_state", **{"release": self.host.release, **fields, "state": state})
        self.log("status", state=state, release=self.host.release, detail=fields)
        self.agent.publish_status(state, self, **fields)

    def resend(self, **event: Any) -> None:
        """The last status again (on connect: one sent offline was dropped; on a ``report`` command), with
        its bundle, error and reason: a re-sent status says what the one it repeats said, so a failed
        device still names why and a publisher still reads the outcome."""
        self.report(self.state, **self._last, **event)

    def refuse(self, exc: Exception, what: str, **fields: Any) -> None:
        """An input refused: logged and reported; the state (and the model served) do not change."""
        self.log("refused", what=what, error=type(exc).__name__, detail=str(exc), **fields)
        self.report(self.state, event="refused", what=what, error=type(exc).__name__, detail=str(exc),
                    **fields)
