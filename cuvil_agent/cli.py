"""``cuvil-agent``: the device daemon (``run --config agent.toml``) and one-shot commands (install, rollback,
status, infer) over one state directory."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from device_profiles.profile import DeviceProfilesError, load_profile
from ota.crypto import parse_json
from ota.errors import (
    ConfigError,
    ExitCodes,
    InstallError,
    OtaError,
    ServerUnreachable,
    UnknownModel,
    VerificationError,
    run_cli,
)
from ota.installer import Installer
from ota.roots import MODELS_DIR, line_dirs, trusted_root, update_roots
from runtime_wasm.errors import RuntimeWasmError

from .config import default_hardware_id, load_agent_config, model_policies


def _read_roots(paths: Sequence[str]) -> list[dict[str, Any]]:
    return [parse_json(Path(p).read_bytes(), f"root metadata {p}") for p in paths]


def _from_config(args: argparse.Namespace, need_model: bool = True) -> None:
    """``--config agent.toml`` supplies the state directory, hardware id, profile and trust root; on a
    multi-model device (``[[models]]``, or ``<state-dir>/models/*`` on disk) ``--model NAME`` picks the
    line the command acts on (``need_model``: required; else absent means every line)."""
    args.lines, model = {}, getattr(args, "model", None)
    if args.config:
        cfg = load_agent_config(args.config)
        args.state_dir, args.profile = cfg.state_dir, args.profile or cfg.profile or None
        args.hardware_id = cfg.hardware_id or args.hardware_id
        args.root = args.root or ([cfg.trust_root] if cfg.trust_root else [])
        args.socket = getattr(args, "socket", None) or cfg.socket
        args.policy = cfg.policy  # an install self-tests under the limits the agent will serve with
        args.lines = line_dirs(cfg.state_dir, [m.name for m in cfg.models])
        for m, policy in zip(cfg.models, model_policies(cfg)):
            if m.name == model:
                args.socket, args.policy = getattr(args, "socket", None) or m.socket, policy
    elif not args.state_dir:
        raise SystemExit("give --state-dir DIR or --config agent.toml")
    elif (Path(args.state_dir) / MODELS_DIR).is_dir():
        found = sorted(p.name for p in (Path(args.state_dir) / MODELS_DIR).iterdir() if p.is_dir())
        args.lines = line_dirs(args.state_dir, found)
    known = ", ".join(args.lines)
    if model and not args.lines:
        raise UnknownModel(f"--model {model!r}: this device serves one model (no model lines)")
    if model and model not in args.lines:
        raise UnknownModel(f"no model line {model!r} on this device; its models: {known}")
    if args.lines and not model and need_model:
        raise UnknownModel(f"this device serves several models ({known}): give --model NAME")
    if model:
        args.state_dir = str(args.lines[model])
    if args.profile:  # a misspelt name would match no bundle's profiles and only show as a refusal later
        load_profile(args.profile)


def _installers(args: argparse.Namespace, need_model: bool = True) -> list[Installer]:
    """Open the state (under its lock, as the agent does): the ``--model`` line's (or the only) state
    first, then, when ``--root`` gives a newer root, every other line of the device too, since a device has
    one root for all its lines (``update_roots``). The first ``--root`` provisions an empty state (a line
    added to a provisioned device takes the device's root instead)."""
    _from_config(args, need_model)
    roots = _read_roots(args.root or [])
    chosen = getattr(args, "model", None)
    dirs = [Path(args.state_dir)] if chosen or not args.lines else []
    dirs += [d for d in args.lines.values() if d not in dirs]
    bootstrap = trusted_root(dirs) or (roots[0] if roots else None)
    opened = [Installer(d, args.hardware_id, args.profile, root=bootstrap, model=chosen or "",
                        policy=getattr(args, "policy", None)) for d in dirs[:1]]
    if roots:
        opened += [Installer(d, args.hardware_id, args.profile, root=bootstrap) for d in dirs[1:]]
        before = min(inst.trust.root.version for inst in opened)
        version = update_roots(opened, roots)
        if version > before:
            print(f"trust: root rotated to version {version}"
                  + (f" on every model line ({', '.join(args.lines)})" if args.lines else ""))
    return opened


def _installer(args: argparse.Namespace) -> Installer:
    return _installers(args)[0]


def cmd_install(args: argparse.Namespace) -> int:
    inst = _installer(args)
    m = inst.install(args.bundle, report=lambda msg: print(f"  ok  {msg}"))
    print(f"installed {m.name} {m.version} (release {m.release}): self-test passed, now active")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    manifest = _installer(args).rollback()
    print(f"rolled back to {manifest.name} {manifest.version} (release {manifest.release})")
    return 0


def cmd_trust(args: argparse.Namespace) -> int:
    """Provision or rotate the root of trust (``--root`` in version order), nothing else."""
    if not args.root:
        raise SystemExit("give --root ROOT_JSON (each new version, in order)")
    for inst in _installers(args, need_model=False):
        line = f"model {inst.state_dir.name}: " if args.lines else ""
        print(f"{line}trust: root v{inst.trust.root.version}, release counter {inst.trust.release_counter}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Read only: no lock, no recovery, no writes, so it can run beside a running install."""
    if args.root:
        raise SystemExit("status only reads; rotate trust with: cuvil-agent trust --root ROOT_JSON")
    _from_config(args, need_model=False)
    if args.lines and not args.model:  # every line of a multi-model device
        for name, where in args.lines.items():
            print(f"model {name}:")
            _show_state(args, where)
        return 0
    return _show_state(args, Path(args.state_dir))


def _show_state(args: argparse.Namespace, state_dir: Path) -> int:
    d = Installer(state_dir, args.hardware_id, args.profile, read_only=True).describe()
    print(f"trust: counter {d['release_counter']}; root v{d['root_version']}")
    if d["pointer_problem"]:
        print(f"active: UNKNOWN ({d['pointer_problem']})")
    elif d["active"] is None:
        print("active: none installed")
    for name, slot in sorted(d["slots"].items()):
        what = f"{slot['name']} {slot['version']} (release {slot['release']})" if "release" in slot else "?"
        health = "ok" if slot["healthy"] else f"CORRUPT: {slot['problem']}"
        print(f"{'active' if slot['active'] else 'other '}: slot {name}: {what}: {health}")
    from .state import describe_state

    d = describe_state(state_dir)
    t = d["transfer"]
    print(f"last announcement: seq {d['announce_seq']}; transfer: "
          + (f"{t['have']} chunks of bundle {t['bundle_sha256'][:12]} verified" if t else "none"))
    for bundle, reason in d["failed"].items():
        print(f"failed here: bundle {bundle[:12]}: {reason}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """The daemon: runs until SIGTERM or SIGINT, then reports offline and exits cleanly."""
    from .agent import Agent

    agent = Agent(load_agent_config(args.config))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return agent.run(stop)


def cmd_infer(args: argparse.Namespace) -> int:
    """Ask the running agent over its Unix socket: NAME=FILE.npy inputs, outputs printed or saved; or
    ``--text``/``--image``/``--audio`` items, run through the active model's signed processing, labels
    printed (audio: one line per window)."""
    from .serve import infer

    _from_config(args)
    if not args.socket:
        raise SystemExit("the agent serves no socket: set agent.socket (with [[models]]: the model's "
                         "socket) in its config or give --socket")
    if sum(map(bool, (args.inputs, args.text, args.image, args.audio))) != 1:
        raise SystemExit("give NAME=FILE.npy inputs, --text TEXT, --image PATH or --audio FILE.wav "
                         "(one kind)")
    if args.hop is not None and not args.audio:
        raise SystemExit("--hop cuts audio into windows: give it with --audio")
    if args.text or args.image or args.audio:
        return _infer_items(args, args.text or args.image or args.audio)
    inputs = {}
    for item in args.inputs:
        name, sep, path = item.partition("=")
        if not sep:
            raise SystemExit(f"inputs are NAME=FILE.npy, got {item!r}")
        inputs[name] = np.load(path)
    release, outputs = infer(args.socket, inputs)
    if args.output:
        np.savez(args.output, **outputs)
    for k, v in outputs.items():
        shown = "" if args.output else f" {v.tolist()}"
        print(f"{k}: {v.dtype}{list(v.shape)} (release {release}){shown}")
    return 0


def _infer_items(args: argparse.Namespace, items: Sequence[str]) -> int:
    """Texts, image or WAV files through the active model's signed processing: run by the agent when it
    can (``serve.infer_items``), else here, from the active slot's verified files, sending the agent
    tensors."""
    import json

    from .serve import infer_items

    images = [Path(p).read_bytes() for p in args.image]
    clips = [Path(p).read_bytes() for p in args.audio]
    answered = infer_items(args.socket, texts=args.text, images=images, audio=clips, hop_s=args.hop)
    if answered is None:
        answered = _process_here(args, items)
    release, results = answered
    records = []
    for item, r in zip(items, results):
        if "label" in r:
            print(f"{r['label']} {r['score']:.4f} (release {release}): {item}")
        elif "windows" in r:
            for w in r["windows"]:
                print(f"{w['label']} {w['score']:.4f} [{w['start']:.3f}-{w['end']:.3f} s] "
                      f"(release {release}): {item}")
        elif "spans" in r:
            print(f"{len(r['spans'])} span(s) (release {release}): {item}")
            for s in r["spans"]:
                print(f"  {s['label']} [{s['start']}:{s['end']}] {s['text']!r} {s['score']:.4f}")
        else:
            print(f"embedding float32[{len(r['embedding'])}] (release {release}): {item}")
        records.append({"input": item, **r})
    if args.output:
        Path(args.output).write_text(json.dumps(records, indent=1))
    return 0


def _process_here(args: argparse.Namespace, items: Sequence[str]) -> tuple[int, list[dict[str, Any]]]:
    """Pre- and post-processing here, for an agent that does not process: a reply from another release
    (an update switched models meanwhile) is refused, not mixed."""
    from runtime_wasm.processing import Processor

    from .payloads import result_record
    from .serve import infer

    active = Installer(args.state_dir, args.hardware_id, args.profile, read_only=True).active_model()
    release = active.release
    processor = Processor.from_dir(active.directory)

    def predict(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        answered, outputs = infer(args.socket, feeds)
        if answered != release:
            raise OtaError(f"release {answered} answered, but the processing read is release {release}'s: "
                           "the active model changed; run again")
        return outputs

    if processor.config.audio is not None:
        return release, [result_record(r) for r in processor.run_windows(list(items), predict, args.hop)]
    return release, [result_record(r) for r in processor.run(list(items), predict)]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="cuvil-agent",
                                 description="Receive, verify, install and serve signed model bundles.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="the daemon: follow the fleet's releases over MQTT, serve inference")
    run.add_argument("--config", required=True, help="agent.toml")
    run.set_defaults(fn=cmd_run)
    for name, fn, help_ in (("install", cmd_install, "verify, install, self-test and activate a bundle"),
                            ("rollback", cmd_rollback, "reactivate the previous model after checking it"),
                            ("trust", cmd_trust, "provision or rotate the root of trust (--root)"),
                            ("status", cmd_status, "show the slots, trust and update state (read only)"),
                            ("infer", cmd_infer, "run inputs through the running agent's model")):
        p = sub.add_parser(name, help=help_)
        if name == "install":
            p.add_argument("bundle")
        if name == "infer":
            p.add_argument("inputs", nargs="*", metavar="NAME=FILE.npy")
            p.add_argument("--text", action="append", default=[],
                           help="a text for a text model (repeat for a batch): prints its label")
            p.add_argument("--image", action="append", default=[], metavar="PATH",
                           help="an image (.npy HWC uint8, .ppm/.pgm, others with Pillow) for an image model")
            p.add_argument("--audio", action="append", default=[], metavar="FILE.wav",
                           help="a WAV file (PCM or float, at the model's rate) for an audio model")
            p.add_argument("--hop", type=float, metavar="SECONDS",
                           help="with --audio: cut each clip into the model's window every SECONDS, a label "
                                "per window")
            p.add_argument("--socket", help="the agent's Unix socket (default: from --config)")
            p.add_argument("-o", "--output", help="save the outputs to this .npz (items: results as JSON)")
        p.add_argument("--config", help="agent.toml: state directory, hardware id and trust root from there")
        if name != "trust":  # one root for the whole device: trust rotates every model line
            p.add_argument("--model", metavar="NAME",
                           help="the model line to act on, on a multi-model device (status: default all)")
        p.add_argument("--state-dir")
        p.add_argument("--root", action="append", metavar="ROOT_JSON",
                       help="signed root metadata: provisions an empty state; newer versions rotate trust "
                            "(give each version in order)")
        p.add_argument("--hardware-id", default=default_hardware_id())
        p.add_argument("--profile", help="device profile name, matched against the bundle's profiles")
        p.set_defaults(fn=fn)
    return ap


#: (error types, exit code, stderr line) of each failure a user or the device can cause: the first row an
#: error matches decides. Anything else is a bug and keeps its traceback. Exit 2 is also argparse's, for a
#: command line that does not parse (its usage block instead of one line); ``SystemExit("...")`` (an
#: option missing that argparse cannot require) prints its one line and exits 1.
EXIT_CODES: ExitCodes = (
    # a bad config, input or profile; a missing or unreadable file, state directory or socket
    ((ConfigError, ServerUnreachable, ValueError, OSError, DeviceProfilesError), 1,
     "error: {type}: {message}"),
    ((VerificationError,), 2, "refused: {type}: {message}"),  # the bundle or metadata failed a trust check
    ((InstallError,), 3, "failed: {type}: {message} (the previous model stays active)"),
    ((OtaError, RuntimeWasmError), 3, "failed: {type}: {message}"),  # broker, transfer or agent failed
)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="cuvil-agent: %(message)s")  # e.g. waiting for the lock
    return run_cli(build_parser(), argv, EXIT_CODES)


if __name__ == "__main__":
    sys.exit(main())
