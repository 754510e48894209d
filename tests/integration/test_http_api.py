"""The device's HTTP inference API against the Open Inference Protocol (KServe v2) as documented, spoken
with raw HTTP (``http.client`` and sockets, not our own client) to a real server serving a real compiled
model (MatMul + Relu + an int64 Gather + ArgMax: FP32 and INT64 tensors both ways), signed and
installed, in supervised workers. Hostile clients (malformed, oversize, slow-loris, too many) each get a
clear 4xx/503 while normal clients keep being served; /metrics matches what the client counted.

No assertion is about time: waits are bounded hang guards, outcomes are status codes and counts.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from prometheus_client.parser import text_string_to_metric_families

from cuvil_agent.agent import Agent
from cuvil_agent.config import AgentConfig, HttpSettings, load_agent_config
from cuvil_agent.http_api import HttpApiServer
from cuvil_agent.http_client import InferenceClient
from cuvil_agent.log import JsonLog
from cuvil_agent.serve import ModelHost, ModelRegistry, infer
from cuvil_edge import CuvilModel
from cuvil_edge.signing import Keyring, build_bundle
from cuvil_edge.testing.broker import LocalBroker
from ota import Installer
from ota.errors import CannotListen, InferenceRefused
from runtime_wasm import RuntimePolicy
from runtime_wasm.counts import SERVING_COUNTS
from tests.support.fleet import write_toml
from tests.support.http import GUARD_S, call
from tests.support.spin_model import SENTINEL, SpinWorld

pytestmark = pytest.mark.integration
HW = "test-device"
SETTINGS = HttpSettings(port=0, max_connections=8, header_timeout_s=2.0, body_timeout_s=10.0,
                        max_header_bytes=4096, max_body_bytes=64 << 10)
SPIN_POLICY = RuntimePolicy(deadline_ms=8000, max_queue_depth=1)
RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 16)).astype(np.float32)
IDS = np.array([3, 9], np.int64)


def scorer_onnx() -> Any:
    """y = relu(x @ w) + table[ids] (FP32 [2, 8]) and best = argmax(y, 1) (INT64 [2])."""
    rng = np.random.default_rng(3)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gather", ["table", "ids"], ["e"]), helper.make_node("Add", ["r", "e"], ["y"]),
         helper.make_node("ArgMax", ["y"], ["best"], axis=1, keepdims=0)], "scorer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("best", TensorProto.INT64, [2])],
        [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "table")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class ApiWorld:
    """The compiled scorer (kept for its own ``predict``), signed and installed as release 1, and the
    spin model (loops on ``SENTINEL`` until its deadline) installed beside it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.model = CuvilModel.load(scorer_onnx()).optimize()
        model_dir = self.model.save(base / "scorer")
        ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1, release_threshold=1)
        build_bundle(model_dir, base / "scorer.cvb", ring.release_keys(), version="1.0.1", release=1,
                     hardware_ids=[HW])
        self.scorer_state = base / "scorer-state"
        Installer(self.scorer_state, HW, root=ring.root_envelope()).install(base / "scorer.cvb")
        self.spin = SpinWorld(base / "spin")
        self.expected = self.model.predict({"x": X, "ids": IDS})


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> ApiWorld:
    return ApiWorld(tmp_path_factory.mktemp("http"))


class Served:
    """Two models with priorities behind one registry and a server on an ephemeral loopback port."""

    def __init__(self, world: ApiWorld, base: Path) -> None:
        scorer = Installer(shutil.copytree(world.scorer_state, base / "scorer"), HW)
        spin = Installer(world.spin.state(base / "spin"), HW)
        self.scorer = ModelHost(scorer, RuntimePolicy(max_input_age_ms=60_000), name="scorer")
        self.spin = ModelHost(spin, SPIN_POLICY, name="spin")
        self.models = ModelRegistry()
        self.models.add(self.scorer, priority=10)
        self.models.add(self.spin, priority=1)
        self.server = HttpApiServer(self.models, SETTINGS)
        self.host, self.port = self.server.address  # type: ignore[misc]
        self.expected = world.expected

    def close(self) -> None:
        self.server.close()
        self.scorer.close()
        self.spin.close()


