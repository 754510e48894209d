"""The spin model: a hand-written module that doubles its input except on ``SENTINEL``, where it loops
until its deadline; ``SpinWorld`` signs and installs it, for the tests of a hung model's serving."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from cuvil_edge.signing import Keyring, build_bundle
from ota import Installer
from ota.golden import encode_vector
from tests.support.install import HW, wat_model

X = np.float32([0, 1, 2, 3])  # the golden input: x[0] is not the sentinel
SENTINEL = np.float32([7, 0, 0, 0])
#: y = 2 x, except that it spins forever when x[0] == 7 (x: f32[4] at arena 2048, y at 2064)
SPIN_RUN = """(func (export "run")
  (if (f32.eq (f32.load (i32.const 2048)) (f32.const 7)) (then (loop $spin (br $spin))))
  (v128.store (i32.const 2064) (f32x4.mul (v128.load (i32.const 2048)) (f32x4.splat (f32.const 2)))))"""


class SpinWorld:
    """A keyring, the spin model signed into a bundle (golden vectors avoid the sentinel) and a template
    device state with it installed as release 1 (so it passed the installer's self-test)."""

    def __init__(self, base: Path) -> None:
        self.ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1,
                                 release_threshold=1)
        bundle = base / "spin.cvb"
        build_bundle(wat_model(base / "spin", SPIN_RUN), bundle, self.ring.release_keys(), version="1.0.1",
                     release=1, hardware_ids=[HW], golden=[encode_vector({"x": X}, {"y": 2 * X})])
        self.template = base / "template"
        Installer(self.template, HW, root=self.ring.root_envelope()).install(bundle)

    def state(self, where: Path) -> Path:
        return Path(shutil.copytree(self.template, where))
