"""``cuvil-edge publish`` and ``cuvil-edge fleet status|discover|command|telemetry|dashboard|gates|
migrate-state|demo``: staged rollouts over MQTT (``--gate-*``: quality gates judged before each stage is
widened; ``fleet gates`` replays a recording against them), and the move of a publisher's state file into a
fleet store. ``--store URL`` keeps ``publish``'s, ``fleet discover``'s and ``fleet command``'s bookkeeping in
a fleet store instead of the state file, and makes ``fleet status`` a query of that store (filters, counts,
pages; no broker); without it, ``fleet status`` reads the fleet from the broker (``fleet.discovery``).

``register(subparsers)`` adds the commands to the ``cuvil-edge`` parser; each sets ``fn``. The broker
password comes from an environment variable named by ``--password-env`` (never argv).
"""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ota.config import BrokerSettings
from ota.parse import parse_decimal
from ota.protocol import TelemetryRecord

from ..fleet.dashboard import Dashboard, FleetView, StoreView
from ..fleet.discovery import DiscoveryLimits
from ..fleet.gates import GateConfig, replay
from ..fleet.publisher import FleetError, Publisher, Rollout, format_rollout, parse_percent, stages_for
from ..fleet.telemetry import TelemetryCollector, format_record
from .args import add_key_args, bounded
from .ota import signing_keys

if TYPE_CHECKING:
    from ..fleet.store import FleetStore


def _broker(args: argparse.Namespace) -> BrokerSettings:
    host, _, port_text = args.broker.rpartition(":")
    if not host or (port := parse_decimal(port_text)) is None:
        raise FleetError(f"--broker wants HOST:PORT, got {args.broker!r}")
    password = os.environ.get(args.password_env, "") if args.password_env else ""
    return BrokerSettings(host=host, port=port, username=args.username or "", password=password,
                          tls_ca=args.tls_ca or "", tls_cert=args.tls_cert or "", tls_key=args.tls_key or "",
                          protocol=args.mqtt_version, topic_prefix=args.topic_prefix)