@pytest.fixture(scope="module")
def served(world, tmp_path_factory):
    s = Served(world, tmp_path_factory.mktemp("served"))
    yield s
    s.close()


# -- raw HTTP helpers ---------------------------------------------------------------------------------


def post_json(served: Served, model: str, doc: Any) -> tuple[int, dict[str, str], Any]:
    status, headers, body = call(served, "POST", f"/v2/models/{model}/infer", json.dumps(doc).encode(),
                                 {"Content-Type": "application/json"})
    return status, headers, json.loads(body)


def infer_doc(x: Any = None, ids: Any = None, **extra: Any) -> dict[str, Any]:
    """A request as the protocol documents it: flat row-major data unless given otherwise."""
    return {"inputs": [
        {"name": "x", "shape": [2, 16], "datatype": "FP32", "data": X.ravel().tolist() if x is None else x},
        {"name": "ids", "shape": [2], "datatype": "INT64", "data": IDS.tolist() if ids is None else ids}],
        **extra}


def raw_exchange(served: Served, data: bytes) -> bytes:
    """Send bytes on a fresh connection and read until the server closes it (or a reply is complete)."""
    with socket.create_connection((served.host, served.port), timeout=GUARD_S) as s:
        s.sendall(data)
        return read_all(s)


def read_all(s: socket.socket) -> bytes:
    out = bytearray()
    while chunk := s.recv(1 << 16):
        out += chunk
    return bytes(out)


def status_of(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


def still_serving(served: Served) -> None:
    status, _, doc = post_json(served, "scorer", infer_doc())
    assert status == 200, doc
    np.testing.assert_array_equal(np.float32(doc["outputs"][0]["data"]).reshape(2, 8), served.expected["y"])


def scrape(served: Served) -> dict[tuple[str, frozenset], float]:
    """/metrics parsed by prometheus-client's own parser: {(sample name, labels): value}."""
    status, headers, body = call(served, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def metric(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def eventually(check: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + GUARD_S
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


# -- health and metadata ------------------------------------------------------------------------------
def test_health_server_and_model_metadata_follow_the_protocol(world, served):
    assert call(served, "GET", "/v2/health/live")[0] == 200
    assert call(served, "GET", "/v2/health/ready")[0] == 200
    status, _, body = call(served, "GET", "/v2")
    assert status == 200 and "binary_tensor_data" in json.loads(body)["extensions"]
    status, headers, body = call(served, "GET", "/v2/models/scorer")
    meta = json.loads(body)
    assert status == 200 and headers["content-type"] == "application/json"
    assert meta["name"] == "scorer" and meta["versions"] == ["1"] and meta["platform"]
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [2, 16]},
                              {"name": "ids", "datatype": "INT64", "shape": [2]}]
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [2, 8]},
                               {"name": "best", "datatype": "INT64", "shape": [2]}]
    assert meta["release"] == 1 and meta["version"] == "1.0.1"
    assert meta["variant"] in {v.name for v in world.model.spec.variants}
    assert call(served, "GET", "/v2/models/scorer/versions/1")[0] == 200
    assert call(served, "GET", "/v2/models/scorer/ready")[0] == 200
    assert call(served, "GET", "/v2/models/spin/ready")[0] == 200
    for path in ("/v2/models/nope", "/v2/models/nope/ready", "/v2/models/scorer/versions/2",
                 "/v2/models/scorer/versions/2/ready", "/v2/nothing"):
        status, _, body = call(served, "GET", path)
        assert status == 404 and json.loads(body)["error"], path


