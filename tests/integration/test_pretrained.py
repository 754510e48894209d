"""``from_pretrained``: Hugging Face-layout directories built here (a ``tokenizers`` WordPiece trained on a
small corpus, config.json with id2label, DistilBERT-shaped encoders and a conv net from the zoo with
seeded weights, or TFLite classifiers written with ``tflite_builder``), compiled to wasm and compared with
onnxruntime or LiteRT fed by the same tokenizer or by a numpy preprocessing written here; then the signed
bundle through ``cuvil-agent install`` and ``infer --text``.
No network: hub ids resolve from a local cache laid out here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from ai_edge_litert.interpreter import Interpreter
from huggingface_hub import constants as hf_constants
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

from cuvil_agent.cli import main as agent_main
from cuvil_agent.config import AgentConfig
from cuvil_agent.serve import InferenceServer, ModelHost, infer_items
from cuvil_edge import (
    AmbiguousPretrainedModel,
    CuvilModel,
    MissingPretrainedFile,
    NotInCache,
    PretrainedError,
    Target,
    UnknownTask,
    VocabularyMismatch,
)
from cuvil_edge.cli import main as edge_main
from cuvil_edge.oracle import ort_session
from cuvil_edge.pretrained import load_source
from cuvil_edge.signing import Keyring, build_bundle
from cuvil_edge.testing.broker import LocalBroker, free_port
from ota import Installer, VerificationError
from runtime_wasm import Classification, ProcessingError, Span
from runtime_wasm.loader import load_model_dir
from runtime_wasm.processing import TIE_SLACK, Processor, read_image
from tests.support.fleet import wait_until, write_toml
from tests.support.pretrained import (
    CORPUS,
    HIDDEN,
    IMAGE_CROP,
    IMAGE_LABELS,
    IMAGE_MEAN,
    IMAGE_SHORT,
    IMAGE_STD,
    SEQ,
    SST_CONFIG,
    SST_LABELS,
    encoder_with_head,
    image_dir,
    image_tflite,
    text_dir,
    text_tflite,
    train_tokenizer,
)
from tests.support.pretrained import sst_dir as build_sst_dir

pytestmark = pytest.mark.integration

LONG = "a wonderful film " * 20  # far past SEQ tokens: truncated
TEXTS = ["I love this movie!", "This is terrible.", LONG, "great music", "boring boring boring", "classic"]
NER_LABELS = ["O", "B-PLACE", "I-PLACE", "B-PERSON", "I-PERSON"]
HW = "test-device"
ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 120.0  # a bound for waits on other processes, never a measured time


def bag_classifier(vocab: int, classes: int = 2) -> onnx.ModelProto:
    """Mean of token embeddings under the mask, then a linear layer, with symbolic batch and sequence
    dimensions: ``from_pretrained`` fixes them (``input_shapes``, else batch 1 and 128 tokens)."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal((vocab, HIDDEN)).astype(np.float32), "emb"),
             numpy_helper.from_array(rng.standard_normal((HIDDEN, classes)).astype(np.float32), "w")]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
             helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["mf"], ["m3"], axes=[2]),
             helper.make_node("Mul", ["e", "m3"], ["em"]),
             helper.make_node("ReduceSum", ["em"], ["s"], axes=[1], keepdims=0),
             helper.make_node("ReduceSum", ["mf"], ["n"], axes=[1], keepdims=1),
             helper.make_node("Div", ["s", "n"], ["mean"]),
             helper.make_node("MatMul", ["mean", "w"], ["logits"])]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
           for n in ("input_ids", "attention_mask")]
    g = helper.make_graph(nodes, "bag", ins, [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                                            ["batch", classes])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tokenizer()


@pytest.fixture(scope="module")
def sst_dir(tmp_path_factory, tok) -> Path:
    return build_sst_dir(tmp_path_factory.mktemp("hf") / "tiny-sst", tok)


def reference_feeds(tok_path: Path, texts: list[str], seq: int = SEQ) -> list[dict[str, np.ndarray]]:
    """What onnxruntime is fed: the model's own tokenizer, truncated and padded to ``seq``, one text each."""
    tok = Tokenizer.from_file(str(tok_path))
    tok.enable_truncation(seq)
    tok.enable_padding(length=seq, pad_id=0, pad_token="[PAD]")
    feeds = []
    for t in texts:
        e = tok.encode(t)
        feeds.append({"input_ids": np.array([e.ids], np.int64),
                      "attention_mask": np.array([e.attention_mask], np.int64)})
    return feeds


def ort_run(model_path: Path, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    sess = ort_session(model_path)
    return [sess.run(None, f)[0][0] for f in feeds]


def litert_run(model_path: Path, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """LiteRT's first output for each feed, every input cast to the dtype the model declares for it."""
    it = Interpreter(model_path=str(model_path), num_threads=1)
    it.allocate_tensors()
    out = []
    for f in feeds:
        for d in it.get_input_details():
            it.set_tensor(d["index"], f[d["name"]].astype(d["dtype"]))
        it.invoke()
        out.append(it.get_tensor(it.get_output_details()[0]["index"])[0])
    return out


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# -- text classification ------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_text_classification_matches_onnxruntime_fed_by_the_same_tokenizer(sst_dir, tok, precision):
    assert len(tok.encode(LONG).ids) > SEQ  # the long text really is truncated
    expected = [softmax(y) for y in ort_run(sst_dir / "onnx" / "model.onnx",
                                           reference_feeds(sst_dir / "tokenizer.json", TEXTS))]
    model = CuvilModel.from_pretrained(sst_dir)
    assert model.processing.task == "text-classification"
    calibration = CORPUS if precision == "int8" else None  # static int8 calibrates on texts
    model.optimize(precision=precision, targets=[Target()], calibration=calibration)
    batched = model.predict(TEXTS)
    single = [model.predict(t) for t in TEXTS]
    assert model.spec.extra.get("quantization", {"precision": "fp32"})["precision"] == precision
    assert {SST_LABELS[str(int(np.argmax(p)))] for p in expected} == set(SST_LABELS.values())
    tol = 1e-4 if precision == "fp32" else 0.15  # quantized: the same labels, scores near fp32's
    for p, b, s in zip(expected, batched, single):
        assert isinstance(b, Classification)
        assert b.label == s.label == SST_LABELS[str(int(np.argmax(p)))]
        np.testing.assert_allclose(b.scores, p, atol=tol)
        np.testing.assert_allclose(s.scores, b.scores, atol=1e-6)
        assert b.score == pytest.approx(p.max(), abs=tol)


@pytest.mark.parametrize("ids_dtype", ["int32", "int64"])
def test_tflite_text_classification_matches_litert_fed_by_the_same_tokenizer(tmp_path, tok, ids_dtype):
    """A model.tflite in the Hugging Face layout: found, its inputs (ids as the export types them) read by
    the TFLite frontend, fed by the model's own tokenizer, labelled from config.json."""
    path = text_dir(tmp_path / "tflite-sst", text_tflite(tok.get_vocab_size(), ids_dtype), SST_CONFIG, tok)
    expected = [softmax(y) for y in litert_run(path / "model.tflite",
                                               reference_feeds(path / "tokenizer.json", TEXTS))]
    assert {SST_LABELS[str(int(np.argmax(p)))] for p in expected} == set(SST_LABELS.values())
    model = CuvilModel.from_pretrained(path).optimize("fp32", targets=[Target()])
    assert model.processing.task == "text-classification"
    assert [(t.name, t.dtype) for t in model.spec.inputs] == [("input_ids", ids_dtype),
                                                              ("attention_mask", ids_dtype)]
    for p, got in zip(expected, model.predict(TEXTS)):
        assert got.label == SST_LABELS[str(int(np.argmax(p)))]
        np.testing.assert_allclose(got.scores, p, atol=1e-4)
        assert got.score == pytest.approx(p.max(), abs=1e-4)


def test_cuvil_edge_build_of_a_tflite_directory_makes_a_bundle_inspect_describes(tmp_path, tok, capsys):
    path = text_dir(tmp_path / "tflite-sst", text_tflite(tok.get_vocab_size()), SST_CONFIG, tok)
    out = tmp_path / "tflite-sst.cuvil"
    assert edge_main(["build", str(path), "-o", str(out), "-q", "--targets", "simd128-x86"]) == 0
    capsys.readouterr()
    assert edge_main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "task text-classification" in shown and "'NEGATIVE', 'POSITIVE'" in shown
    ring = Keyring.init(tmp_path / "keys", root_keys=1, root_threshold=1)
    manifest = build_bundle(out, tmp_path / "tflite-sst.cvb", ring.release_keys(), version="1.0.0", release=1,
                            hardware_ids=[HW])
    assert {"processing.json", "tokenizer.json"} <= {f.name for f in manifest.files}
    want = litert_run(path / "model.tflite", reference_feeds(path / "tokenizer.json", TEXTS))
    with load_model_dir(out) as m:  # the device side: the built directory's own processing
        got = Processor.from_dir(out).run(TEXTS, m.predict)
    for g, y in zip(got, want):
        np.testing.assert_allclose(g.scores, softmax(y), atol=1e-4)


def test_symbolic_dims_are_fixed_and_the_last_chunk_padded(tmp_path, tok):
    path = text_dir(tmp_path / "bag", bag_classifier(tok.get_vocab_size()),
                    {"architectures": ["BertForSequenceClassification"], "id2label": SST_LABELS}, tok)
    default = CuvilModel.from_pretrained(path).processor
    assert (default.batch, default.sequence_length) == (1, 128)
    shapes = {"input_ids": [4, 24], "attention_mask": [4, 24]}
    model = CuvilModel.from_pretrained(path, input_shapes=shapes).optimize(targets=[Target()])
    assert [t.shape for t in model.spec.inputs] == [(4, 24), (4, 24)]
    got = model.predict(TEXTS)  # 6 texts: a chunk of 4, then 2 padded to 4; LONG cut to 24 tokens
    expected = ort_run(path / "model.onnx", reference_feeds(path / "tokenizer.json", TEXTS, seq=24))
    assert len(got) == len(TEXTS)
    for g, y in zip(got, expected):
        np.testing.assert_allclose(g.scores, softmax(y), atol=1e-4)


def test_token_classification_spans_follow_the_per_token_labels(tmp_path, tok):
    config = {"architectures": ["DistilBertForTokenClassification"],
              "id2label": {str(i): n for i, n in enumerate(NER_LABELS)}}
    path = text_dir(tmp_path / "ner", encoder_with_head(tok.get_vocab_size(), "token", 5), config, tok)
    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    texts = ["Alice met Bob in Berlin", "Paris and London are cities", LONG]
    got = model.predict(texts)
    feeds = reference_feeds(path / "tokenizer.json", texts)
    encoder = Tokenizer.from_file(str(path / "tokenizer.json"))
    encoder.enable_truncation(SEQ)
    for text, spans, logits in zip(texts, got, ort_run(path / "model.onnx", feeds)):
        e = encoder.encode(text)
        probs = softmax(logits)
        labels = [NER_LABELS[i] for i in probs.argmax(-1)]
        # a reference aggregation: consecutive non-special tokens of one entity (B- starts a new one)
        want: list[tuple[str, int, int, list[float]]] = []
        for t, (special, (start, end)) in enumerate(zip(e.special_tokens_mask, e.offsets)):
            entity = labels[t].split("-")[-1]
            if special or labels[t] == "O":
                continue
            if want and want[-1][0] == entity and not labels[t].startswith("B-") and labels[t - 1] != "O" \
                    and not e.special_tokens_mask[t - 1]:
                want[-1] = (entity, want[-1][1], end, [*want[-1][3], probs[t].max()])
            else:
                want.append((entity, start, end, [probs[t].max()]))
        assert all(isinstance(s, Span) for s in spans)
        assert [(s.label, s.start, s.end) for s in spans] == [w[:3] for w in want]
        np.testing.assert_allclose([s.score for s in spans], [np.mean(w[3]) for w in want], atol=1e-4)
        assert all(s.text == text[s.start:s.end] for s in spans)


def test_sentence_embeddings_are_mean_pooled_and_normalised(tmp_path, tok):
    path = text_dir(tmp_path / "emb", encoder_with_head(tok.get_vocab_size(), "none", 0),
                    {"architectures": ["DistilBertModel"]}, tok)
    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    assert model.processing.task == "sentence-embeddings"
    feeds = reference_feeds(path / "tokenizer.json", TEXTS)
    for got, hidden, f in zip(model.predict(TEXTS), ort_run(path / "model.onnx", feeds), feeds):
        mask = f["attention_mask"][0][:, None]
        mean = (hidden * mask).sum(0) / mask.sum()
        np.testing.assert_allclose(got, mean / np.linalg.norm(mean), atol=1e-4)
        assert np.linalg.norm(got) == pytest.approx(1.0, abs=1e-5)


# -- image classification -----------------------------------------------------------------------------
def reference_preprocess(image: np.ndarray, short: int, crop: int, mean, std) -> np.ndarray:
    """Written out per output sample: Pillow's antialiased bilinear resize of the short side to ``short``,
    a center crop, 1/255, normalisation, CHW."""
    def resize_axis(x: np.ndarray, n_out: int) -> np.ndarray:
        n_in = x.shape[0]
        scale = n_in / n_out
        support = max(scale, 1.0)
        rows = []
        for i in range(n_out):
            center = (i + 0.5) * scale
            w = np.array([max(0.0, 1 - abs((j + 0.5 - center) / support)) for j in range(n_in)])
            rows.append(np.tensordot(w / w.sum(), x, axes=(0, 0)))
        return np.stack(rows)

    h, w = image.shape[:2]
    nh, nw = (short, int(short * w / h)) if h <= w else (int(short * h / w), short)
    x = resize_axis(image.astype(np.float64), nh)
    x = resize_axis(x.transpose(1, 0, 2), nw).transpose(1, 0, 2)
    x = np.clip(np.floor(x + 0.5 + TIE_SLACK), 0, 255)  # half up: Pillow's rounding
    top, left = (nh - crop) // 2, (nw - crop) // 2
    x = x[top:top + crop, left:left + crop] / 255.0
    return ((x - mean) / std).transpose(2, 0, 1).astype(np.float32)


def sample_images() -> list[np.ndarray]:
    """Landscape, portrait and square HWC uint8 images, each resized then cropped (the first two with dozens
    of samples exactly halfway between two levels, which round alike however the sums are ordered)."""
    rng = np.random.default_rng(5)
    return [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), rng.integers(0, 256, (70, 50, 3), np.uint8),
            rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)]


def test_image_classification_top5_matches_onnxruntime_with_numpy_preprocessing(tmp_path):
    path = image_dir(tmp_path / "tiny-resnet")
    images = sample_images()
    np.save(tmp_path / "img.npy", images[1])
    ppm = tmp_path / "img.ppm"
    ppm.write_bytes(b"P6\n# a comment\n64 48\n255\n" + images[0].tobytes())
    np.testing.assert_array_equal(read_image(ppm), images[0])

    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    assert model.processing.task == "image-classification"
    got = model.predict(images)  # batch 2: a full chunk, then one image padded
    from_files = model.predict([str(ppm), tmp_path / "img.npy"])
    sess = ort_session(path / "model.onnx")
    for i, (image, result) in enumerate(zip(images, got)):
        x = reference_preprocess(image, IMAGE_SHORT, IMAGE_CROP, np.array(IMAGE_MEAN), np.array(IMAGE_STD))
        logits = sess.run(None, {"x": np.stack([x, x])})[0][0]
        order = np.argsort(-logits)[:5]
        assert [label for label, _ in result.top(5)] == [IMAGE_LABELS[str(k)] for k in order]
        np.testing.assert_allclose(result.scores, softmax(logits), atol=1e-4)
        if i < 2:
            np.testing.assert_allclose(from_files[i].scores, result.scores, atol=1e-6)


def test_tflite_nhwc_image_classification_top5_matches_litert_with_numpy_preprocessing(tmp_path):
    """The TFLite model keeps its NHWC input through the import, so the processing lays the preprocessed
    image out HWC for it (``layout`` NHWC in processing.json)."""
    path = image_dir(tmp_path / "tflite-cnn", image_tflite(batch=2))
    images = sample_images()
    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    assert model.processing.image["layout"] == "NHWC"
    assert [t.shape for t in model.spec.inputs] == [(2, IMAGE_CROP, IMAGE_CROP, 3)]
    got = model.predict(images)  # batch 2: a full chunk, then one image padded
    for image, result in zip(images, got):
        x = reference_preprocess(image, IMAGE_SHORT, IMAGE_CROP, np.array(IMAGE_MEAN), np.array(IMAGE_STD))
        hwc = x.transpose(1, 2, 0)
        logits = litert_run(path / "model.tflite", [{"pixel_values": np.stack([hwc, hwc])}])[0]
        order = np.argsort(-logits)[:5]
        assert [label for label, _ in result.top(5)] == [IMAGE_LABELS[str(k)] for k in order]
        np.testing.assert_allclose(result.scores, softmax(logits), atol=1e-4)


# -- the bundle on a device ---------------------------------------------------------------------------
class SignedSst:
    """The directory built by ``cuvil-edge build``, signed as release 1, and what the host predicts for
    the first text."""

    def __init__(self, sst_dir: Path, base: Path) -> None:
        self.out = base / "tiny-sst.cuvil"
        assert edge_main(["build", str(sst_dir), "-o", str(self.out), "-q", "--targets", "simd128-x86"]) == 0
        self.expected = CuvilModel.from_pretrained(sst_dir).optimize(targets=[Target()]).predict(TEXTS[0])
        self.ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1)
        self.bundle = base / "tiny-sst.cvb"
        self.manifest = build_bundle(self.out, self.bundle, self.ring.release_keys(), version="1.0.0",
                                     release=1, hardware_ids=[HW])
        self.root = base / "root.json"
        self.root.write_text(json.dumps(self.ring.root_envelope()))

    def line(self, text: str) -> str:
        """What ``cuvil-agent infer --text`` prints for ``text`` when it gets the host's answer."""
        return f"{self.expected.label} {self.expected.score:.4f} (release 1): {text}"


