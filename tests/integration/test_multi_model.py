"""Two real compiled models of different priority on one device, served over the HTTP API behind one
device-wide admission controller (``runtime_wasm.admission``), under a bounded load on loopback.

Issue 15, must-show 1: the high-priority model is never shed and its p95 stays within its SLO while the
low-priority one is shed (503 ``Overloaded``, answered at once, never a hang) and batched within what it
is admitted; /metrics scraped
during and after the load match the client's counts per model. Also: a release signed for one model line
cannot be installed as another (``WrongModel``).

Timing is never asserted against a clock: the SLO is generous (a hang guard more than a benchmark), and
"never shed" follows from the admission budget (the high-priority clients alone cannot reach its ceiling).
"""

from __future__ import annotations

import http.client
import json
import shutil
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cuvil_agent.config import HttpSettings
from cuvil_agent.http_api import HttpApiServer
from cuvil_agent.serve import ModelHost, ModelRegistry
from cuvil_edge.signing import build_bundle
from ota import Installer
from ota.errors import WrongModel
from runtime_wasm import DeviceAdmission, RuntimePolicy, divide_threads
from tests.support.multi_model import HIGH, HW, LOW, MultiWorld

pytestmark = pytest.mark.integration
GUARD_S = 60.0  # hang guard for every client socket wait: never expected to be reached
HIGH_PRIORITY, LOW_PRIORITY = 10, 1
#: generous on purpose: a loaded CI box must not fail it, an unprotected high-priority queue still would
HIGH_POLICY = RuntimePolicy(p95_budget_ms=3000, deadline_ms=20_000, max_queue_depth=16)
LOW_POLICY = RuntimePolicy(p95_budget_ms=500, deadline_ms=20_000, max_batch_size=4, batch_window_ms=20,
                           max_queue_depth=64)
#: the high priority may fill 8 pending requests, the low one only 8 - 6 = 2 (one level below)
ADMISSION = (8, 6)
HIGH_CLIENTS, LOW_CLIENTS, REQUESTS_PER_CLIENT = 2, 8, 12
SETTINGS = HttpSettings(port=0, max_connections=32, header_timeout_s=5.0, body_timeout_s=10.0)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> MultiWorld:
    return MultiWorld(tmp_path_factory.mktemp("multi"))


class Device:
    """Both lines served as a multi-model agent serves them: threads from one core budget, one admission
    controller, one registry behind the HTTP API."""

    def __init__(self, world: MultiWorld, base: Path) -> None:
        self.admission = DeviceAdmission(*ADMISSION)
        lines = ((HIGH, HIGH_PRIORITY, HIGH_POLICY), (LOW, LOW_PRIORITY, LOW_POLICY))
        threads = divide_threads([(prio, policy.threads) for _, prio, policy in lines], cores=2)
        self.models = ModelRegistry()
        self.hosts = []
        for (name, prio, policy), n in zip(lines, threads):
            installer = Installer(shutil.copytree(world.templates[name], base / name), HW, model=name)
            policy = replace(policy, threads=n)
            host = ModelHost(installer, policy, name=name, admission=self.admission.gate(prio))
            self.models.add(host, prio)
            self.hosts.append(host)
        self.server = HttpApiServer(self.models, SETTINGS)
        self.host, self.port = self.server.address  # type: ignore[misc]

    def close(self) -> None:
        self.server.close()
        for host in self.hosts:
            host.close()


@dataclass
class Tally:
    """What one model's clients saw: status codes, latencies of answers, error types."""

    codes: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    mismatches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def infer_body(world: MultiWorld, name: str) -> bytes:
    x = world.inputs[name]
    return json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()