# -- the protocol's own JSON schemas ------------------------------------------------------------------
def _obj(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": props}


def _array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


_STR, _PARAMETERS, _SHAPE = {"type": "string"}, {"type": "object"}, _array({"type": "integer"})
_TENSOR = {"name": _STR, "shape": _SHAPE, "datatype": _STR, "parameters": _PARAMETERS,
           "data": _ref("tensor_data")}
#: the HTTP/REST objects of the Open Inference Protocol as its OpenAPI file defines them (KServe,
#: docs/predict-api/v2/rest_predict_v2.yaml: components.schemas), transcribed as JSON Schema: what any
#: compliant client may rely on, independent of our client and server code
OIP_DEFS: dict[str, Any] = {
    "tensor_data": _array({"anyOf": [_ref("tensor_data"), {"type": "number"}, _STR, {"type": "boolean"}]}),
    "metadata_server_response": _obj(["name", "version", "extensions"], name=_STR, version=_STR,
                                     extensions=_array(_STR)),
    "metadata_tensor": _obj(["name", "datatype", "shape"], name=_STR, datatype=_STR, shape=_SHAPE),
    "metadata_model_response": _obj(["name", "platform"], name=_STR, versions=_array(_STR), platform=_STR,
                                    inputs=_array(_ref("metadata_tensor")),
                                    outputs=_array(_ref("metadata_tensor"))),
    "request_input": _obj(["name", "shape", "datatype", "data"], **_TENSOR),
    "request_output": _obj(["name"], name=_STR, parameters=_PARAMETERS),
    "inference_request": _obj(["inputs"], id=_STR, parameters=_PARAMETERS,
                              inputs=_array(_ref("request_input")), outputs=_array(_ref("request_output"))),
    "response_output": _obj(["name", "shape", "datatype", "data"], **_TENSOR),
    "inference_response": _obj(["model_name", "outputs"], model_name=_STR, model_version=_STR, id=_STR,
                               parameters=_PARAMETERS, outputs=_array(_ref("response_output"))),
    "error_response": _obj(["error"], error=_STR),  # the server, model and inference error objects
}
#: the datatypes the protocol's tensor data types table lists
OIP_DATATYPES = {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
                 "FP32", "FP64", "BYTES"}


def conforms(doc: Any, schema: str) -> Any:
    """``doc`` validated against the protocol's ``schema`` (a jsonschema.ValidationError names the field)."""
    jsonschema.validate(doc, {"$ref": f"#/$defs/{schema}", "$defs": OIP_DEFS})
    return doc


def test_every_reply_has_the_shape_the_protocol_documents(served):
    """Each endpoint of the protocol's HTTP/REST API, asked with documented requests only, answers with
    the documented status and JSON object; errors are the documented ``{"error": $string}``."""
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/scorer/ready",
                 "/v2/models/scorer/versions/1/ready"):
        assert call(served, "GET", path)[0] == 200, path  # health: the status code is the answer
    for path in ("/v2", "/v2/"):  # the prose says v2, the OpenAPI file /v2/
        status, _, body = call(served, "GET", path)
        assert status == 200, path
        conforms(json.loads(body), "metadata_server_response")
    for path in ("/v2/models/scorer", "/v2/models/scorer/versions/1"):
        status, _, body = call(served, "GET", path)
        meta = conforms(json.loads(body), "metadata_model_response")
        assert status == 200 and {t["datatype"] for t in meta["inputs"] + meta["outputs"]} <= OIP_DATATYPES
    for request in (infer_doc(id="42"), infer_doc(outputs=[{"name": "best"}]), infer_doc(x=X.tolist())):
        conforms(request, "inference_request")  # what is sent is a documented request
        status, _, doc = post_json(served, "scorer", request)
        assert status == 200, doc
        conforms(doc, "inference_response")
        assert doc.get("id") == request.get("id") and doc["model_name"] == "scorer"
        asked = [o["name"] for o in request.get("outputs", [])]
        assert [o["name"] for o in doc["outputs"]] == (asked or ["y", "best"])
        for out in doc["outputs"]:
            assert out["datatype"] in OIP_DATATYPES and len(np.ravel(out["data"])) == np.prod(out["shape"])
    status, _, doc = post_json(served, "scorer", with_input("x", shape=[32]))
    assert status == 400
    conforms(doc, "error_response")
    for method, path, body in (("GET", "/v2/models/nope", None),
                               ("POST", "/v2/models/nope/infer", json.dumps(infer_doc()).encode())):
        status, _, reply = call(served, method, path, body)
        assert status == 404, path
        conforms(json.loads(reply), "error_response")
    with pytest.raises(jsonschema.ValidationError):  # the schemas do refuse what the protocol does not allow
        conforms({"model_name": "scorer", "outputs": [{"name": "y", "shape": [2], "datatype": "FP32"}]},
                 "inference_response")


