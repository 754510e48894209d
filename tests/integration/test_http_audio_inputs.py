"""WAV files straight to the device's serving APIs: a ``from_pretrained`` keyword spotter (Wav2Vec2-style,
raw waveforms; built as in test_pretrained_audio.py), signed, installed and served by ``ModelHost``. Raw
HTTP (the Open Inference Protocol's BYTES ``audio`` input, binary and base64 JSON, with and without
``parameters.hop_s``), the Unix socket's JSON and ``cuvil-agent infer --audio [--hop]`` give the labels
and scores ``CuvilModel.predict`` gives on the host for the same waveform, and onnxruntime fed by the test's
own numpy preprocessing. Malformed WAV files, a rate the model does not take, a bad hop and too many
windows are each a clear 4xx, and the server keeps serving. No assertion is about time.
"""

from __future__ import annotations

import base64
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
from cuvil_agent.serve import InferenceServer, ModelHost, ModelRegistry
from cuvil_edge import CuvilModel, Target
from cuvil_edge.signing import Keyring, build_bundle
from ota import Installer
from runtime_wasm import Classification
from runtime_wasm.processing import AudioWindow
from tests.support.audio import check_against_onnxruntime, ref_wav2vec2, riff
from tests.support.http import GUARD_S, ask_path, call, json_outputs, post_binary, post_json, read_binary
from tests.support.pretrained import KEYWORDS, WAVE_CLIP, WAVE_RATE, clips, wave_dir, write_wav

pytestmark = pytest.mark.integration
HW = "test-device"
MAX_ITEMS, MAX_ITEM_BYTES = 6, 64 << 10
SETTINGS = HttpSettings(port=0, max_connections=8, header_timeout_s=5.0, body_timeout_s=GUARD_S,
                        max_body_bytes=1 << 20, max_items=MAX_ITEMS, max_item_bytes=MAX_ITEM_BYTES)
LIMITS = ServeLimits(max_items=MAX_ITEMS, max_item_bytes=MAX_ITEM_BYTES)
#: 0.3 s (padded), 0.5 s (the window) and 1.7 s (cut; in windows: 4 of them every 0.5 s)
WAVES = clips(WAVE_RATE, [0.3, 0.5, 1.7], seed=9)


class World:
    """The keyword spotter compiled on the host (kept for its own ``predict``), signed, installed, served
    over HTTP as "kws" and on a Unix socket; each clip also as a 16-bit WAV file."""

    def __init__(self, base: Path) -> None:
        ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1, release_threshold=1)
        self.source = wave_dir(base / "kws-wave")
        self.model = CuvilModel.from_pretrained(self.source).optimize(targets=[Target()])
        self.base = base
        build_bundle(self.model.save(base / "kws.cuvil"), base / "kws.cvb", ring.release_keys(),
                     version="1.0.0", release=1, hardware_ids=[HW])
        Installer(base / "state", HW, root=ring.root_envelope()).install(base / "kws.cvb")
        self.model_host = ModelHost(Installer(base / "state", HW), name="kws")
        models = ModelRegistry()
        models.add(self.model_host)
        self.socket = InferenceServer(base / "kws.sock", self.model_host, LIMITS)
        self.server = HttpApiServer(models, SETTINGS)
        self.host, self.port = self.server.address  # type: ignore[misc]  # what tests.support.http.call reads
        self.files = [base / f"clip{i}.wav" for i in range(len(WAVES))]
        self.samples = [write_wav(f, x, WAVE_RATE) for f, x in zip(self.files, WAVES)]
        self.wavs = [f.read_bytes() for f in self.files]

    def close(self) -> None:
        self.server.close()
        self.socket.close()
        self.model_host.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("http-audio")
    w = World(base)
    yield w
    w.close()
    shutil.rmtree(base, ignore_errors=True)


def window_rows(windows: list[list[AudioWindow]]) -> list[tuple[int, float, float, Classification]]:
    """``predict(..., hop_s)``'s windows as the wire's rows: (item, start, end, class)."""
    return [(i, w.start, w.end, w.result) for i, ws in enumerate(windows) for w in ws]