def client(device: Device, world: MultiWorld, name: str, tally: Tally) -> None:
    """A bounded loop of requests on one keep-alive connection; every wait bounded by ``GUARD_S``."""
    body = infer_body(world, name)
    conn = http.client.HTTPConnection(device.host, device.port, timeout=GUARD_S)
    try:
        for _ in range(REQUESTS_PER_CLIENT):
            conn.request("POST", f"/v2/models/{name}/infer", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            doc = json.loads(response.read())
            with tally.lock:
                tally.codes[response.status] = tally.codes.get(response.status, 0) + 1
                if response.status == 200:
                    y = np.float32(doc["outputs"][0]["data"]).reshape(world.expected[name].shape)
                    tally.mismatches += not np.allclose(y, world.expected[name], rtol=1e-4, atol=1e-4)
                elif response.status == 503:
                    tally.errors.append(f"{doc.get('error', '')}|{response.getheader('Retry-After')}")
    finally:
        conn.close()


def scrape(device: Device) -> dict[tuple[str, frozenset], float]:
    conn = http.client.HTTPConnection(device.host, device.port, timeout=GUARD_S)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        assert response.status == 200
        text = response.read().decode()
    finally:
        conn.close()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def metric(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def shed_total(samples: dict[tuple[str, frozenset], float], model: str) -> float:
    return sum(metric(samples, "cuvil_requests_shed_total", model=model, reason=r)
               for r in ("queue_full", "thermal", "priority"))


def test_high_priority_keeps_its_slo_while_low_priority_is_shed_and_metrics_match(world, tmp_path):
    device = Device(world, tmp_path)
    try:
        tallies = {HIGH: Tally(), LOW: Tally()}
        threads = [threading.Thread(target=client, args=(device, world, name, tallies[name]), daemon=True)
                   for name, n in ((LOW, LOW_CLIENTS), (HIGH, HIGH_CLIENTS)) for _ in range(n)]
        for t in threads:
            t.start()
        during = scrape(device)  # while the clients run
        for t in threads:
            t.join(GUARD_S * REQUESTS_PER_CLIENT)
        assert not any(t.is_alive() for t in threads), "a client hung past its guard"
        after = scrape(device)
    finally:
        device.close()

    high, low = tallies[HIGH], tallies[LOW]
    # every request got an answer: the high-priority model all of them, right
    assert high.codes == {200: HIGH_CLIENTS * REQUESTS_PER_CLIENT} and high.mismatches == 0
    assert set(low.codes) <= {200, 503} and sum(low.codes.values()) == LOW_CLIENTS * REQUESTS_PER_CLIENT
    assert low.mismatches == 0 and low.codes.get(200, 0) > 0  # shed, not starved
    # the low priority was shed at its admission ceiling (8 clients against 2 slots): 503 Overloaded with
    # a retry hint, answered without queueing or computing (the metrics below: shed, never completed)
    assert low.codes.get(503, 0) > 0
    assert metric(after, "cuvil_requests_shed_total", model=LOW, reason="priority") == low.codes[503]
    assert all(e.startswith("Overloaded") and e.endswith("|1") for e in low.errors), low.errors[:3]
    assert metric(after, "cuvil_requests_shed_total", model=HIGH, reason="priority") == 0
    # /metrics match the clients' counts per model
    for name, tally in tallies.items():
        ok, shed = tally.codes.get(200, 0), tally.codes.get(503, 0)
        assert metric(after, "cuvil_requests_completed_total", model=name) == ok
        assert shed_total(after, name) == shed
        assert metric(after, "cuvil_requests_failed_total", model=name, error="Overloaded") == shed
        assert metric(after, "cuvil_http_requests_total", model=name, endpoint="infer", code="200") == ok
        assert metric(after, "cuvil_http_requests_total", model=name, endpoint="infer", code="503") == shed
        assert sum(v for (n, labels), v in after.items()
                   if n == "cuvil_inference_latency_seconds_count" and ("model", name) in labels) == ok
        # the scrape during the load saw a prefix of the same counts
        assert metric(during, "cuvil_requests_completed_total", model=name) <= ok
        assert shed_total(during, name) <= shed
    assert metric(after, "cuvil_model_priority", model=HIGH) == HIGH_PRIORITY
    assert metric(after, "cuvil_model_priority", model=LOW) == LOW_PRIORITY
    assert device.admission.pending == 0  # every admitted request gave its slot back
    assert device.admission.shed[HIGH_PRIORITY] == 0
    assert device.admission.shed[LOW_PRIORITY] == metric(after, "cuvil_requests_shed_total", model=LOW,
                                                         reason="priority")


def test_a_release_signed_for_one_model_line_is_refused_on_another(world, tmp_path):
    """The attack: model A's validly signed bundle offered on model B's line (release 2 > B's counter)."""
    installer = Installer(shutil.copytree(world.templates[HIGH], tmp_path / HIGH), HW, model=HIGH)
    before = installer.active_manifest()
    impostor = tmp_path / "impostor.cvb"
    build_bundle(world.models[LOW].save(tmp_path / "low2"), impostor, world.ring.release_keys(),
                 version="2.0.0", release=2, hardware_ids=[HW])
    with pytest.raises(WrongModel, match=f"signed for model '{LOW}'"):
        installer.install(impostor)
    after = installer.active_manifest()
    assert (after.name, after.release) == (before.name, before.release) == (HIGH, 1)
    assert installer.trust.release_counter == 1
    # the same bundle is fine on its own line
    own = Installer(shutil.copytree(world.templates[LOW], tmp_path / LOW), HW, model=LOW)
    assert own.install(impostor).release == 2
