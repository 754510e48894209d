"""``cuvil-edge keys|sign|verify|bundle``: the host side of signed updates.

``register(subparsers)`` adds the commands to the ``cuvil-edge`` parser; each sets ``fn``.
Passphrases come from an environment variable named by ``--passphrase-env`` (never argv).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from device_profiles import load_profile
from ota.bundle import verify_bundle
from ota.crypto import parse_json
from ota.golden import GOLDEN_FILE
from ota.metadata import Manifest
from ota.trust import TrustState

from ..signing import Keyring, SigningError, add_signatures, build_bundle, load_key
from .args import (
    add_input_shape,
    add_key_args,
    add_passphrase_env,
    add_targets,
    bounded,
    load_options,
    parse_targets,
)


def _passphrase(args: argparse.Namespace) -> bytes | None:
    name = args.passphrase_env
    if not name:
        return None
    if name not in os.environ:
        raise SigningError(f"--passphrase-env {name}: that environment variable is not set")
    return os.environ[name].encode()


def _keyring(args: argparse.Namespace) -> Keyring:
    return Keyring(args.keyring, _passphrase(args))


def signing_keys(args: argparse.Namespace) -> list:
    """Explicit ``--sign-key`` files, else every delegated release key in ``--keyring``."""
    if args.sign_key:
        return [load_key(p, _passphrase(args)) for p in args.sign_key]
    if args.keyring:
        return _keyring(args).release_keys()
    raise SigningError("give --sign-key FILE (repeatable) or --keyring DIR")


def _full_id(ring: Keyring, prefix: str) -> str:
    r = ring.root
    match = [k for k in (*r.root_keys, *r.release_keys) if k.startswith(prefix)]
    if len(match) != 1:
        raise SigningError(f"key id prefix {prefix!r} matches {len(match)} delegated keys")
    return match[0]


def cmd_keys(args: argparse.Namespace) -> int:
    if args.keys_cmd == "init":
        ring = Keyring.init(args.keyring, args.root_keys, args.root_threshold, args.release_keys,
                            args.release_threshold, _passphrase(args))
        print(f"created keyring {ring.directory}; provision devices with {ring.directory / 'root.json'}")
    elif args.keys_cmd == "add":
        print(f"delegated {args.role} key {_keyring(args).add_key(args.role)[:16]}")
    elif args.keys_cmd == "rotate":
        ring = _keyring(args)
        kid = _full_id(ring, args.key_id)
        new = ring.revoke(kid, replacement=not args.no_replacement)
        print(f"revoked {kid[:16]}" + (f", delegated {new[:16]} in its place" if new else ""))
    ring = _keyring(args)
    r = ring.root
    print(f"root v{r.version}: root keys {r.root_threshold} of {len(r.root_keys)}, "
          f"release keys {r.release_threshold} of {len(r.release_keys)}")
    for role, keys in (("root", r.root_keys), ("release", r.release_keys)):
        for kid in sorted(keys):
            print(f"  {role:8s} {kid[:16]}")
    for kid in sorted(r.revoked):
        print(f"  revoked  {kid[:16]}")
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    envelope = add_signatures(args.bundle, signing_keys(args))
    print(f"{args.bundle}: {len(envelope['signatures'])} signatures")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    if args.profile:  # a misspelt name would pass a bundle for any profile, and fail one that lists some
        load_profile(args.profile)
    root = parse_json(Path(args.root).read_bytes(), f"root metadata {args.root}")
    trust = TrustState(root, args.release_counter)
    print(f"ok  root: v{trust.root.version} verifies against its own {trust.root.root_threshold}-of-"
          f"{len(trust.root.root_keys)} root keys")
    with open(args.bundle, "rb") as f:
        _, m = verify_bundle(f, trust, datetime.now(timezone.utc), args.hardware_id, args.profile,
                             report=lambda msg: print(f"ok  {msg}"))
    print(f"{args.bundle}: {m.name} {m.version} release {m.release} passes every check")
    return 0


def profile_names(args: argparse.Namespace) -> list[str]:
    """``--profile a,b --profile c``: the device profiles named, in order."""
    return [name for item in args.profile or [] for name in item.split(",")]


def sign_model_dir(model_dir: str | os.PathLike[str], out: str | os.PathLike[str],
                   args: argparse.Namespace) -> Manifest:
    """Bundle and sign a built model directory from the ``add_signing_args`` options (``bundle`` and
    ``build --sign-key`` both end here)."""
    if args.release is None or not args.hardware_id:
        raise SigningError("a signed bundle needs --release N and at least one --hardware-id")
    m = build_bundle(model_dir, out, signing_keys(args), version=args.version, release=args.release,
                     hardware_ids=args.hardware_id, profiles=profile_names(args) or None,
                     expires_in=timedelta(days=args.expires_days))
    golden = f"{len(m.golden)} golden vectors" if m.golden else f"golden vectors in {GOLDEN_FILE}"
    print(f"wrote {out}: {m.name} {m.version} release {m.release}, {len(m.files)} payloads, {golden}, "
          f"expires {m.expires}")
    return m


def cmd_bundle(args: argparse.Namespace) -> int:
    source = Path(args.model)
    if source.is_dir():
        sign_model_dir(source, args.output, args)
        return 0
    from ..model import CuvilModel

    model = CuvilModel.load(source, **load_options(args))
    model.optimize(targets=parse_targets(args.targets), profiles=profile_names(args))
    with tempfile.TemporaryDirectory(prefix="cuvil-bundle-") as tmp:
        sign_model_dir(model.save(Path(tmp) / "model"), args.output, args)
    return 0


def add_signing_args(p: argparse.ArgumentParser) -> None:
    """``--sign-key``/``--keyring``/``--passphrase-env`` plus the release fields: shared by ``bundle``
    and by ``build --sign-key``."""
    add_key_args(p)
    p.add_argument("--version", default="0.1.0", help="semantic version of this release")
    p.add_argument("--release", type=int, help="monotonic release counter (required when signing)")
    p.add_argument("--hardware-id", action="append", help="hardware id it may install on (repeatable)")
    p.add_argument("--profile", action="append", metavar="NAME[,NAME...]",
                   help="device profiles it targets (repeatable); for a model file also the variants built: "
                        "only those the profiles need (default: what the model was built for, else any)")
    p.add_argument("--expires-days", type=float, default=30.0)


def register(sub: argparse._SubParsersAction) -> None:
    k = sub.add_parser("keys", help="signing keys and root metadata (init, add, rotate, list)")
    ks = k.add_subparsers(dest="keys_cmd", required=True)
    init = ks.add_parser("init", help="new keyring: root and release keys, root v1")
    init.add_argument("--root-keys", type=bounded(int, 1), default=3)
    init.add_argument("--root-threshold", type=bounded(int, 1), default=2)
    init.add_argument("--release-keys", type=bounded(int, 1), default=1)
    init.add_argument("--release-threshold", type=bounded(int, 1), default=1)
    add = ks.add_parser("add", help="delegate a new key (next root version)")
    add.add_argument("--role", choices=("root", "release"), default="release")
    rotate = ks.add_parser("rotate", help="revoke a key and delegate a fresh one (next root version)")
    rotate.add_argument("key_id", help="key id or unique prefix")
    rotate.add_argument("--no-replacement", action="store_true")
    ks.add_parser("list", help="show the current root: keys per role, thresholds, revoked keys")
    for p in (init, add, rotate, ks.choices["list"]):
        p.add_argument("keyring", help="keyring directory")
        add_passphrase_env(p)
    k.set_defaults(fn=cmd_keys)

    s = sub.add_parser("sign", help="countersign a bundle (threshold signing)")
    s.add_argument("bundle")
    add_key_args(s)
    s.set_defaults(fn=cmd_sign)

    v = sub.add_parser("verify", help="run every device-side check on a bundle and print each one")
    v.add_argument("bundle")
    v.add_argument("--root", required=True, help="signed root metadata (root.json)")
    v.add_argument("--hardware-id", required=True)
    v.add_argument("--profile")
    v.add_argument("--release-counter", type=int, default=0, help="the device's counter (rollback check)")
    v.set_defaults(fn=cmd_verify)

    b = sub.add_parser("bundle", help="model directory or ONNX/TFLite file -> signed bundle (.cvb)")
    b.add_argument("model", help="a built model directory or an ONNX or TFLite model file")
    b.add_argument("-o", "--output", required=True)
    add_targets(b, note="for a model file: ")
    add_input_shape(b)
    add_signing_args(b)
    b.set_defaults(fn=cmd_bundle)