def assert_rows(out: dict[str, Any], rows: list[tuple[int, float, float, Classification]]) -> None:
    """The typed outputs hold these rows: label, score, scores, window_item, window_start, window_end."""
    labels = [x.decode() if isinstance(x, bytes) else x for x in out["label"]]
    assert labels == [r.label for *_, r in rows]
    np.testing.assert_allclose(out["score"], [r.score for *_, r in rows], atol=1e-5)
    np.testing.assert_allclose(out["scores"], np.stack([r.scores for *_, r in rows]), atol=1e-5)
    assert np.asarray(out["window_item"]).tolist() == [i for i, *_ in rows]
    np.testing.assert_allclose(out["window_start"], [start for _, start, _, _ in rows], atol=1e-6)
    np.testing.assert_allclose(out["window_end"], [end for _, _, end, _ in rows], atol=1e-6)


def audio_doc(wavs: list[bytes], **params: Any) -> dict[str, Any]:
    return {"inputs": [{"name": "audio", "datatype": "BYTES", "shape": [len(wavs)],
                        "parameters": {"content_type": "base64"},
                        "data": [base64.b64encode(w).decode() for w in wavs]}], "parameters": params}


# -- HTTP ------------------------------------------------------------------------------------------------
def test_metadata_shows_the_audio_input_and_the_window_outputs(world):
    meta = json.loads(call(world, "GET", "/v2/models/kws")[2])
    assert meta["task"] == "audio-classification" and meta["labels"] == KEYWORDS
    assert meta["inputs"] == [{"name": "audio", "datatype": "BYTES", "shape": [-1]}]
    assert [o["name"] for o in meta["outputs"]] == ["label", "score", "scores", "window_item", "window_start",
                                                    "window_end"]


def test_wav_files_in_the_binary_extension_give_the_hosts_and_onnxruntimes_classes(world):
    float_wav = riff(3, 1, WAVE_RATE, 32, WAVES[1].astype("<f4").tobytes())  # a float WAV beside PCM16
    status, headers, body = post_binary(world, "kws", "audio", [*world.wavs, float_wav])
    assert status == 200, body
    out = read_binary(headers, body)
    want = world.model.predict([*world.files, WAVES[1].astype(np.float32)])
    assert all(isinstance(w, Classification) for w in want)
    ends = [min(len(x), WAVE_CLIP) / WAVE_RATE for x in [*WAVES, WAVES[1]]]  # the long clip: cut
    assert_rows(out, [(i, 0.0, end, w) for i, (end, w) in enumerate(zip(ends, want))])
    check_against_onnxruntime(world.source, want, [ref_wav2vec2(x) for x in
                                                   [*world.samples, WAVES[1].astype(np.float32)]])


def test_base64_wav_files_with_a_hop_give_the_hosts_windows(world):
    want = world.model.predict(world.files, hop_s=0.5)
    assert [len(w) for w in want] == [1, 1, 4]
    status, doc = post_json(world, "kws", audio_doc(world.wavs, hop_s=0.5))
    assert status == 200, doc
    assert_rows(json_outputs(doc), window_rows(want))
    long = world.samples[2]
    check_against_onnxruntime(world.source, [w.result for w in want[2]],
                              [ref_wav2vec2(long[s:s + WAVE_CLIP]) for s in (0, 4000, 8000, 12000)])


@pytest.mark.parametrize("case", ["not-a-wav", "truncated", "other-rate", "hop-zero", "hop-text",
                                  "too-many-windows"])
def test_bad_audio_is_4xx_and_the_server_stays_up(world, case):
    if case == "not-a-wav":
        status, _, body = post_binary(world, "kws", "audio", [b"OggS and then nothing"])
        doc, want = json.loads(body), (400, "ProcessingError", "not a WAV file")
    elif case == "truncated":
        status, _, body = post_binary(world, "kws", "audio", [world.wavs[0][:-100]])
        doc, want = json.loads(body), (400, "ProcessingError", "truncated WAV file")
    elif case == "other-rate":
        status, doc = post_json(world, "kws", audio_doc([riff(1, 1, 16000, 16, bytes(400))]))
        want = (400, "ProcessingError", "16000 Hz audio, the model takes 8000 Hz")
    elif case == "hop-zero":
        status, doc = post_json(world, "kws", audio_doc(world.wavs[:1], hop_s=0))
        want = (400, "ProcessingError", "hop between windows")
    elif case == "hop-text":
        status, doc = post_json(world, "kws", audio_doc(world.wavs[:1], hop_s="0.5"))
        want = (400, "BadInferenceRequest", "hop_s must be a number")
    else:  # 6 + 6 windows of the long clip every 0.25 s, over 6
        status, doc = post_json(world, "kws", audio_doc([world.wavs[2]] * 2, hop_s=0.25))
        want = (413, "InputOverLimit", "12 audio windows, over the limit of 6")
    assert (status, doc["type"]) == want[:2] and want[2] in doc["error"], doc
    status, doc = post_json(world, "kws", audio_doc(world.wavs[:1]))
    assert status == 200
    assert json_outputs(doc)["label"] == [world.model.predict(world.files[0]).label]


