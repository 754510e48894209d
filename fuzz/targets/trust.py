"""The device's trust as it loads it: ``trust.json`` (``TrustState.from_dict``, what the installer reads
at every change) and root rotation (``TrustState.update_root``, a chain of signed roots). Rotation links
are re-signed with every fixed root key, so mutations of a root's fields reach the chain logic (versions,
thresholds, delegation, revocation) and not only the signature check.

Input: JSON. An object is a ``trust.json`` as found on disk (its root's signatures kept as they are); a
non-empty list is ``[root v1, link, link, ...]`` of roots' signed parts, each signed here: v1 becomes the
trust state, the rest a chain to apply to it. The contract beyond the documented errors: a state that loads
saves and loads back to the same root and counter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..engine import Finding, Target
from ..mutators import json_mutator

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("ota.trust", "ota.metadata", "ota.crypto", "runtime_wasm.schema")


def setup() -> Callable[[bytes], None]:
    from ota import TrustState
    from ota.crypto import canonical_bytes, parse_json

    from ._signed import sign_root

    def saved_and_loaded(state: TrustState) -> None:
        again = TrustState.from_dict(parse_json(canonical_bytes(state.to_dict()), "trust state"))
        if (again.root, again.release_counter) != (state.root, state.release_counter):
            raise Finding("trust state changed through a save and a load")

    def one(data: bytes) -> None:
        doc: Any = parse_json(data, "fuzz input")
        if isinstance(doc, list):
            if not doc:
                return  # no root: nothing to load
            state = TrustState(sign_root(doc[0]))
            state.update_root([sign_root(link) for link in doc[1:]])
        else:
            state = TrustState.from_dict(doc)
        saved_and_loaded(state)

    return one


def target() -> Target:
    from ota.errors import VerificationError

    return Target("trust", "device", setup, (VerificationError,), INSTRUMENT, json_mutator)


def seeds() -> list[bytes]:
    """A ``trust.json`` as the installer writes it (provisioned with root v1, then rotated to v2), and
    chains of roots as ``Root.to_dict`` writes them: v1 alone, v1 to v3, and v1 to v2 revoking v1's key."""
    import json
    import tempfile
    from pathlib import Path

    from ota import Installer
    from ota.crypto import key_id

    from ._signed import HW, root_doc, sign_root

    with tempfile.TemporaryDirectory(prefix="fuzz-trust-") as tmp:
        installer = Installer(Path(tmp) / "state", HW, root=sign_root(root_doc(1)))
        provisioned = (Path(tmp) / "state" / "trust.json").read_bytes()
        installer.update_root([sign_root(root_doc(2))])
        rotated = (Path(tmp) / "state" / "trust.json").read_bytes()
    revoking = {**root_doc(2), "revoked": sorted(key_id(k) for k in root_doc(1)["root_keys"].values())}
    chains = [[root_doc(1)], [root_doc(v) for v in (1, 2, 3)], [root_doc(1), revoking]]
    return [provisioned, rotated, *(json.dumps(c, sort_keys=True).encode() for c in chains)]
