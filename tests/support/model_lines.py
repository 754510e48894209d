"""Two model lines on one device (``A`` and ``B``, each signed as its own line) and a fleet config that
serves both: the world the model-line tests and the dashboard tests share."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from cuvil_agent.config import AgentConfig, ModelConfig
from cuvil_edge import CuvilModel
from cuvil_edge.signing import Keyring, build_bundle
from cuvil_edge.testing.broker import LocalBroker
from ota import Installer
from ota.roots import line_dirs
from tests.support.fleet import write_toml
from tests.support.multi_model import HW, mlp

FLEET = "lines"
A, B = "alpha", "beta"  # the signed manifest names and the model lines


class LinesWorld:
    """One small model per line, signed as releases 1-3 of its own line, and a template state directory
    per line with release 1 installed."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1,
                                 release_threshold=1)
        self.dirs = {name: CuvilModel.load(mlp(name, 2, 16, 32, 1, 8, seed)).optimize().save(base / name)
                     for name, seed in ((A, 5), (B, 6))}
        self.input = np.random.default_rng(7).standard_normal((2, 16)).astype(np.float32)
        self.bundles = {(name, r): self.bundle(name, r, self.ring) for name in (A, B) for r in (1, 2, 3)}
        self.templates = {}
        for name in (A, B):
            self.templates[name] = base / f"{name}-template"
            Installer(self.templates[name], HW, root=self.ring.root_envelope(), model=name).install(
                self.bundles[name, 1])

    def bundle(self, name: str, release: int, ring: Keyring, tag: str = "") -> Path:
        out = self.base / f"{name}-r{release}{tag}.cvb"
        build_bundle(self.dirs[name], out, ring.release_keys(), version=f"1.0.{release}", release=release,
                     hardware_ids=[HW])
        return out

    def device(self, workdir: Path, device: str, broker: LocalBroker, sockets: bool = False) -> Path:
        """A two-line device with release 1 on both lines; returns its agent.toml."""
        state = workdir / device
        for name, where in line_dirs(state, (A, B)).items():
            shutil.copytree(self.templates[name], where)
        root = workdir / "root1.json"
        root.write_text(json.dumps(self.ring.root_envelope(1)))
        models = tuple(ModelConfig(name, priority=p, socket=str(state / f"{name}.sock") if sockets else "")
                       for name, p in ((A, 1), (B, 2)))
        cfg = AgentConfig(device_id=device, fleet=FLEET, state_dir=str(state), trust_root=str(root),
                          hardware_id=HW, log_file=str(workdir / f"{device}.log"), telemetry_interval_s=0,
                          broker=broker.settings(), models=models)
        return write_toml(cfg, workdir / f"{device}.toml")