@pytest.fixture(scope="module")
def signed_sst(sst_dir, tmp_path_factory) -> SignedSst:
    return SignedSst(sst_dir, tmp_path_factory.mktemp("signed-sst"))


def test_bundle_from_the_directory_installs_and_cuvil_agent_infers_text(signed_sst, tmp_path, capsys):
    assert edge_main(["inspect", str(signed_sst.out)]) == 0
    shown = capsys.readouterr().out
    assert "task text-classification" in shown and "'NEGATIVE', 'POSITIVE'" in shown
    assert {"processing.json", "tokenizer.json"} <= {f.name for f in signed_sst.manifest.files}

    tampered = tmp_path / "tampered.cvb"
    data = bytearray(signed_sst.bundle.read_bytes())
    at = data.index(b"WordPiece", data.index(b"CUVILBN1") + 200)  # inside the tokenizer payload
    data[at] ^= 0x20
    tampered.write_bytes(bytes(data))
    state = tmp_path / "state"
    with pytest.raises(VerificationError):
        Installer(state, HW, root=signed_sst.ring.root_envelope()).install(tampered)
    shutil.rmtree(state)

    assert agent_main(["install", str(signed_sst.bundle), "--state-dir", str(state), "--root",
                       str(signed_sst.root), "--hardware-id", HW]) == 0
    host = ModelHost(Installer(state, HW))
    server = InferenceServer(tmp_path / "infer.sock", host)
    try:
        capsys.readouterr()
        assert agent_main(["infer", "--state-dir", str(state), "--hardware-id", HW, "--socket",
                           str(server.path), "--text", TEXTS[0], "--text", LONG,
                           "-o", str(tmp_path / "out.json")]) == 0
        printed = capsys.readouterr().out.splitlines()
    finally:
        server.close()
        host.close()
    assert printed[0] == signed_sst.line(TEXTS[0])
    records = json.loads((tmp_path / "out.json").read_text())
    assert records[0]["label"] == signed_sst.expected.label and len(records) == 2