def _percent(text: str) -> float:
    """argparse type for ``10%`` or ``10``: a bad value is a usage error that names the option."""
    try:
        return parse_percent(text)
    except (FleetError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage from 0 to 100 (e.g. 10%)") from None


def _percents(text: str) -> list[float]:
    return [_percent(p) for p in text.split(",")]


def _state_file(args: argparse.Namespace) -> Path:
    """One state file per release line: ``fleet-<fleet>.json``, ``fleet-<fleet>-<model>.json``."""
    return Path(args.state or f"fleet-{args.fleet}{f'-{args.model}' if args.model else ''}.json")


def _open_store(args: argparse.Namespace) -> FleetStore:
    from ..fleet.store import open_store  # the store loads only for the commands given --store

    return open_store(args.store)


@contextmanager
def _publisher(args: argparse.Namespace, signing: bool = True, lease_s: float | None = None,
               gates: GateConfig | None = None, share: str = "") -> Iterator[Publisher]:
    """The line's publisher (not connected yet), its bookkeeping in ``--store`` (leading the line by a
    lease of ``lease_s``) or the state file; closed, with the store, when the block ends."""
    keys = signing_keys(args) if signing else []
    store = _open_store(args) if args.store else None
    try:
        pub = Publisher(_broker(args), args.fleet, keys, None if store else _state_file(args),
                        model=args.model or "", store=store, lease_s=lease_s if store else None,
                        gates=gates, share=share)
        try:
            yield pub
        finally:
            pub.close()
    finally:
        if store is not None:
            store.close()


def _print_rollout(r: Rollout) -> None:
    print(format_rollout(r), flush=True)


def cmd_publish(args: argparse.Namespace) -> int:
    if args.share and not args.store:
        raise FleetError("--share needs --store: the publishers of a group write the statuses they split to "
                         "one fleet store")
    with _publisher(args, lease_s=args.lease_s, gates=_gate_config(args), share=args.share or "") as pub:
        pub.start(args.connect_timeout_s)  # a standby ingests statuses into the store while it waits
        print(pub.discover(_discovery_limits(args)).describe())
        if args.store and not pub.lead(args.timeout_s):
            raise FleetError(f"another publisher led the line for all of --timeout-s {args.timeout_s:g}s")
        seen = pub.wait_for_devices(args.expect or 1 << 30, args.discover_s)
        line = f" model line {args.model}" if args.model else ""
        print(f"fleet {args.fleet}{line}: {seen} devices known")
        rollout = pub.publish(args.bundle, args.canary, args.halt_on,
                              stages_for(args.canary, args.stages) if args.stages else None,
                              args.rollback_on_halt, args.chunk_kb << 10, args.http_url or "")
        print(f"published {args.bundle}: {len(rollout.chunks)} chunks of {args.chunk_kb} KiB, "
              f"stages {', '.join(f'{p:g}%' for p in rollout.stages)}")
        if args.no_wait:
            return 0
        rollout = pub.watch(args.timeout_s, args.stage_timeout_s, progress=_print_rollout)
        _print_rollout(rollout)
    return 0 if rollout.status == "complete" else 4


def _store_status(args: argparse.Namespace) -> int:
    """``fleet status --store``: the line's rollout, counts by state and release of the devices matching
    the filters, and one page of them (``--after`` continues it); nothing waits for a broker."""
    from ..fleet.store import DeviceFilter

    line = args.model or ""
    filters = DeviceFilter(line=line, release=args.release, state=args.in_state,
                           device_class=args.device_class, group=args.group)
    with _open_store(args) as store:
        if (owner := store.fleet) not in (None, args.fleet):
            raise FleetError(f"{args.store} is fleet {owner!r}'s store, not {args.fleet!r}'s")
        row = store.current_rollout(line)
        states, releases = store.count_by("state", filters), store.count_by("release", filters)
        try:
            page = store.query_devices(filters, min(args.limit, store.config.max_page), args.after)
        except ValueError as exc:  # an --after that is not a page cursor
            raise FleetError(str(exc)) from None
    rollout = Rollout(**{**row.record, "outcomes": row.outcomes}) if row else None
    if rollout:
        _print_rollout(rollout)
    print(f"{sum(states.values())} devices: " + ", ".join(f"{n} {k}" for k, n in sorted(
        states.items(), key=lambda kv: str(kv[0]))) + "; by release: " + ", ".join(
        f"{k or '-'}: {n}" for k, n in sorted(releases.items(), key=lambda kv: kv[0] or 0)))
    print(f"{'device':24s} {'state':12s} {'release':>7s}  detail")
    for r in page.rows:
        outcome = rollout.outcomes.get(r.device, "") if rollout else ""
        print(f"{r.device:24s} {r.state or '?':12s} {r.release or '-':>7}  {outcome} "
              f"{r.device_class or ''}".rstrip())
    if page.after is not None:
        print(f"more: --after '{page.after}'")
    return 0


def _discovery_limits(args: argparse.Namespace) -> DiscoveryLimits:
    try:
        return DiscoveryLimits(broker_queue=args.broker_queue,
                               round_messages=min(500, max(1, args.broker_queue // 2)))
    except ValueError as exc:
        raise FleetError(f"--broker-queue: {exc}") from None


def cmd_fleet_discover(args: argparse.Namespace) -> int:
    """Read every registered device's status (``fleet.discovery``) into ``--store`` or the state file."""
    with _publisher(args, signing=False) as pub:
        census = pub.discover(_discovery_limits(args))
    print(census.describe())
    return 0 if census.complete else 3


def cmd_fleet_status(args: argparse.Namespace) -> int:
    if args.store:
        return _store_status(args)
    with _publisher(args, signing=False) as pub:
        census = pub.discover(_discovery_limits(args))
        devices = pub.line_devices if args.model else pub.devices
        rollout = pub.rollout
    if rollout:
        _print_rollout(rollout)
    print(f"{'device':24s} {'state':12s} {'release':>7s}  detail")
    for d, s in sorted(devices.items()):
        detail = s.get("reason") or s.get("detail") or ""
        if s.get("state") == "downloading":
            detail = f"{s.get('have')}/{s.get('total')} chunks"
        elif isinstance(s.get("models"), dict) and not args.model:  # a multi-model device: every line
            detail = "; ".join(f"{m}: {v.get('state')} release {v.get('release') or '-'}"
                               for m, v in sorted(s["models"].items()) if isinstance(v, dict))
        outcome = rollout.outcomes.get(d, "") if rollout else ""
        print(f"{d:24s} {s.get('state', '?'):12s} {s.get('release') or '-':>7}  {outcome} {detail}".rstrip())
    print(census.describe())
    return 0


def cmd_fleet_command(args: argparse.Namespace) -> int:
    with _publisher(args) as pub:
        pub.start(args.connect_timeout_s)
        rollout = pub.rollout
        sha = rollout.bundle_sha256 if rollout and args.action == "install" else ""
        pub.command(args.device, args.action, sha)
    print(f"sent signed {args.action} to {args.device}")
    return 0


def cmd_fleet_telemetry(args: argparse.Namespace) -> int:
    """Print the fleet's telemetry as it arrives, one line per record, until ``--count`` records,
    ``--duration-s`` or Ctrl-C."""
    enough, printed = threading.Event(), [0]

    def show(record: TelemetryRecord) -> None:
        print(format_record(record), flush=True)
        printed[0] += 1
        if args.count and printed[0] >= args.count:
            enough.set()

    collector = TelemetryCollector(_broker(args), args.fleet, args.client_id or "", on_record=show)
    collector.start(args.connect_timeout_s)
    try:
        enough.wait(args.duration_s or None)
    except KeyboardInterrupt:
        pass
    finally:
        collector.close()
    for device, d in sorted(collector.devices.items()):
        if d.missing or d.duplicates:
            print(f"{device}: {d.missing} records missing (gaps {d.gaps}), {d.duplicates} repeats dropped")
    return 0


def cmd_fleet_dashboard(args: argparse.Namespace) -> int:
    """Serve the fleet's live page until ``--duration-s`` or Ctrl-C: from the broker, or from a fleet store
    (``--store``: the devices paged, the fleet counted in the database; no broker)."""
    view: FleetView | StoreView
    if args.store:
        store = _open_store(args)
        if (owner := store.fleet) not in (None, args.fleet):
            store.close()
            raise FleetError(f"{args.store} is fleet {owner!r}'s store, not {args.fleet!r}'s")
        view = StoreView(store, args.fleet)
    else:
        view = FleetView(_broker(args), args.fleet)
    with Dashboard(view, args.host, args.port) as dash:
        view.start(args.connect_timeout_s)
        dash.start()
        print(f"fleet {args.fleet}: dashboard on {dash.url} (Ctrl-C stops)", flush=True)
        try:
            threading.Event().wait(args.duration_s or None)
        except KeyboardInterrupt:
            pass
    return 0


def _gate_config(args: argparse.Namespace) -> GateConfig:
    return GateConfig(args.gate_latency_p95, args.gate_drift, args.gate_top1, args.gate_golden,
                      args.gate_golden_atol, args.gate_min_requests, args.gate_min_samples)


def cmd_fleet_gates(args: argparse.Namespace) -> int:
    """Judge a recording of the fleet's messages (one JSON message a line) against the ``--gate-*``
    configuration, printing each stage's verdicts; exit 4 when a gate failed."""
    config = _gate_config(args)
    if not config.enabled:
        raise FleetError("no gate configured: give --gate-latency-p95, --gate-drift, --gate-top1 or "
                         "--gate-golden")
    with open(args.replay, "rb") as f:
        stages = replay(f, config, args.release, args.model or "")
    for stage in stages:
        print(stage.format())
    return 4 if any(v.status == "fail" for s in stages for v in s.verdicts) else 0


def cmd_fleet_migrate_state(args: argparse.Namespace) -> int:
    """Move a publisher's JSON state file into a fleet store (idempotent)."""
    from ..fleet.store import migrate_state, open_store, read_state  # the store loads only for this command

    state = read_state(args.state_file)  # before the store: a bad file leaves no new store behind
    with open_store(args.store) as store:
        report = migrate_state(args.state_file, store, state)
        backend = store.backend
    line = f"model line {report.line!r}" if report.line else "the single-model line"
    rollout = f"rollout {report.rollout_id}" if report.rollout_id is not None else "no rollout"
    print(f"{args.state_file} -> {backend} store: fleet {report.fleet}, {line}: {report.devices} devices "
          f"({report.written} written), {rollout}, last announcement number {report.seq}")
    return 0


def cmd_fleet_demo(args: argparse.Namespace) -> int:
    from ..tools.demo import run_fleet_demo  # as ``cuvil-edge demo``: the compiler and agent load only for it

    return run_fleet_demo(args.workdir)


def _broker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fleet", required=True, help="fleet group name")
    p.add_argument("--broker", default="127.0.0.1:1883", metavar="HOST:PORT")
    p.add_argument("--username")
    p.add_argument("--password-env", metavar="VAR", help="environment variable holding the broker password")
    p.add_argument("--tls-ca", help="CA file: connect with TLS")
    p.add_argument("--tls-cert", help="client certificate (mutual TLS)")
    p.add_argument("--tls-key")
    p.add_argument("--mqtt-version", type=int, choices=(4, 5), default=5, help="5 (default) or 4 (3.1.1)")
    p.add_argument("--topic-prefix", default="cuvil")
    p.add_argument("--state", help="publisher state file (default fleet-<fleet>[-<model>].json)")
    p.add_argument("--connect-timeout-s", type=bounded(float, 0.001), default=15.0,
                   help="give up (exit 1) when the broker is not reached within this time")


def _line_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", metavar="NAME",
                   help="the model line of multi-model devices (their release topic release/NAME), with its "
                        "own rollout and state file; default: the fleet's single-model line")


_STORE_URL = "fleet.db, sqlite:///fleet.db, sqlite:////abs/fleet.db or postgresql://user@host/db"


def _gate_args(p: argparse.ArgumentParser) -> None:
    """The quality gates of a rollout (``cuvil_edge.fleet.gates``), judged per device class."""
    limit = bounded(float, 0)
    p.add_argument("--gate-latency-p95", type=limit, metavar="RATIO",
                   help="halt when a device class's p95 on the new release is over the previous one's times "
                        "this")
    p.add_argument("--gate-drift", type=limit, metavar="ABS",
                   help="halt when a device's shadow sample differs from the previous release by more")
    p.add_argument("--gate-top1", type=bounded(float, 0, 1), metavar="SHARE",
                   help="halt when fewer shadow samples (0-1) keep the previous release's top-1")
    p.add_argument("--gate-golden", action="store_true",
                   help="halt when a device's self-test on the golden vectors exceeds its tolerance "
                        "(any difference in determinism mode)")
    p.add_argument("--gate-golden-atol", type=limit, metavar="ABS",
                   help="with --gate-golden: this tolerance instead of the one each device checked")
    p.add_argument("--gate-min-requests", type=bounded(int, 1), default=20,
                   help="requests per device class and release before the latency gate judges")
    p.add_argument("--gate-min-samples", type=bounded(int, 1), default=10,
                   help="shadow samples per device class before the drift gate judges")


def _discovery_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--broker-queue", type=bounded(int, 2), default=DiscoveryLimits.broker_queue,
                   metavar="N", help="messages the broker lets through one subscription at once (Mosquitto: "
                                     "max_inflight_messages + max_queued_messages; default 20 + 1000): "
                                     "discovery reads under it and names the registry shards past it")


def _store_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--store", metavar="URL", help=f"{what} ({_STORE_URL})")


def register(sub: argparse._SubParsersAction) -> None:
    seconds, count = bounded(float, 0), bounded(int, 0)  # waits and counts: 0 means none, never negative
    p = sub.add_parser("publish", help="announce a bundle to a fleet and roll it out in stages")
    p.add_argument("bundle")
    _broker_args(p)
    _line_args(p)
    add_key_args(p)
    p.add_argument("--canary", type=_percent, default="10%", help="first stage, percent of known devices")
    p.add_argument("--stages", type=_percents,
                   help="later stages, e.g. 25,50,100 (default); 100 is always last")
    p.add_argument("--halt-on", type=_percent, default="5%",
                   help="failure rate within a stage that halts the rollout")
    p.add_argument("--rollback-on-halt", action="store_true", help="roll back devices that took it")
    p.add_argument("--chunk-kb", type=bounded(int, 1), default=32,
                   help="chunk size in KiB (brokers cap messages)")
    p.add_argument("--http-url", metavar="URL",
                   help="http(s) URL serving this bundle file (static server, object store, CDN): signed "
                        "into the announcement, fetched with Range requests; MQTT chunks stay the fallback")
    p.add_argument("--expect", type=count, help="wait until this many devices reported (else --discover-s)")
    p.add_argument("--discover-s", type=seconds, default=3.0, help="time to collect device statuses")
    p.add_argument("--stage-timeout-s", type=seconds, default=600.0,
                   help="silent devices then count as failed")
    p.add_argument("--timeout-s", type=seconds, default=3600.0)
    p.add_argument("--no-wait", action="store_true", help="publish the first stage and exit")
    _store_arg(p, "keep devices, the rollout and announcement numbers in this fleet store, not --state")
    p.add_argument("--lease-s", type=bounded(float, 0.5), default=15.0,
                   help="with --store: the line's leader renews its lease this long at each step; another "
                        "publish on the line waits as a standby and takes over this long after it stops")
    p.add_argument("--share", metavar="GROUP",
                   help="with --store: take statuses through the MQTT shared subscription $share/GROUP/..., "
                        "so the publishers of the group (leader and standbys) split the stream between them")
    _discovery_arg(p)
    _gate_args(p)
    p.set_defaults(fn=cmd_publish)

    f = sub.add_parser("fleet", help="fleet status, signed device commands, local demo")
    fs = f.add_subparsers(dest="fleet_cmd", required=True)
    st = fs.add_parser("status", help="per-device state (retained statuses) and the current rollout")
    _broker_args(st)
    _line_args(st)
    _discovery_arg(st)
    _store_arg(st, "read this fleet store instead of the broker: filters, counts and pages below")
    st.add_argument("--release", type=count, help="with --store: only devices on this release")
    st.add_argument("--in-state", metavar="STATE", help="with --store: only devices in this state")
    st.add_argument("--device-class", metavar="PROFILE", help="with --store: only this device class")
    st.add_argument("--group", help="with --store: only this operator group")
    st.add_argument("--limit", type=bounded(int, 1), default=100, help="with --store: devices per page")
    st.add_argument("--after", metavar="CURSOR", help="with --store: the page after the one that printed it")
    st.set_defaults(fn=cmd_fleet_status)
    di = fs.add_parser("discover", help="read every registered device's status into --store (or the state "
                                        "file), a few registry shards at a time under the broker's queue")
    _broker_args(di)
    _line_args(di)
    _discovery_arg(di)
    _store_arg(di, "write the devices found into this fleet store, not --state")
    di.set_defaults(fn=cmd_fleet_discover)
    cm = fs.add_parser("command", help="send a signed, one-time command to one device")
    cm.add_argument("device")
    cm.add_argument("action", choices=("install", "rollback", "report"))
    _broker_args(cm)
    _line_args(cm)
    add_key_args(cm)
    _store_arg(cm, "read the line's rollout from this fleet store, not --state")
    cm.set_defaults(fn=cmd_fleet_command)
    te = fs.add_parser("telemetry", help="print the fleet's telemetry (events and summaries) as it arrives")
    _broker_args(te)
    te.add_argument("--duration-s", type=seconds, default=0.0, help="stop after this long (default: Ctrl-C)")
    te.add_argument("--count", type=count, default=0, help="stop after printing this many records")
    te.add_argument("--client-id", help="MQTT client id (default cuvil-telemetry-<fleet>: its persistent "
                    "session keeps telemetry sent while it is away)")
    te.set_defaults(fn=cmd_fleet_telemetry)
    db = fs.add_parser("dashboard", help="a live web page: devices, rollout stages, latency per release")
    _broker_args(db)
    db.add_argument("--host", default="127.0.0.1", help="address to serve on (default: this machine only)")
    db.add_argument("--port", type=bounded(int, 0, 65535), default=8088, help="0: any free port")
    db.add_argument("--duration-s", type=seconds, default=0.0, help="stop after this long (default: Ctrl-C)")
    _store_arg(db, "serve the fleet from this fleet store, a page of devices at a time (no broker)")
    db.set_defaults(fn=cmd_fleet_dashboard)
    ga = fs.add_parser("gates", help="replay a recording of the fleet's messages against rollout gates")
    ga.add_argument("--replay", required=True, metavar="FILE.jsonl",
                    help="one message a line as published: telemetry records, statuses, rollout summaries")
    ga.add_argument("--release", type=bounded(int, 1), help="the release judged (default: the recording's)")
    _line_args(ga)
    _gate_args(ga)
    ga.set_defaults(fn=cmd_fleet_gates)
    ms = fs.add_parser("migrate-state", help="move a publisher's JSON state file into a fleet store "
                       "(SQLite or PostgreSQL); running it again changes nothing")
    ms.add_argument("state_file", metavar="STATE.json")
    ms.add_argument("--store", required=True, metavar="URL", help=_STORE_URL)
    ms.set_defaults(fn=cmd_fleet_migrate_state)
    dm = fs.add_parser("demo", help="broker + publisher + one agent on this machine, no setup")
    dm.add_argument("--workdir", help="where the temporary directory goes")
    dm.set_defaults(fn=cmd_fleet_demo)