# -- inference ----------------------------------------------------------------------------------------
def check_outputs(world: ApiWorld, doc: dict[str, Any], names: tuple[str, ...] = ("y", "best")) -> None:
    assert doc["model_name"] == "scorer" and doc["model_version"] == "1"
    assert [o["name"] for o in doc["outputs"]] == list(names)
    for out in doc["outputs"]:
        want = world.expected[out["name"]]
        assert out["datatype"] == {"y": "FP32", "best": "INT64"}[out["name"]]
        assert out["shape"] == list(want.shape)
        np.testing.assert_array_equal(np.array(out["data"], want.dtype).reshape(want.shape), want)


def test_json_inference_flat_or_nested_equals_the_models_own_predict(world, served):
    status, _, doc = post_json(served, "scorer", infer_doc(id="req-1"))
    assert status == 200 and doc["id"] == "req-1"
    check_outputs(world, doc)
    status, _, doc = post_json(served, "scorer", infer_doc(x=X.tolist()))  # nested row-major
    assert status == 200 and "id" not in doc
    check_outputs(world, doc)
    status, _, doc = post_json(served, "scorer/versions/1", infer_doc(outputs=[{"name": "best"}]))
    assert status == 200
    check_outputs(world, doc, ("best",))


def split_binary(headers: dict[str, str], body: bytes) -> tuple[dict[str, Any], bytes]:
    n = int(headers["inference-header-content-length"])
    return json.loads(body[:n]), body[n:]


def test_binary_tensor_extension_round_trip(world, served):
    """x as raw little-endian bytes after the JSON header, ids as JSON; y back as binary, best as JSON."""
    head = json.dumps({"inputs": [
        {"name": "x", "shape": [2, 16], "datatype": "FP32", "parameters": {"binary_data_size": X.nbytes}},
        {"name": "ids", "shape": [2], "datatype": "INT64", "data": IDS.tolist()}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}, {"name": "best"}]}).encode()
    status, headers, body = call(served, "POST", "/v2/models/scorer/infer", head + X.astype("<f4").tobytes(),
                                 {"Inference-Header-Content-Length": str(len(head)),
                                  "Content-Type": "application/octet-stream"})
    assert status == 200
    doc, binary = split_binary(headers, body)
    y, best = doc["outputs"]
    assert y["parameters"]["binary_data_size"] == 64 and "data" not in y and len(binary) == 64
    np.testing.assert_array_equal(np.frombuffer(binary, "<f4").reshape(2, 8), world.expected["y"])
    np.testing.assert_array_equal(np.int64(best["data"]), world.expected["best"])
    # every output binary at once, in output order
    status, headers, body = post_json_raw(served, infer_doc(parameters={"binary_data_output": True}))
    doc, binary = split_binary(headers, body)
    assert status == 200 and [o["parameters"]["binary_data_size"] for o in doc["outputs"]] == [64, 16]
    np.testing.assert_array_equal(np.frombuffer(binary[64:], "<i8"), world.expected["best"])


def post_json_raw(served: Served, doc: Any) -> tuple[int, dict[str, str], bytes]:
    return call(served, "POST", "/v2/models/scorer/infer", json.dumps(doc).encode())


def with_input(which: str, **changes: Any) -> dict[str, Any]:
    doc = infer_doc()
    for item in doc["inputs"]:
        if item["name"] == which:
            item.update(changes)
    return doc