def test_the_agent_daemon_serves_the_bundle_and_cuvil_agent_infer_text_prints_its_label(signed_sst, tmp_path):
    """What a device runs, each a ``cuvil-agent`` process reading one agent.toml: ``install`` the signed
    bundle, ``run`` the daemon (its Unix socket, its broker connection), ``infer --text "I love this
    movie!"``; the daemon itself tokenizes and labels (it answers a processed request)."""
    cli = [sys.executable, "-m", "cuvil_agent.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def agent(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                              timeout=WAIT_S)

    with LocalBroker(tmp_path / "broker") as broker:
        cfg = AgentConfig(device_id="sst0", fleet="pretrained", state_dir=str(tmp_path / "state"),
                          hardware_id=HW, trust_root=str(signed_sst.root),
                          socket=str(tmp_path / "infer.sock"), log_file=str(tmp_path / "agent.log"),
                          telemetry_interval_s=0, broker=broker.settings())
        toml = str(write_toml(cfg, tmp_path / "agent.toml"))
        installed = agent("install", str(signed_sst.bundle), "--config", toml)
        assert installed.returncode == 0, installed.stderr
        assert (f"installed {signed_sst.manifest.name} 1.0.0 (release 1): self-test passed, now active"
                in installed.stdout.splitlines())
        daemon = subprocess.Popen([*cli, "run", "--config", toml], cwd=ROOT, env=env, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: Path(cfg.socket).exists() or daemon.poll() is not None, "the socket", WAIT_S)
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            assert infer_items(cfg.socket, texts=[TEXTS[0]], timeout_s=WAIT_S) is not None  # it processes
            answered = agent("infer", "--config", toml, "--text", TEXTS[0])
        finally:
            daemon.send_signal(signal.SIGTERM)
            code = daemon.wait(WAIT_S)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.splitlines() == [signed_sst.line(TEXTS[0])]
    assert code == 0, daemon.stderr.read() if daemon.stderr else ""


# -- sources and errors -------------------------------------------------------------------------------
def hub_cache(cache: Path, repo: str, source: Path) -> None:
    """The layout huggingface_hub keeps: refs/main names a snapshot directory holding the files."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    base = cache / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(commit)
    shutil.copytree(source, base / "snapshots" / commit)


def test_hub_id_resolves_from_the_local_cache_offline_or_names_id_and_cache(sst_dir, tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    # not offline, but no network: the hub endpoint is a loopback port nothing listens on
    monkeypatch.setattr(hf_constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(NotInCache, match=rf"'acme/tiny-sst' is not in the local cache {cache}, and it could "
                                         r"not be downloaded$"):
        CuvilModel.from_pretrained("acme/tiny-sst")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(NotInCache, match=rf"'acme/tiny-sst'.*{cache}.*HF_HUB_OFFLINE is set"):
        CuvilModel.from_pretrained("acme/tiny-sst")
    hub_cache(cache, "acme/tiny-sst", sst_dir)
    model = CuvilModel.from_pretrained("acme/tiny-sst").optimize(targets=[Target()])
    local = CuvilModel.from_pretrained(sst_dir).optimize(targets=[Target()])
    text = "I love this movie!"
    assert model.predict(text).scores.tolist() == local.predict(text).scores.tolist()


def test_missing_files_unknown_task_and_a_too_small_embedding_table_are_typed_errors(sst_dir, tmp_path, tok):
    for missing in ("config.json", "tokenizer.json", "onnx"):
        broken = Path(shutil.copytree(sst_dir, tmp_path / f"no-{missing}"))
        (shutil.rmtree if missing == "onnx" else Path.unlink)(broken / missing)
        with pytest.raises(MissingPretrainedFile, match=missing.split(".")[0]):
            CuvilModel.from_pretrained(broken)
    no_preprocessor = image_dir(tmp_path / "no-preprocessor")
    (no_preprocessor / "preprocessor_config.json").unlink()
    with pytest.raises(MissingPretrainedFile, match="preprocessor_config.json"):
        CuvilModel.from_pretrained(no_preprocessor)
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        CuvilModel.from_pretrained(str(tmp_path / "nowhere") + "/")
    with pytest.raises(UnknownTask, match="summarization"):
        CuvilModel.from_pretrained(sst_dir, task="summarization")
    with pytest.raises(PretrainedError, match="rank 3, 'logits' has rank 2"):  # a classifier is no tagger
        CuvilModel.from_pretrained(sst_dir, task="ner")
    bare = Path(shutil.copytree(sst_dir, tmp_path / "bare"))
    (bare / "config.json").write_text(json.dumps({"model_type": "distilbert"}))
    with pytest.raises(UnknownTask, match="config.json"):
        CuvilModel.from_pretrained(bare)
    small = text_dir(tmp_path / "small-vocab", encoder_with_head(tok.get_vocab_size() - 10, "cls", 2),
                     {"architectures": ["DistilBertForSequenceClassification"], "id2label": SST_LABELS}, tok)
    with pytest.raises(VocabularyMismatch, match=f"{tok.get_vocab_size()} tokens"):
        CuvilModel.from_pretrained(small)


def test_the_onnx_export_goes_before_a_tflite_and_several_tflite_need_a_model_tflite(sst_dir, tmp_path, tok):
    """Precedence: model.onnx / onnx/model*.onnx, then model.tflite, then a lone *.tflite; two *.tflite and
    no model.tflite is ambiguous. The vocabulary check reads the TFLite embedding table too."""
    both = Path(shutil.copytree(sst_dir, tmp_path / "both"))
    (both / "model.tflite").write_bytes(text_tflite(tok.get_vocab_size()))
    assert load_source(both).model_path == both / "onnx" / "model.onnx"
    lone = text_dir(tmp_path / "lone", text_tflite(tok.get_vocab_size()), SST_CONFIG, tok)
    (lone / "model.tflite").rename(lone / "sst-float.tflite")
    assert load_source(lone).model_path == lone / "sst-float.tflite"
    (lone / "sst-int64.tflite").write_bytes(text_tflite(tok.get_vocab_size(), "int64"))
    with pytest.raises(AmbiguousPretrainedModel, match="sst-float.tflite, sst-int64.tflite.*model.tflite"):
        CuvilModel.from_pretrained(lone)
    (lone / "sst-int64.tflite").rename(lone / "model.tflite")
    assert CuvilModel.from_pretrained(lone).graph.inputs[0].type.dtype == "int64"
    small = text_dir(tmp_path / "small-tflite", text_tflite(tok.get_vocab_size() - 10), SST_CONFIG, tok)
    with pytest.raises(VocabularyMismatch, match=f"{tok.get_vocab_size()} tokens.*only "
                                                 f"{tok.get_vocab_size() - 10} rows"):
        CuvilModel.from_pretrained(small)


def test_device_processing_refuses_a_config_naming_a_path_outside_the_model(sst_dir, tmp_path):
    out = CuvilModel.from_pretrained(sst_dir).optimize(targets=[Target()]).save(tmp_path / "m.cuvil")
    config = json.loads((out / "processing.json").read_text())
    assert Processor.from_dir(out).config.labels == ("NEGATIVE", "POSITIVE")
    config["text"]["tokenizer"] = "../tokenizer.json"
    (out / "processing.json").write_text(json.dumps(config))
    with pytest.raises(ProcessingError, match="not a plain file name"):
        Processor.from_dir(out)


def test_device_labels_texts_with_the_host_packages_blocked(sst_dir, tmp_path):
    """The device side (``runtime_wasm.processing`` + the loader) needs numpy and tokenizers only."""
    out = CuvilModel.from_pretrained(sst_dir).optimize(targets=[Target()]).save(tmp_path / "m.cuvil")
    want = CuvilModel.from_pretrained(sst_dir).optimize(targets=[Target()]).predict(TEXTS)
    script = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {{"cuvil_edge", "onnx", "onnxruntime", "ziglang", "huggingface_hub"}}:
            raise ImportError("host-only module imported on the device: " + name)
sys.meta_path.insert(0, Block())
from runtime_wasm.loader import load_model_dir
from runtime_wasm.processing import Processor
with load_model_dir({str(out)!r}) as m:
    for r in Processor.from_dir({str(out)!r}).run({TEXTS!r}, m.predict):
        print(r.label, repr(r.score))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{r.label} {r.score!r}" for r in want]
