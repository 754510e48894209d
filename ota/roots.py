"""One device, one root: the trust of every model line of a multi-model device together. Each line has its
own state directory (``<state_dir>/models/<name>``: its slots and release counter), but a key revoked for
one line is revoked for all, so the lines' roots rotate together (``update_roots``) and are brought level
after a rotation a crash cut short (``align_roots``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .crypto import parse_json
from .errors import BrokenChain
from .installer import TRUST_FILE, Installer
from .metadata import Root, parse_envelope
from .trust import TrustState

MODELS_DIR = "models"  # <state_dir>/models/<name>: one state directory per model line of a device


def line_dirs(state_dir: str | os.PathLike[str], models: Iterable[str]) -> dict[str, Path]:
    """Each model line's state directory on a multi-model device (``<state_dir>/models/<name>``)."""
    return {m: Path(state_dir) / MODELS_DIR / m for m in models}


def trusted_root(state_dirs: Iterable[Path]) -> dict[str, Any] | None:
    """The newest root any of these state directories trusts (None when none is provisioned): a model line
    added to a device is provisioned with the device's root, never an older one from its config."""
    newest: TrustState | None = None
    for d in state_dirs:
        path = Path(d) / TRUST_FILE
        if path.exists():
            trust = TrustState.from_dict(parse_json(path.read_bytes(), f"trust state {path}"))
            if newest is None or trust.root.version > newest.root.version:
                newest = trust
    return newest.root_envelope if newest else None


def _root_version(link: Mapping[str, Any]) -> int:
    return Root.from_dict(parse_envelope(link, "root metadata")[0]).version


@contextlib.contextmanager
def _all_locked(installers: Sequence[Installer]) -> Iterator[list[TrustState]]:
    """Every line's lock, in the given order, and each line's trust state read from disk under it."""
    with contextlib.ExitStack() as held:
        yield [held.enter_context(inst.changing_trust()) for inst in installers]


def update_roots(installers: Sequence[Installer], chain: Sequence[Mapping[str, Any]]) -> int:
    """Rotate the root of every model line of one device (one root per device, so a key revoked for one
    line is revoked for all). Under all the lines' locks each line's part of ``chain`` (the links newer
    than its root) is checked on a copy first, so one bad link changes no line; then the links are saved
    one version at a time across the lines, so a crash leaves them at most one version apart, which
    ``align_roots`` closes. Returns the device's root version."""
    versions = [_root_version(link) for link in chain]
    with _all_locked(installers) as trusts:
        for trust in trusts:
            trial = TrustState(trust.root_envelope, trust.release_counter, trust.config)
            trial.update_root([link for link, v in zip(chain, versions) if v > trust.root.version])
        for link, version in zip(chain, versions):
            for inst, trust in zip(installers, trusts):
                if version > trust.root.version:
                    trust.update_root([link])
                    inst.save_trust(trust)
        return _align(installers, trusts)


def align_roots(installers: Sequence[Installer]) -> int:
    """Bring every model line up to the newest root any of them trusts (a rotation a crash cut short, a
    line restored from an old backup); a line's trust never goes back. Returns the device's root
    version; ``BrokenChain`` when a line is more than one version behind (the links between are not on
    the device: rotate it with ``cuvil-agent trust --root``, each missing version in order)."""
    with _all_locked(installers) as trusts:
        return _align(installers, trusts)


def _align(installers: Sequence[Installer], trusts: Sequence[TrustState]) -> int:
    newest = max(trusts, key=lambda t: t.root.version)
    for inst, trust in zip(installers, trusts):
        if trust.root.version == newest.root.version:
            continue
        if trust.root.version + 1 != newest.root.version:
            raise BrokenChain(f"{inst.state_dir} trusts root v{trust.root.version}, another model line of "
                              f"this device v{newest.root.version}: give the versions between with "
                              "cuvil-agent trust --root")
        trust.update_root([newest.root_envelope])  # the very next link, checked like any other
        inst.save_trust(trust)
    return newest.root.version
