"""Hostile remote input, for real: the fuzzing harnesses (``fuzz/``) replayed over their checked-in
corpora and regression inputs and run under atheris for a few seconds each; every regression input of the
HTTP API and the download client, one test each, asserting the typed answer; and a serving agent under
a hostile HTTP client (every harness input, on real sockets) while a normal client keeps being served.
Waits are bounded hang guards; nothing asserts a timing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

from cuvil_agent.http_client import InferenceClient
from fuzz.engine import REGRESSIONS, ROOT, inputs, replay
from fuzz.targets import all_targets
from fuzz.targets.http_api import exchange, serve
from fuzz.targets.http_download import LENGTH, OFFSET, HostileServer
from ota.config import HttpDownloadLimits
from ota.errors import HttpUnavailable, LengthMismatch, RedirectRefused
from ota.http_download import open_body

pytestmark = pytest.mark.integration
TARGETS = all_targets()
#: seconds of coverage-guided fuzzing per target in CI (the corpus replay is the regression check; this
#: shows the harness runs under atheris and finds nothing new in a short run)
CI_FUZZ_S = 8
#: HTTP API regression input -> (status, error type in the JSON body; None: a HEAD answer has no body)
HTTP_API_CASES = {
    "target-open-bracket": (400, "BadInferenceRequest"),
    "head-infer": (405, None),
    "head-over-max-body": (413, None),
    "infer-400-digit-parameter": (400, "BadInferenceRequest"),
}
#: download regression input -> the error the download client raises (the agent then falls back to MQTT)
DOWNLOAD_CASES = {
    "redirect-open-bracket": RedirectRefused,
    "redirect-relative-open-bracket": RedirectRefused,
    "redirect-port-past-65535": RedirectRefused,
    "content-length-4000-digits": LengthMismatch,
    "content-range-5000-digits": LengthMismatch,
    "chunk-size-negative-20-digits": HttpUnavailable,  # http.client's OverflowError in the body's read
}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_harness_replays_its_corpus_and_regressions_without_findings(name):
    target = TARGETS[name]
    paths = inputs(target)
    assert paths, f"{name} has no checked-in inputs"
    result = replay(target, paths)
    assert result.inputs == len(paths) and not result.findings, result.findings


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_harness_runs_under_atheris_without_findings(name, tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "fuzz.run", "--seconds", str(CI_FUZZ_S), "--json", str(out),
                           "--work", str(tmp_path), name], cwd=ROOT.parent, capture_output=True, text=True,
                          timeout=CI_FUZZ_S + 300)
    log = tmp_path / name / "last.log"
    assert proc.returncode == 0, proc.stdout + proc.stderr + (log.read_text()[-3000:] if log.exists() else "")
    (report,) = json.loads(out.read_text())
    assert report["findings"] == 0 and report["executions"] > 0 and report["cov"] > 0, report


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    server, host, _ = serve(tmp_path_factory.mktemp("api"))
    yield server
    server.close()
    host.close()


def test_every_http_api_regression_input_has_its_test():
    assert sorted(p.name for p in (REGRESSIONS / "http_api").iterdir()) == sorted(HTTP_API_CASES)


@pytest.mark.parametrize("name", sorted(HTTP_API_CASES))
def test_http_api_regression_inputs_get_their_typed_answer(api, name):
    status, kind = HTTP_API_CASES[name]
    reply = exchange(api.address, (REGRESSIONS / "http_api" / name).read_bytes())
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), reply[:300]
    if kind is None:
        assert body == b""  # the head alone, as HEAD wants
    else:
        assert json.loads(body)["type"] == kind
    live = exchange(api.address, b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
    assert live.startswith(b"HTTP/1.1 200")


def test_every_download_regression_input_has_its_test():
    assert sorted(p.name for p in (REGRESSIONS / "http_download").iterdir()) == sorted(DOWNLOAD_CASES)


@pytest.mark.parametrize("name", sorted(DOWNLOAD_CASES))
def test_download_regression_inputs_raise_the_named_refusal(name):
    server = HostileServer()
    server.answer = (REGRESSIONS / "http_download" / name).read_bytes()
    offset = OFFSET if b" 206 " in server.answer.split(b"\r\n", 1)[0] else 0
    with pytest.raises(DOWNLOAD_CASES[name]):
        body = open_body(f"http://127.0.0.1:{server.port}/bundle.cvb", offset, LENGTH,
                         HttpDownloadLimits(connect_timeout_s=5, read_timeout_s=5, max_redirects=2))
        body.read_exact(LENGTH - offset, 5.0)


def test_served_model_answers_normal_clients_while_a_hostile_one_sends_every_harness_input(api):
    """Every corpus and regression input of the HTTP API harness, and every OIP body as an infer request,
    on its own connection, while another thread infers: each hostile connection gets an HTTP/1.1 answer,
    none a 500; every normal request gets its model's answer."""
    hostile = [p.read_bytes() for p in inputs(TARGETS["http_api"])]
    for p in inputs(TARGETS["oip_request"]):
        body = p.read_bytes().replace(b"\0", b"")
        head = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body)
        hostile.append(head + body)
    answers: list[bytes] = []
    done = threading.Event()

    def attack() -> None:
        try:
            answers.extend(exchange(api.address, data) for data in hostile)
        finally:
            done.set()

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    x, ids = np.arange(4, dtype=np.float32), np.array([3, 9], np.int64)
    served = 0
    host, port = api.address
    with InferenceClient(f"http://{host}:{port}", timeout_s=30) as client:
        while not done.is_set() or served < 3:
            result = client.infer("m", {"x": x, "ids": ids})
            np.testing.assert_array_equal(result.outputs["y"], x)
            np.testing.assert_array_equal(result.outputs["z"], ids)
            served += 1
    attacker.join(60)
    assert len(answers) == len(hostile)
    statuses = [re.match(rb"HTTP/1\.1 ([0-9]{3}) ", a) for a in answers]
    assert all(statuses), [a[:80] for a, m in zip(answers, statuses) if not m]
    codes = sorted({int(m[1]) for m in statuses if m})
    assert 500 not in codes and all(c < 500 or c == 503 for c in codes), codes
    assert any(400 <= c < 500 for c in codes)

