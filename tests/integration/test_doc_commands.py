"""docs/USAGE.md, "Serve on a device without a broker", run as written: its three marked shell blocks
(``<!-- doc-test: NAME -->`` before a fenced ``sh`` block) are read from the doc and run in a temporary
directory holding packaging/agent.local.toml as shipped. Nothing is substituted but the working directory
and the HTTP port (a free one, in the config and the curl commands, for the documented 8080): build, sign
and install a model; run the agent in the background with no broker; call it over HTTP with curl; read
/metrics; stop it with SIGINT (the docs' Ctrl-C), exit 0. The answer must be the one the doc shows and
what ``CuvilModel.predict`` gives for the same ONNX file.

Loopback only; waits are bounded hang guards, never timing assertions.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cuvil_edge import CuvilModel

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
USAGE = ROOT / "docs" / "USAGE.md"
LOCAL_CONFIG = ROOT / "packaging" / "agent.local.toml"
DOC_PORT = 8080
GUARD_S = 120.0  # hang guard for each wait: never expected to be reached
#: metric names docs/USAGE.md says /metrics shows
METRICS = ("cuvil_model_ready", "cuvil_requests_completed_total", "cuvil_inference_latency_seconds")


def doc_block(name: str, text: str | None = None) -> str:
    """The body of the one fenced block marked ``<!-- doc-test: name -->`` in docs/USAGE.md."""
    text = USAGE.read_text() if text is None else text
    marked = rf"<!-- doc-test: {re.escape(name)} -->\s*\n```(?:sh|bash)\n(.*?)^```"
    found = re.findall(marked, text, re.M | re.S)
    assert len(found) == 1, f"docs/USAGE.md: expected one block marked doc-test: {name}, found {len(found)}"
    return found[0]


def commands(block: str) -> list[str]:
    """One command per line (these blocks have no heredocs or continuations); comments and blanks out."""
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def on_port(command: str, port: int) -> str:
    """The documented command with the free port for the documented one."""
    changed = command.replace(f"127.0.0.1:{DOC_PORT}", f"127.0.0.1:{port}")
    assert changed != command, f"expected the documented address 127.0.0.1:{DOC_PORT} in {command!r}"
    return changed


def curl(command: str, cwd: Path, env: dict[str, str]) -> str:
    """Run a documented ``curl -s [-d DATA] URL`` and return what it prints: with curl when the machine
    has it, else the same request through urllib (the docs keep curl, the common tool)."""
    if shutil.which("curl", path=env["PATH"]):
        got = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                             timeout=GUARD_S)
        assert got.returncode == 0, f"{command}: exit {got.returncode}: {got.stderr}"
        return got.stdout
    args = shlex.split(command)
    assert args[0] == "curl" and set(a for a in args[1:] if a.startswith("-")) <= {"-s", "-d"}, args
    data = args[args.index("-d") + 1].encode() if "-d" in args else None
    url = next(a for a in args[1:] if "://" in a or a.startswith("127.0.0.1:"))
    url = url if "://" in url else f"http://{url}"
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=GUARD_S) as r:
        return r.read().decode()


def wait_ready(proc: subprocess.Popen, port: int, log: Path) -> None:
    end = time.monotonic() + GUARD_S
    while True:
        assert proc.poll() is None, f"the agent exited ({proc.returncode}):\n{log.read_text()}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=10) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        assert time.monotonic() < end, f"the agent never became ready:\n{log.read_text()}"
        time.sleep(0.2)


def test_doc_blocks_are_found():
    """The extraction itself, on a doc of its own."""
    text = ("x\n<!-- doc-test: a -->\n```sh\necho 1\n# note\necho 2\n```\n"
            "<!-- doc-test: b -->\n\n```sh\nls\n```\n")
    assert commands(doc_block("a", text)) == ["echo 1", "echo 2"]
    assert commands(doc_block("b", text)) == ["ls"]
    assert {"local-serving-build", "local-serving-run", "local-serving-call"} <= set(
        re.findall(r"<!-- doc-test: ([\w-]+) -->", USAGE.read_text()))


def test_local_serving_runs_as_documented(tmp_path):
    usage = USAGE.read_text()
    build, run, call = (doc_block(f"local-serving-{part}", usage) for part in ("build", "run", "call"))
    port = free_port()
    config = LOCAL_CONFIG.read_text()
    assert f"\nport = {DOC_PORT}" in config, "packaging/agent.local.toml no longer serves the documented port"
    (tmp_path / "packaging").mkdir()
    local = config.replace(f"\nport = {DOC_PORT}", f"\nport = {port}")
    (tmp_path / "packaging" / LOCAL_CONFIG.name).write_text(local)
    # the interpreter running the tests, and its cuvil-edge / cuvil-agent, first on PATH
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    # 1. build, sign, install: the whole block as one shell script, as a user pastes it
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", build], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"the build block failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    onnx_file = next((tmp_path / "out").glob("*.onnx"))
    name = onnx_file.stem  # the documented rule: the served name is the ONNX file's stem
    assert f"active: slot a: {name} " in done.stdout, done.stdout

    # 2. the agent, in the background, exactly as documented
    [daemon] = commands(run)
    log = tmp_path / "agent.stderr"
    with open(log, "w") as err:
        proc = subprocess.Popen(shlex.split(daemon), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                stderr=err)
    answers: dict[str, tuple[str, str]] = {}
    try:
        wait_ready(proc, port, log)
        # 3. the documented curl commands, on the free port
        for command in commands(call):
            url = next(w for w in shlex.split(command) if "127.0.0.1:" in w)
            answers[url.split(str(DOC_PORT), 1)[1]] = (command, curl(on_port(command, port), tmp_path, env))
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            code = proc.wait(GUARD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    agent_log = log.read_text()
    assert code == 0, f"the agent did not stop cleanly ({code}):\n{agent_log}"
    start = json.loads(next(line for line in agent_log.splitlines() if '"event": "start"' in line))
    assert start["http"] == ["127.0.0.1", port] and start["release"] == 1, start

    assert json.loads(answers["/v2/health/ready"][1]) == {"ready": True}
    meta = json.loads(answers[f"/v2/models/{name}"][1])
    assert meta["name"] == name and meta["release"] == 1, meta

    command, reply = answers[f"/v2/models/{name}/infer"]
    args = shlex.split(command)
    request = json.loads(args[args.index("-d") + 1])
    assert reply.strip() in usage, f"docs/USAGE.md shows another answer than the agent gives: {reply}"
    outputs = {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"])
               for o in json.loads(reply)["outputs"]}
    feeds = {i["name"]: np.array(i["data"], np.float32).reshape(i["shape"]) for i in request["inputs"]}
    model = CuvilModel.load(onnx_file)
    model.optimize()
    want = model.predict(feeds)
    assert set(outputs) == set(want)
    for k, v in want.items():
        np.testing.assert_array_equal(outputs[k], v, err_msg=k)

    samples = {s.name: s for family in text_string_to_metric_families(answers["/metrics"][1])
               for s in family.samples}
    for metric in METRICS:
        assert metric in usage, f"docs/USAGE.md no longer names {metric}"
        assert any(s == metric or s.startswith(metric + "_") for s in samples), f"/metrics lacks {metric}"
    assert samples["cuvil_model_ready"].labels == {"model": name} and samples["cuvil_model_ready"].value == 1
    assert samples["cuvil_requests_completed_total"].value >= 1