# -- the Unix socket and cuvil-agent infer --audio ------------------------------------------------------
def test_the_unix_socket_takes_base64_wav_files_and_a_hop(world):
    request = {"audio": [base64.b64encode(w).decode() for w in world.wavs], "hop_s": 0.5}
    reply = ask_path(world.socket.path, request)
    want = world.model.predict(world.files, hop_s=0.5)
    assert reply["release"] == 1
    got = [[(w["start"], w["end"], w["label"]) for w in r["windows"]] for r in reply["results"]]
    assert got == [[(w.start, w.end, w.result.label) for w in ws] for ws in want]
    np.testing.assert_allclose([w["score"] for r in reply["results"] for w in r["windows"]],
                               [w.result.score for ws in want for w in ws], atol=1e-5)
    assert ask_path(world.socket.path, {"audio": ["bm90IGEgd2F2"]})["type"] == "ProcessingError"
    assert ask_path(world.socket.path, {"audio": world.wavs[0].hex()})["type"] == "BadInferenceRequest"
    assert ask_path(world.socket.path, {"audio": [request["audio"][2]] * 2, "hop_s": 0.25}
                    )["type"] == "InputOverLimit"
    assert ask_path(world.socket.path, {"audio": request["audio"][:1]})["release"] == 1


def agent_infer(world: World, sock: Path, args: list[str], capsys) -> list[str]:
    capsys.readouterr()
    argv = ["infer", "--state-dir", str(world.base / "state"), "--hardware-id", HW, "--socket", str(sock)]
    assert agent_main(argv + args) == 0
    return capsys.readouterr().out.splitlines()


def expected_lines(world: World, hop_s: float | None) -> list[str]:
    """What ``infer --audio`` prints: a line per window, as ``predict`` classifies it on the host (without
    a hop: the clip's one window, its first ``WAVE_CLIP`` samples)."""
    if hop_s is None:
        rows = [(i, 0.0, min(len(x), WAVE_CLIP) / WAVE_RATE, r)
                for i, (x, r) in enumerate(zip(world.samples, world.model.predict(world.files)))]
    else:
        rows = window_rows(world.model.predict(world.files, hop_s=hop_s))
    return [f"{r.label} {r.score:.4f} [{start:.3f}-{end:.3f} s] (release 1): {world.files[i]}"
            for i, start, end, r in rows]


def test_cuvil_agent_infer_audio_is_processed_by_the_agent_or_else_by_the_client(world, capsys, monkeypatch,
                                                                                 tmp_path):
    files = [a for f in world.files for a in ("--audio", str(f))]
    assert agent_infer(world, world.socket.path, files, capsys) == expected_lines(world, None)
    hop = [*files, "--hop", "0.5", "-o", str(tmp_path / "out.json")]
    assert agent_infer(world, world.socket.path, hop, capsys) == expected_lines(world, 0.5)
    records = json.loads((tmp_path / "out.json").read_text())
    assert [len(r["windows"]) for r in records] == [1, 1, 4] and records[2]["input"] == str(world.files[2])
    monkeypatch.setattr(payloads, "load_processor", lambda slot, spec: None)  # an agent that cannot process
    host = ModelHost(Installer(world.base / "state", HW), name="kws")
    server = InferenceServer(world.base / "tensors-only.sock", host, LIMITS)
    try:
        assert ask_path(server.path, {"audio": [base64.b64encode(world.wavs[0]).decode()]})["type"] == \
            "NoProcessing"
        assert agent_infer(world, server.path, hop, capsys) == expected_lines(world, 0.5)
    finally:
        server.close()
        host.close()
    with pytest.raises(SystemExit, match="--hop cuts audio"):
        agent_infer(world, world.socket.path, ["--text", "hi", "--hop", "0.5"], capsys)
