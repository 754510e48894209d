"""A real agent (real Mosquitto, real publisher, the agent's Unix-socket inference server) serving release 1
gets release 2 while a client asks continuously: every request is answered, the answers switch once from
release 1's outputs to release 2's (each checked against onnxruntime on the same input), and release 2's
module was compiled into the precompiled-module cache before the switch, and the worker its self-test
loaded is the one that serves it (no load after the switch). A release that fails its self-test never
interrupts serving.

No assertion is about time: waits are bounded hang guards, outcomes are answers, releases, cache entries
and the installer's steps.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_agent.config import AgentConfig
from cuvil_agent.serve import ModelHost, infer
from cuvil_edge import CuvilModel
from cuvil_edge.fleet.publisher import Publisher
from cuvil_edge.oracle import ort_session
from cuvil_edge.signing import Keyring, build_bundle, golden_vectors
from cuvil_edge.testing.broker import LocalBroker
from ota import Installer
from ota.errors import OtaError
from ota.golden import decode_vector, encode_vector
from runtime_wasm import RuntimePolicy
from runtime_wasm.cache import ModuleCache
from runtime_wasm.engine import EngineConfig
from runtime_wasm.loader import read_model_dir
from runtime_wasm.scheduler import Scheduler
from runtime_wasm.supervisor import ModelSource
from tests.support.fleet import AgentThreads, Watcher, wait_until

pytestmark = pytest.mark.integration
HW, FLEET = "test-device", "swap"
X = np.random.default_rng(11).standard_normal((2, 16)).astype(np.float32)
POLICY = RuntimePolicy(threads=1, deadline_ms=20_000.0)  # no deadline kill on a busy box


def scorer(release: int) -> onnx.ModelProto:
    """y = relu(x @ w) (+ b from release 2 on: another graph, so another module to compile), x [2, 16]."""
    rng = np.random.default_rng(100 + release)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"])]
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")]
    if release > 1:
        nodes.append(helper.make_node("Add", ["h", "b"], ["hb"]))
        inits.append(numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"))
    nodes.append(helper.make_node("Relu", [nodes[-1].output[0]], ["y"]))
    graph = helper.make_graph(nodes, f"scorer{release}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class SwapWorld:
    """Releases 1 and 2 (and a release 2 whose golden vector lies), signed; a device state with release 1
    installed; onnxruntime's answer for ``X`` per release; release 2's module cache key."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1,
                                 release_threshold=1)
        dirs = {r: CuvilModel.load(scorer(r)).optimize().save(base / f"scorer{r}") for r in (1, 2)}
        self.oracle = {r: ort_session(scorer(r)).run(None, {"x": X})[0] for r in (1, 2)}
        self.bundles = {r: self.bundle(dirs[r], r, f"release{r}.cvb") for r in (1, 2)}
        inputs, outputs = decode_vector(golden_vectors(dirs[2], count=1)[0])
        lying = [encode_vector(inputs, {k: v + 1.0 for k, v in outputs.items()})]
        self.broken = self.bundle(dirs[2], 2, "broken2.cvb", golden=lying)
        _, variant, wasm, _ = read_model_dir(dirs[2])
        self.key2 = ModuleCache(base / "unused").key(wasm, EngineConfig(variant.tier)) + ".cwasm"
        self.template = base / "template"
        Installer(self.template, HW, root=self.ring.root_envelope(), policy=POLICY).install(self.bundles[1])

    def bundle(self, model_dir: Path, release: int, name: str, **fields: Any) -> Path:
        build_bundle(model_dir, self.base / name, self.ring.release_keys(), version=f"1.0.{release}",
                     release=release, hardware_ids=[HW], **fields)
        return self.base / name


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> SwapWorld:
    return SwapWorld(tmp_path_factory.mktemp("swap"))


