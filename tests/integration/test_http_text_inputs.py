"""Texts and images straight to the device's serving APIs: a ``from_pretrained`` text classifier and image
classifier (built as in test_pretrained.py), signed, installed and served by ``ModelHost``; raw HTTP
(``http.client``, the Open Inference Protocol's BYTES datatype in JSON, base64 and binary forms) and the
Unix socket's JSON give the labels and scores ``CuvilModel.predict`` gives on the host. Too many items,
oversize items, text that is not UTF-8 and unreadable images are each a clear 4xx, and the server keeps
serving. No assertion is about time.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cuvil_agent import payloads
from cuvil_agent.cli import main as agent_main
from cuvil_agent.config import HttpSettings, ServeLimits
from cuvil_agent.http_api import HttpApiServer
from cuvil_agent.http_client import InferenceClient
from cuvil_agent.serve import InferenceServer, ModelHost, ModelRegistry
from cuvil_edge import CuvilModel, Target
from cuvil_edge.signing import Keyring, build_bundle
from ota import Installer
from runtime_wasm import Classification
from tests.support.http import ask_path, call, json_outputs, post_binary, post_json, read_binary
from tests.support.pretrained import IMAGE_LABELS, image_dir, sst_dir, train_tokenizer

pytestmark = pytest.mark.integration
HW = "test-device"
LONG = "a wonderful film " * 20  # far past the sequence length: truncated on the device as on the host
TEXTS = ["I love this movie!", "This is terrible.", LONG, "great music", "boring boring boring"]
MAX_ITEMS, MAX_ITEM_BYTES = 6, 32 << 10
SETTINGS = HttpSettings(port=0, max_connections=8, header_timeout_s=5.0, body_timeout_s=20.0,
                        max_body_bytes=1 << 20, max_items=MAX_ITEMS, max_item_bytes=MAX_ITEM_BYTES)
LIMITS = ServeLimits(max_items=MAX_ITEMS, max_item_bytes=MAX_ITEM_BYTES)
RNG = np.random.default_rng(11)
IMAGES = [RNG.integers(0, 256, (48, 64, 3), dtype=np.uint8), RNG.integers(0, 256, (70, 50, 3), np.uint8),
          RNG.integers(0, 256, (40, 40, 3), dtype=np.uint8)]


def npy_bytes(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, image)  # an object array is pickled: the device must refuse it
    return buf.getvalue()


def ppm_bytes(image: np.ndarray) -> bytes:
    h, w = image.shape[:2]
    return f"P6\n{w} {h}\n255\n".encode() + image.tobytes()


class World:
    """Both models compiled on the host (kept for their own ``predict``), signed, installed and served
    over HTTP (names "sst" and "images") and each on its own Unix socket."""

    def __init__(self, base: Path) -> None:
        ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1, release_threshold=1)
        sst = sst_dir(base / "tiny-sst", train_tokenizer())
        self.text_model = CuvilModel.from_pretrained(sst).optimize(targets=[Target()])
        self.image_model = CuvilModel.from_pretrained(image_dir(base / "tiny-resnet")).optimize(
            targets=[Target()])
        self.base = base
        self.hosts: dict[str, ModelHost] = {}
        self.sockets: dict[str, InferenceServer] = {}
        self.models = ModelRegistry()
        for name, model in (("sst", self.text_model), ("images", self.image_model)):
            build_bundle(model.save(base / f"{name}.cuvil"), base / f"{name}.cvb", ring.release_keys(),
                         version="1.0.0", release=1, hardware_ids=[HW])
            Installer(base / f"{name}-state", HW, root=ring.root_envelope()).install(base / f"{name}.cvb")
            self.hosts[name] = ModelHost(Installer(base / f"{name}-state", HW), name=name)
            self.models.add(self.hosts[name])
            self.sockets[name] = InferenceServer(base / f"{name}.sock", self.hosts[name], LIMITS)
        self.server = HttpApiServer(self.models, SETTINGS)
        self.host, self.port = self.server.address  # type: ignore[misc]

    def close(self) -> None:
        self.server.close()
        for s in self.sockets.values():
            s.close()
        for h in self.hosts.values():
            h.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("http-text")
    w = World(base)
    yield w
    w.close()
    shutil.rmtree(base, ignore_errors=True)


# -- the protocol's BYTES forms, written out here (raw HTTP: tests.support.http.call) ----------------------


def assert_same_as_host(labels: list[Any], scores: Any, all_scores: Any, want: list[Classification]) -> None:
    assert [x.decode() if isinstance(x, bytes) else x for x in labels] == [w.label for w in want]
    np.testing.assert_allclose(scores, [w.score for w in want], atol=1e-5)
    np.testing.assert_allclose(all_scores, np.stack([w.scores for w in want]), atol=1e-5)


def text_doc(texts: list[str]) -> dict[str, Any]:
    return {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]}


# -- metadata --------------------------------------------------------------------------------------------
def test_metadata_shows_the_processed_inputs_and_typed_outputs_beside_the_tensors(world):
    status, _, body = call(world, "GET", "/v2/models/sst")
    meta = json.loads(body)
    assert status == 200 and meta["task"] == "text-classification"
    assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    assert meta["outputs"] == [{"name": "label", "datatype": "BYTES", "shape": [-1]},
                               {"name": "score", "datatype": "FP32", "shape": [-1]},
                               {"name": "scores", "datatype": "FP32", "shape": [-1, 2]}]
    assert meta["labels"] == ["NEGATIVE", "POSITIVE"]
    assert {t["name"] for t in meta["tensor_inputs"]} == {t.name for t in world.text_model.spec.inputs}
    image_meta = json.loads(call(world, "GET", "/v2/models/images")[2])
    assert image_meta["inputs"] == [{"name": "image", "datatype": "BYTES", "shape": [-1]}]
    assert image_meta["outputs"][2]["shape"] == [-1, len(IMAGE_LABELS)]


# -- texts -----------------------------------------------------------------------------------------------
def test_texts_as_json_strings_give_the_hosts_labels_and_scores(world):
    want = world.text_model.predict(TEXTS)
    assert {w.label for w in want} == {"NEGATIVE", "POSITIVE"}  # both labels: a constant answer would fail
    status, doc = post_json(world, "sst", {"id": "t1", **text_doc(TEXTS)})
    assert status == 200, doc
    assert doc["id"] == "t1" and doc["model_name"] == "sst" and doc["model_version"] == "1"
    out = json_outputs(doc)
    assert_same_as_host(out["label"], out["score"], out["scores"], want)


def test_texts_in_the_binary_extension_give_the_hosts_labels_and_scores(world):
    texts = ["Dès demain: « great acting »", *TEXTS[:3]]  # non-ASCII UTF-8 travels as its bytes
    status, headers, body = post_binary(world, "sst", "text", [t.encode() for t in texts])
    assert status == 200, body
    out = read_binary(headers, body)
    assert_same_as_host(out["label"], out["score"], out["scores"], world.text_model.predict(texts))


@pytest.mark.parametrize("binary", [False, True])
def test_the_python_client_sends_strings_and_reads_bytes_outputs(world, binary):
    with InferenceClient(f"http://{world.host}:{world.port}") as client:
        result = client.infer("sst", {"text": TEXTS}, binary=binary)
    out = result.outputs
    assert out["label"].dtype == object and result.model_version == "1"
    assert_same_as_host(out["label"].tolist(), out["score"], out["scores"], world.text_model.predict(TEXTS))


def test_one_requested_output_and_the_raw_tensors_still_work(world):
    doc = {**text_doc(["great music"]), "outputs": [{"name": "label"}]}
    status, reply = post_json(world, "sst", doc)
    assert status == 200 and [o["name"] for o in reply["outputs"]] == ["label"]
    assert reply["outputs"][0]["data"] == [world.text_model.predict("great music").label]
    feeds = world.text_model.processor.encode(["great music"])[0]
    raw = {"inputs": [{"name": k, "datatype": "INT64", "shape": list(v.shape), "data": v.ravel().tolist()}
                      for k, v in feeds.items()]}
    status, reply = post_json(world, "sst", raw)
    assert status == 200, reply
    (out,) = reply["outputs"]
    host = world.text_model.predict(feeds)[out["name"]]
    np.testing.assert_allclose(np.reshape(out["data"], out["shape"]), host, atol=1e-5)


# -- images ----------------------------------------------------------------------------------------------
def test_images_as_npy_and_ppm_bytes_give_the_hosts_top5(world):
    want = world.image_model.predict(IMAGES)
    encoded = [npy_bytes(IMAGES[0]), ppm_bytes(IMAGES[1]), npy_bytes(IMAGES[2])]
    status, headers, body = post_binary(world, "images", "image", encoded)
    assert status == 200, body
    out = read_binary(headers, body)
    assert_same_as_host(out["label"], out["score"], out["scores"], want)
    for row, w in zip(out["scores"], want):  # the top 5 as on the host
        top5 = [IMAGE_LABELS[str(i)] for i in np.argsort(-row, kind="stable")[:5]]
        assert top5 == [label for label, _ in w.top(5)]
    b64 = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [2],
                       "parameters": {"content_type": "base64"},
                       "data": [base64.b64encode(e).decode() for e in encoded[:2]]}]}
    status, doc = post_json(world, "images", b64)
    assert status == 200, doc
    out = json_outputs(doc)
    assert_same_as_host(out["label"], out["score"], out["scores"], want[:2])


# -- limits and malformed items: 4xx, and the server keeps serving ---------------------------------------
@pytest.mark.parametrize("case", ["too-many", "too-long", "not-utf8-binary", "lone-surrogate-json",
                                  "not-base64", "not-an-image", "pickled-npy", "wrong-input", "empty",
                                  "numbers"])
def test_bad_items_are_4xx_and_the_server_stays_up(world, case):
    big = "x" * (MAX_ITEM_BYTES + 1)
    if case == "too-many":
        status, doc = post_json(world, "sst", text_doc(["a"] * (MAX_ITEMS + 1)))
        want = (413, "InputOverLimit")
    elif case == "too-long":
        status, _, body = post_binary(world, "sst", "text", [b"ok", big.encode()])
        doc, want = json.loads(body), (413, "InputOverLimit")
    elif case == "not-utf8-binary":
        status, _, body = post_binary(world, "sst", "text", [b"fine", b"caf\xe9"])
        doc, want = json.loads(body), (400, "BadInferenceRequest")
    elif case == "lone-surrogate-json":
        raw = b'{"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["\\ud800"]}]}'
        status, _, body = call(world, "POST", "/v2/models/sst/infer", raw)
        doc, want = json.loads(body), (400, "BadInferenceRequest")
    elif case == "not-base64":
        status, doc = post_json(world, "images", {"inputs": [{
            "name": "image", "datatype": "BYTES", "shape": [1], "parameters": {"content_type": "base64"},
            "data": ["not base64!"]}]})
        want = (400, "BadInferenceRequest")
    elif case == "not-an-image":
        status, _, body = post_binary(world, "images", "image", [b"GIF89a and then nothing"])
        doc, want = json.loads(body), (400, "ProcessingError")
    elif case == "pickled-npy":
        pickled = npy_bytes(np.array([{"a": 1}], dtype=object))
        status, _, body = post_binary(world, "images", "image", [pickled])
        doc, want = json.loads(body), (400, "ProcessingError")
    elif case == "wrong-input":
        status, doc = post_json(world, "images", text_doc(["an image model takes no text"]))
        want = (400, "BadInferenceRequest")
    elif case == "empty":
        status, doc = post_json(world, "sst", text_doc([]))
        want = (400, "BadInferenceRequest")
    else:
        status, doc = post_json(world, "sst", {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                                           "data": [3]}]})
        want = (400, "BadInferenceRequest")
    assert (status, doc["type"]) == want, doc
    status, doc = post_json(world, "sst", text_doc(["I love this movie!"]))
    assert status == 200
    assert json_outputs(doc)["label"] == [world.text_model.predict("I love this movie!").label]


# -- the Unix socket's JSON ------------------------------------------------------------------------------
def ask(world: World, model: str, request: dict[str, Any]) -> dict[str, Any]:
    return ask_path(world.sockets[model].path, request)


def test_the_unix_socket_takes_texts_and_images_in_its_json(world):
    reply = ask(world, "sst", {"text": TEXTS})
    want = world.text_model.predict(TEXTS)
    assert reply["release"] == 1
    assert [r["label"] for r in reply["results"]] == [w.label for w in want]
    np.testing.assert_allclose([r["score"] for r in reply["results"]], [w.score for w in want], atol=1e-5)
    reply = ask(world, "images", {"image": [base64.b64encode(ppm_bytes(im)).decode() for im in IMAGES]})
    want = world.image_model.predict(IMAGES)
    assert [[label for label, _ in r["top"]] for r in reply["results"]] == [
        [label for label, _ in w.top(5)] for w in want]
    assert ask(world, "sst", {"text": ["a"] * (MAX_ITEMS + 1)})["type"] == "InputOverLimit"
    assert ask(world, "sst", {"text": [1, 2]})["type"] == "BadInferenceRequest"
    assert ask(world, "sst", {"image": ["aGk="]})["type"] == "BadInferenceRequest"  # a text model
    assert ask(world, "sst", {"text": ["still serving"]})["release"] == 1


# -- cuvil-agent infer --text: the agent processes when it can, the client otherwise ---------------------
def agent_infer(world: World, state: str, sock: Path, texts: list[str], capsys) -> list[str]:
    capsys.readouterr()
    argv = ["infer", "--state-dir", str(world.base / state), "--hardware-id", HW, "--socket", str(sock)]
    assert agent_main(argv + [a for t in texts for a in ("--text", t)]) == 0
    return capsys.readouterr().out.splitlines()


def test_cuvil_agent_infer_text_is_processed_by_the_agent_or_else_by_the_client(world, capsys, monkeypatch):
    texts = TEXTS[:2]
    results = world.text_model.predict(texts)
    want = [f"{w.label} {w.score:.4f} (release 1): {t}" for w, t in zip(results, texts)]
    # the state directory given is the image model's: only processing on the agent can label these texts
    assert agent_infer(world, "images-state", world.sockets["sst"].path, texts, capsys) == want
    monkeypatch.setattr(payloads, "load_processor", lambda slot, spec: None)  # an agent that cannot process
    host = ModelHost(Installer(world.base / "sst-state", HW), name="sst")
    server = InferenceServer(world.base / "tensors-only.sock", host, LIMITS)
    try:
        assert ask_path(server.path, {"text": texts})["type"] == "NoProcessing"
        assert agent_infer(world, "sst-state", server.path, texts, capsys) == want
    finally:
        server.close()
        host.close()