BAD_REQUESTS = {
    "malformed JSON": (b'{"inputs": [', {}, 400),
    "not an object": (b"[1, 2]", {}, 400),
    "nesting bomb": (b"[" * 50_000, {}, 400),
    "wrong datatype": (with_input("ids", datatype="FP32"), {}, 400),
    "unknown datatype": (with_input("x", datatype="BYTES"), {}, 400),
    "floats for INT64": (with_input("ids", data=[1.5, 2.0]), {}, 400),
    "id past the table": (with_input("ids", data=[3, 10]), {}, 400),
    "id before the table": (with_input("ids", data=[-11, 0]), {}, 400),
    "strings as data": (with_input("x", data=["a"] * 32), {}, 400),
    "wrong shape": (with_input("x", shape=[32]), {}, 400),
    "too few values": (with_input("x", data=[0.0] * 31), {}, 400),
    "ragged nesting": (with_input("x", data=[[0.0] * 16, [0.0] * 15]), {}, 400),
    "unknown input": (with_input("x", name="z"), {}, 400),
    "missing input": ({"inputs": infer_doc()["inputs"][:1]}, {}, 400),
    "unknown output": (infer_doc(outputs=[{"name": "nope"}]), {}, 400),
    "binary size wrong": (with_input("x", parameters={"binary_data_size": 10}), {}, 400),
    "header length past body": (infer_doc(), {"Inference-Header-Content-Length": "999999"}, 400),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_inference_requests_get_a_clear_400_and_the_server_stays_up(served, case):
    body, headers, want = BAD_REQUESTS[case]
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, _, reply = call(served, "POST", "/v2/models/scorer/infer", data, headers)
    doc = json.loads(reply)
    assert status == want and doc["error"].startswith("BadInferenceRequest: "), doc
    still_serving(served)


def test_unknown_model_version_method_and_path_are_4xx(served):
    assert post_json(served, "nope", infer_doc())[0] == 404
    assert post_json(served, "scorer/versions/7", infer_doc())[0] == 404
    status, headers, _ = call(served, "GET", "/v2/models/scorer/infer")
    assert status == 405 and headers["allow"] == "POST"
    assert call(served, "DELETE", "/v2/health/live")[0] == 405
    assert call(served, "POST", "/v2/other/infer", b"{}")[0] == 404
    still_serving(served)


def test_oversize_bodies_and_headers_are_refused_unread(served):
    before = scrape(served)
    limit = SETTINGS.max_body_bytes
    # declared too large: answered before a byte of the body is sent
    reply = raw_exchange(served, f"POST /v2/models/scorer/infer HTTP/1.1\r\nHost: x\r\n"
                                 f"Content-Length: {limit + 1}\r\n\r\n".encode())
    assert status_of(reply) == 413 and b"RequestTooLarge" in reply
    # chunked, so no length is declared: cut off once past the limit
    chunk = b"a" * 8192
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(limit // len(chunk) + 2))
    reply = raw_exchange(served, b"POST /v2/models/scorer/infer HTTP/1.1\r\nHost: x\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
    assert status_of(reply) == 413
    # headers over max_header_bytes
    reply = raw_exchange(served, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Pad: "
                         + b"a" * (SETTINGS.max_header_bytes + 10) + b"\r\n\r\n")
    assert status_of(reply) == 431
    assert status_of(raw_exchange(served, b"NOT HTTP AT ALL\r\n\r\n")) == 400
    still_serving(served)
    after = scrape(served)
    for code, n in (("413", 2), ("431", 1), ("400", 1)):
        labels = {"model": "", "endpoint": "other", "code": code}
        assert metric(after, "cuvil_http_requests_total", **labels) \
            - metric(before, "cuvil_http_requests_total", **labels) == n, code


def test_slow_loris_is_cut_off_by_the_header_timeout_while_others_are_served(served):
    """A client that sends its headers one byte at a time never completes them: the header deadline
    (total, not per read) answers 408 and closes, and a normal client is served meanwhile."""
    before = metric(scrape(served), "cuvil_http_timeouts_total", phase="header")
    trickle = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"s" * 10_000
    with socket.create_connection((served.host, served.port), timeout=GUARD_S) as s:
        sent = 0
        s.setblocking(False)
        end = time.monotonic() + GUARD_S
        reply = b""
        while not reply and time.monotonic() < end:
            try:
                s.send(trickle[sent:sent + 1])
                sent += 1
            except OSError:  # reset once the server gave up
                break
            if sent == 5:  # while the slow client holds its connection, another is served
                still_serving(served)
            time.sleep(0.05)
            try:
                reply = s.recv(1 << 16)
            except BlockingIOError:
                pass
        s.setblocking(True)
        reply += read_all(s) if reply else b""
    assert sent < len(trickle), "the slow client was never cut off"
    assert status_of(reply) == 408 and b"RequestTimeout" in reply
    assert metric(scrape(served), "cuvil_http_timeouts_total", phase="header") == before + 1
    still_serving(served)


def test_a_trickled_body_is_cut_off_by_the_body_timeout(served):
    """The body deadline is total too: a body sent a byte at a time gets 408 before it is complete."""
    with HttpApiServer(served.models, HttpSettings(port=0, body_timeout_s=1.0)) as server:
        host, port = server.address  # type: ignore[misc]
        with socket.create_connection((host, port), timeout=GUARD_S) as s:
            s.sendall(b"POST /v2/models/scorer/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
            s.setblocking(False)
            sent, reply, end = 0, b"", time.monotonic() + GUARD_S
            while not reply and time.monotonic() < end:
                try:
                    sent += s.send(b"{")
                    reply = s.recv(1 << 16)
                except BlockingIOError:
                    pass
                except OSError:
                    break
                time.sleep(0.05)
            s.setblocking(True)
            reply += read_all(s) if reply else b""
        assert sent < 100_000 and status_of(reply) == 408
        families = text_string_to_metric_families(server.metrics.render().decode())
        assert {(s.name, s.labels.get("phase")): s.value for f in families for s in f.samples}[
            ("cuvil_http_timeouts_total", "body")] == 1


def test_a_host_without_a_name_serves_under_its_manifests_name(world, tmp_path):
    host = ModelHost(Installer(shutil.copytree(world.scorer_state, tmp_path / "state"), HW))
    try:
        models = ModelRegistry()
        models.add(host)
        assert host.name == "scorer" and models.get("scorer") is host
        with pytest.raises(ValueError, match="already registered"):
            models.add(host)
    finally:
        host.close()


def test_connection_limit_answers_503_overloaded_with_retry_after(served):
    """At the connection limit one more client gets 503 ``Overloaded`` and a Retry-After hint at once
    (no thread is spent on it); the held connections and later clients are served normally."""
    settings = HttpSettings(port=0, max_connections=2, header_timeout_s=GUARD_S, retry_after_s=3)
    with HttpApiServer(served.models, settings) as server:
        host, port = server.address  # type: ignore[misc]
        held = [socket.create_connection((host, port), timeout=GUARD_S) for _ in range(2)]
        try:
            for _ in range(3):
                with socket.create_connection((host, port), timeout=GUARD_S) as extra:
                    reply = read_all(extra)
                assert status_of(reply) == 503 and b"Retry-After: 3" in reply and b"Overloaded" in reply
            # a held connection still works, keep-alive included
            held[0].sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status_of(held[0].recv(1 << 16)) == 200
        finally:
            for s in held:
                s.close()

        refused = 3

        def served_again() -> bool:  # the held connections' threads may not have ended yet
            nonlocal refused
            try:
                with socket.create_connection((host, port), timeout=GUARD_S) as s:
                    s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    status = status_of(read_all(s))
            except ConnectionError:  # refused and closed before our request was read: a reset
                status = 503
            refused += status == 503
            return status == 200
        eventually(served_again, "a slot to be free again")
        families = text_string_to_metric_families(server.metrics.render().decode())
        values = {s.name: s.value for f in families for s in f.samples}
        assert values["cuvil_http_connections_refused_total"] == refused


def test_full_queue_answers_503_a_deadline_kill_504_and_stale_input_422(served):
    """The spin model loops on SENTINEL until its deadline: while it does and one request waits in its
    queue (max_queue_depth 1), more requests are refused at once with 503 ``Overloaded``."""
    before = scrape(served)
    sentinel = {"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "data": SENTINEL.tolist()}]}
    normal = {"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "data": [0.0, 1.0, 2.0, 3.0]}]}
    results: dict[str, int] = {}

    def post(key: str, doc: Any) -> None:
        results[key] = post_json(served, "spin", doc)[0]

    spinner = threading.Thread(target=post, args=("sentinel", sentinel))
    spinner.start()
    metrics = lambda: served.spin.metrics() or {}  # noqa: E731
    eventually(lambda: metrics().get("submitted", 0) >= 1 and metrics()["queue_depth"] == 0,
               "the sentinel request to reach the worker")
    waiting = threading.Thread(target=post, args=("queued", normal))
    waiting.start()
    eventually(lambda: metrics()["queue_depth"] == 1, "a request to wait in the queue")
    for _ in range(3):
        status, headers, doc = post_json(served, "spin", normal)
        assert status == 503 and doc["type"] == "Overloaded" and headers["retry-after"] == "1", doc
    spinner.join(GUARD_S)
    waiting.join(GUARD_S)
    assert results["sentinel"] == 504  # DeadlineExceeded: its worker was killed
    assert results["queued"] in (200, 504)  # it may expire waiting for the restarted worker
    # stale input on the scorer (max_input_age_ms = 60 s): 422, fresh input: 200
    status, _, doc = post_json(served, "scorer", infer_doc(parameters={"captured_at": time.time() - 3600}))
    assert status == 422 and doc["type"] == "StaleInput"
    assert post_json(served, "scorer", infer_doc(parameters={"captured_at": time.time()}))[0] == 200
    after = scrape(served)
    delta = lambda name, **labels: metric(after, name, **labels) - metric(before, name, **labels)  # noqa: E731
    assert delta("cuvil_requests_shed_total", model="spin", reason="queue_full") == 3
    assert delta("cuvil_http_requests_total", model="spin", endpoint="infer", code="503") == 3
    assert delta("cuvil_deadline_kills_total", model="spin") == 1
    assert delta("cuvil_worker_restarts_total", model="spin") == 1
    assert delta("cuvil_stale_inputs_total", model="scorer") == 1
    assert delta("cuvil_http_requests_total", model="scorer", endpoint="infer", code="422") == 1


def test_metrics_after_n_requests_match_the_clients_counts(world, served):
    before = scrape(served)
    ok, bad = 6, 2
    for i in range(ok):
        assert post_json(served, "scorer", infer_doc(id=str(i)))[0] == 200
    for _ in range(bad):
        assert post_json(served, "scorer", with_input("x", shape=[1]))[0] == 400
    after = scrape(served)
    delta = lambda name, **labels: metric(after, name, **labels) - metric(before, name, **labels)  # noqa: E731
    variant = json.loads(call(served, "GET", "/v2/models/scorer")[2])["variant"]
    assert delta("cuvil_http_requests_total", model="scorer", endpoint="infer", code="200") == ok
    assert delta("cuvil_http_requests_total", model="scorer", endpoint="infer", code="400") == bad
    assert delta("cuvil_requests_completed_total", model="scorer") == ok
    assert delta("cuvil_requests_submitted_total", model="scorer") == ok  # bad ones never reach it
    assert delta("cuvil_inference_latency_seconds_count", model="scorer", variant=variant) == ok
    assert delta("cuvil_inference_latency_seconds_bucket", model="scorer", variant=variant, le="+Inf") == ok
    assert delta("cuvil_batch_size_count", model="scorer") == ok
    assert metric(after, "cuvil_model_release", model="scorer") == 1
    info = {"model": "scorer", "release": "1", "version": "1.0.1", "variant": variant}
    assert metric(after, "cuvil_model_info", **info) == 1
    assert metric(after, "cuvil_model_priority", model="scorer") == 10
    assert metric(after, "cuvil_model_ready", model="spin") == 1
    assert metric(after, "cuvil_queue_depth", model="scorer") == 0
    shown = {(name, frozenset(labels - {("model", "scorer")})) for name, labels in after
             if ("model", "scorer") in labels}
    for c in SERVING_COUNTS:  # the telemetry vocabulary, every count under its family and labels
        assert (c.metric + ("" if c.gauge else "_total"), frozenset(c.labels.items())) in shown, c


# -- our client, the Unix socket and the agent --------------------------------------------------------
def test_python_client_over_a_unix_socket(world, served, tmp_path):
    path = tmp_path / "api.sock"
    with HttpApiServer(served.models, HttpSettings(unix_socket=str(path))) as server, \
            InferenceClient(unix_socket=str(server.address), timeout_s=GUARD_S) as client:
        assert path.stat().st_mode & 0o777 == 0o660
        assert client.live() and client.ready() and client.model_ready("scorer")
        assert client.metadata("scorer")["inputs"][1]["datatype"] == "INT64"
        for binary in (True, False):
            result = client.infer("scorer", {"x": X, "ids": IDS}, binary=binary, request_id="r")
            assert result.model_version == "1" and result.id == "r"
            for name, want in world.expected.items():
                assert result.outputs[name].dtype == want.dtype
                np.testing.assert_array_equal(result.outputs[name], want)
        assert list(client.infer("scorer", {"x": X, "ids": IDS}, outputs=["best"]).outputs) == ["best"]
        with pytest.raises(InferenceRefused) as refused:
            client.infer("nope", {"x": X, "ids": IDS})
        assert refused.value.status == 404 and refused.value.kind == "UnknownModel"
        with pytest.raises(InferenceRefused) as refused:
            client.infer("scorer", {"x": X, "ids": IDS}, captured_at=time.time() - 3600)
        assert refused.value.status == 422 and refused.value.kind == "StaleInput"
    assert not path.exists()


def test_agent_serves_the_http_api_beside_its_unix_socket(world, tmp_path):
    """``[http]`` in agent.toml starts the API next to the JSON socket; both answer from one model host,
    under the name the config gives it."""
    state = shutil.copytree(world.scorer_state, tmp_path / "state")
    with LocalBroker(tmp_path / "broker") as broker:
        cfg = AgentConfig(device_id="dev-h", fleet="lab", state_dir=str(state), hardware_id=HW,
                          socket=str(tmp_path / "infer.sock"), log_file=str(tmp_path / "agent.log"),
                          telemetry_interval_s=0, broker=broker.settings())
        toml = write_toml(cfg, tmp_path / "agent.toml")
        toml.write_text(toml.read_text() + '\n[http]\nport = 0\nmodel_name = "scorer"\nmax_connections = 4\n')
        cfg = load_agent_config(toml)
        assert cfg.http == HttpSettings(port=0, model_name="scorer", max_connections=4)
        agent = Agent(cfg, log_sink=JsonLog(cfg.device_id, cfg.log_file))
        stop = threading.Event()
        runner = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        runner.start()
        try:
            eventually(lambda: agent.http is not None and agent.server is not None, "the servers to start")
            assert agent.http is not None
            host, port = agent.http.address  # type: ignore[misc]
            with InferenceClient(f"http://{host}:{port}", timeout_s=GUARD_S) as client:
                result = client.infer("scorer", {"x": X, "ids": IDS})
                np.testing.assert_array_equal(result.outputs["y"], world.expected["y"])
            release, outputs = infer(cfg.socket, {"x": X, "ids": IDS}, timeout_s=GUARD_S)
            assert release == 1
            np.testing.assert_array_equal(outputs["best"], world.expected["best"])
            body = agent.http.metrics.render().decode()
            assert 'cuvil_model_release{model="scorer"} 1.0' in body
            assert 'cuvil_requests_completed_total{model="scorer"} 2.0' in body  # both transports counted
        finally:
            stop.set()
            runner.join(GUARD_S)
    assert not runner.is_alive()


@pytest.mark.parametrize("table, error", [
    ("[http]\nport = -1\n", "non-negative"), ("[http]\nmax_body_bytes = 0\n", "positive"),
    ('[http]\nport = "8080"\n', "expected int"), ("[http]\nbogus = 1\n", "unknown setting"),
])
def test_http_settings_are_typed_and_bounded(tmp_path, table, error):
    toml = tmp_path / "agent.toml"
    toml.write_text(f'[agent]\ndevice_id = "d"\nfleet = "f"\nstate_dir = "{tmp_path}"\n{table}')
    with pytest.raises(ValueError, match=error):
        load_agent_config(toml)


def test_a_port_in_use_is_refused_naming_the_address_and_the_setting(served, tmp_path):
    """A second server on the first one's port: ``CannotListen`` naming host, port and ``[http]``, not the
    bare "Address already in use" (``cuvil-agent`` prints it as its one error line, exit 1)."""
    taken = HttpSettings(host=served.host, port=served.port)
    with pytest.raises(CannotListen, match=rf"HTTP {served.host}:{served.port} \(\[http\] host and port\): "
                                           "Address already in use"):
        HttpApiServer(served.models, taken)
    still_serving(served)
