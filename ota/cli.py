"""``cuvil-agent``: the device side of an update (install, rollback, status) over one state directory."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import InstallError, OtaError, VerificationError
from .installer import Installer


def default_hardware_id() -> str:
    """Set per device class at provisioning (``CUVIL_HARDWARE_ID``); a generic id otherwise."""
    return os.environ.get("CUVIL_HARDWARE_ID") or f"generic-{platform.machine()}"


def _read_roots(paths: Sequence[str]) -> list[dict[str, Any]]:
    return [json.loads(Path(p).read_bytes()) for p in paths]


def _installer(args: argparse.Namespace) -> Installer:
    """Open the state; the first ``--root`` provisions an empty one, newer ones rotate the trust."""
    roots = _read_roots(args.root or [])
    provisioned = (Path(args.state_dir) / "trust.json").exists()
    bootstrap = roots[0] if roots and not provisioned else None
    inst = Installer(args.state_dir, args.hardware_id, args.profile, root=bootstrap)
    newer = [r for r in roots if r.get("signed", {}).get("version", 0) > inst.trust.root.version]
    if newer:
        inst.update_root(newer)
        print(f"trust: root rotated to version {inst.trust.root.version}")
    return inst


def cmd_install(args: argparse.Namespace) -> int:
    inst = _installer(args)
    m = inst.install(args.bundle, report=lambda msg: print(f"  ok  {msg}"))
    print(f"installed {m.name} {m.version} (release {m.release}): self-test passed, now active")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    manifest = _installer(args).rollback()
    print(f"rolled back to {manifest.name} {manifest.version} (release {manifest.release})")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    inst = _installer(args)
    m = inst.active_manifest()
    print(f"active: {m.name} {m.version} (release {m.release}); counter {inst.trust.release_counter}; "
          f"root v{inst.trust.root.version}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="cuvil-agent",
                                 description="Install and roll back signed model bundles.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, fn, help_ in (("install", cmd_install, "verify, install, self-test and activate a bundle"),
                            ("rollback", cmd_rollback, "reactivate the previous model after checking it"),
                            ("status", cmd_status, "show the active model and trust state")):
        p = sub.add_parser(name, help=help_)
        if name == "install":
            p.add_argument("bundle")
        p.add_argument("--state-dir", required=True)
        p.add_argument("--root", action="append", metavar="ROOT_JSON",
                       help="signed root metadata: provisions an empty state; newer versions rotate trust "
                            "(give each version in order)")
        p.add_argument("--hardware-id", default=default_hardware_id())
        p.add_argument("--profile", help="device profile name, matched against the bundle's profiles")
        p.set_defaults(fn=fn)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except VerificationError as exc:
        print(f"refused: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except (InstallError, OtaError) as exc:
        print(f"failed: {type(exc).__name__}: {exc} (the previous model stays active)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