class Client:
    """Asks the agent's socket one request after the other until stopped: (release, y) per answer, and
    every error (none may happen)."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.answers: list[tuple[int, np.ndarray]] = []
        self.errors: list[Exception] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                release, out = infer(self.socket, {"x": X}, timeout_s=60)
                self.answers.append((release, out["y"]))
            except OtaError as exc:
                self.errors.append(exc)

    def __enter__(self) -> Client:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def count(self, release: int) -> int:
        return sum(r == release for r, _ in self.answers)


def run_update(world: SwapWorld, tmp_path: Path, bundle: Path, done: Callable[[Client, Watcher], object],
               on_step: Callable[[str], None], clients: list[Client]) -> None:
    """A device with release 1 in ``tmp_path / "state"``, served and asked continuously; ``bundle``
    published; returns once ``done`` holds (the client appended to ``clients`` as soon as it runs)."""
    state = tmp_path / "state"
    shutil.copytree(world.template, state)
    with LocalBroker(tmp_path / "broker") as broker:
        cfg = AgentConfig(device_id="dev0", fleet=FLEET, state_dir=str(state), hardware_id=HW,
                          socket=str(state / "infer.sock"), log_file=str(tmp_path / "agent.log"),
                          telemetry_interval_s=0, broker=broker.settings(), policy=POLICY)
        watcher = Watcher(broker.settings(), FLEET)
        agents = AgentThreads()
        publisher = Publisher(broker.settings(), FLEET, world.ring.release_keys(), tmp_path / "pub.json")
        try:
            agents.add(cfg, on_step=on_step)
            wait_until(lambda: Path(cfg.socket).exists(), "the inference socket")
            with Client(cfg.socket) as client:
                clients.append(client)
                wait_until(lambda: client.count(1) >= 3, "release 1 answering")
                publisher.start()
                publisher.publish(bundle, canary=100.0, halt_on=0.0)
                wait_until(lambda: done(client, watcher), "the update's outcome", timeout_s=120)
        finally:
            publisher.close()
            agents.close()
            watcher.close()


def test_release_2_takes_over_with_every_request_answered(world, tmp_path):
    cache = tmp_path / "state" / "cache"
    seen: dict[str, tuple[set[str], int]] = {}  # step -> (cache entries, answers so far)
    clients: list[Client] = []

    def on_step(name: str) -> None:
        seen[name] = ({p.name for p in cache.glob("*.cwasm")}, len(clients[0].answers) if clients else 0)

    run_update(world, tmp_path, world.bundles[2], lambda c, _: c.count(2) >= 5, on_step, clients)
    client = clients[0]
    assert client.errors == []  # every request was answered, across download, install and switch
    releases = [r for r, _ in client.answers]
    switch = releases.index(2)
    assert set(releases[:switch]) == {1} and set(releases[switch:]) == {2}  # one switch, never back
    for release, y in client.answers:  # each answer is its release's, as onnxruntime computes it
        np.testing.assert_allclose(y, world.oracle[release], rtol=1e-5, atol=1e-5)
    assert not np.allclose(world.oracle[1], world.oracle[2])  # the two releases can be told apart

    # compiled before the switch: absent when verified, in the cache at "precompiled" and at the switch,
    # and the serving worker compiled nothing more (it loaded that entry)
    steps = list(seen)
    assert steps.index("precompiled") < steps.index("pointer_switched")
    assert world.key2 not in seen["verified"][0]
    assert world.key2 in seen["precompiled"][0]
    assert seen["pointer_switched"][0] == {p.name for p in cache.glob("*.cwasm")}
    # release 1 kept answering while release 2 was installed (verified .. switched)
    assert seen["pointer_switched"][1] > seen["verified"][1]
    assert all(r == 1 for r, _ in client.answers[:seen["pointer_switched"][1]])


def test_release_failing_its_self_test_never_interrupts_serving(world, tmp_path):
    clients: list[Client] = []
    steps: list[str] = []

    at_failure: list[int] = []

    def failed(client: Client, watcher: Watcher) -> bool:
        """Reported failed, and release 1 answered three more requests since."""
        if not at_failure and any(m["state"] == "failed" for m in watcher.messages):
            at_failure.append(len(client.answers))
        return bool(at_failure) and len(client.answers) >= at_failure[0] + 3

    run_update(world, tmp_path, world.broken, failed, steps.append, clients)
    client = clients[0]
    assert "precompiled" in steps and "selftested" not in steps and "pointer_switched" not in steps
    assert client.errors == [] and {r for r, _ in client.answers} == {1}
    for _, y in client.answers:
        np.testing.assert_allclose(y, world.oracle[1], rtol=1e-5, atol=1e-5)


def _device(world: SwapWorld, tmp_path: Path, policy: RuntimePolicy = POLICY) -> Installer:
    state = tmp_path / "state"
    shutil.copytree(world.template, state)
    return Installer(state, HW, policy=policy, keep_warm=True)


def test_the_install_self_test_worker_serves_release_2_without_a_new_load(world, tmp_path):
    """The worker that loaded release 2 and passed its golden vectors is the one that serves it: the
    scheduler starts none (same process), and it answers release 2's outputs."""
    installer = _device(world, tmp_path)
    installer.install(world.bundles[2])
    warm = installer.take_warm(installer.active_dir())
    assert warm is not None and warm.pid is not None
    assert installer.take_warm(installer.active_dir()) is None  # taken once
    active = installer.active_model()
    source = ModelSource.from_dir(active.directory, cache_dir=str(active.cache_dir))
    with Scheduler(source, POLICY, warm=warm) as scheduler:
        assert scheduler.pids == (warm.pid,)
        np.testing.assert_allclose(scheduler.predict({"x": X})["y"], world.oracle[2], rtol=1e-5, atol=1e-5)
    assert warm.pid is None  # closed with the scheduler


def test_a_warm_worker_that_does_not_fit_the_policy_is_closed_and_replaced(world, tmp_path):
    installer = _device(world, tmp_path)
    installer.install(world.bundles[2])
    warm = installer.take_warm(installer.active_dir())
    assert warm is not None
    pid = warm.pid
    active = installer.active_model()
    source = ModelSource.from_dir(active.directory, cache_dir=str(active.cache_dir))
    with Scheduler(source, replace(POLICY, max_batch_size=2), warm=warm) as scheduler:  # other slots
        assert warm.pid is None and scheduler.pids[0] not in (None, pid)
        np.testing.assert_allclose(scheduler.predict({"x": X})["y"], world.oracle[2], rtol=1e-5, atol=1e-5)


def test_the_host_takes_the_warm_worker_and_a_failed_install_keeps_none(world, tmp_path):
    installer = _device(world, tmp_path)
    host = ModelHost(installer, POLICY)
    try:
        with pytest.raises(OtaError):
            installer.install(world.broken)  # its golden vector lies: the self-test fails
        assert installer.take_warm(installer.active_dir()) is None
        installer.install(world.bundles[2])
        slot = installer.active_dir()
        host.reload()
        assert installer.take_warm(slot) is None  # the host took it
        release, out = host.predict({"x": X})
        assert release == 2
        np.testing.assert_allclose(out["y"], world.oracle[2], rtol=1e-5, atol=1e-5)
    finally:
        host.close()
        installer.close()
