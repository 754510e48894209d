"""Shared builders of Hugging Face-layout model directories for the ``from_pretrained`` tests and the
serving tests of processed models: a ``tokenizers`` WordPiece trained on a small corpus, DistilBERT-shaped
encoders with seeded heads, a ResNet image classifier with its preprocessor config, TFLite text and image
classifiers (``tflite_builder``, no TensorFlow), and seeded keyword spotters with a feature extractor's
config, test clips and WAV files. No network."""

from __future__ import annotations

import hashlib
import json
import os
import wave
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from cuvil_edge.testing.zoo import NetBuilder, audio, resnet
from cuvil_edge.testing.zoo_transformers import bert_encoder
from tests.support.tflite_builder import TfliteBuilder

SEQ = 16
HIDDEN = 64
CORPUS = ["I love this movie!", "This is terrible.", "What a wonderful day", "the plot was boring and slow",
          "great acting, great music", "I hated every minute of it", "an instant classic",
          "not my cup of tea", "Paris and London are cities", "Alice met Bob in Berlin"] * 3
SST_LABELS = {"0": "NEGATIVE", "1": "POSITIVE"}
SST_CONFIG = {"architectures": ["DistilBertForSequenceClassification"], "id2label": SST_LABELS,
              "max_position_embeddings": 512}
#: the image classifier's preprocessing: short side resized to IMAGE_SHORT, center crop IMAGE_CROP
IMAGE_SHORT, IMAGE_CROP = 40, 32
IMAGE_MEAN, IMAGE_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
IMAGE_LABELS = {str(i): f"class{i}" for i in range(10)}


def train_tokenizer() -> Tokenizer:
    """A WordPiece trained on ``CORPUS`` until every word is one token, then kept to its whole words and
    characters in sorted order: training breaks ties between merges in hash order (the intermediate
    pieces and the ids differ from run to run), and the test needs the same tokenizer every run."""
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trained = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    trained.normalizer = normalizers.BertNormalizer(lowercase=True)
    trained.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trained.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=1000, special_tokens=special))
    words = {w for text in CORPUS for w, _ in trained.pre_tokenizer.pre_tokenize_str(text.lower())}
    learned = set(trained.get_vocab())
    assert words <= learned
    kept = {t for t in learned - set(special) if len(t.removeprefix("##")) == 1 or t in words}
    vocab = special + sorted(kept)
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = trained.normalizer, trained.pre_tokenizer
    tok.add_special_tokens(special)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok


def encoder_with_head(vocab: int, head: str, classes: int, shift: float = 0.0) -> onnx.ModelProto:
    """``bert_encoder`` (2 layers, DistilBERT-shaped) plus a seeded head: "cls" (sequence classification
    from the first token), "token" (a class per token) or "none" (hidden states for embeddings).
    ``shift`` is added to the last class's bias."""
    m = bert_encoder(layers=2, hidden=HIDDEN, heads=2, ffn=128, seq=SEQ, vocab=vocab, seed=0)
    if head == "none":
        return m
    g = m.graph
    del g.output[:]
    rng = np.random.default_rng(1)
    g.initializer.extend([
        numpy_helper.from_array((rng.standard_normal((HIDDEN, classes)) * 0.8).astype(np.float32), "head_w"),
        numpy_helper.from_array((rng.standard_normal(classes) * 0.1 + np.eye(classes)[-1] * shift
                                 ).astype(np.float32), "head_b")])
    if head == "token":
        g.node.extend([helper.make_node("MatMul", ["last_hidden_state", "head_w"], ["head_mm"]),
                       helper.make_node("Add", ["head_mm", "head_b"], ["logits"])])
        g.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, SEQ, classes]))
    else:
        g.initializer.append(numpy_helper.from_array(np.array(0, np.int64), "cls_index"))
        g.node.extend([helper.make_node("Gather", ["last_hidden_state", "cls_index"], ["cls"], axis=1),
                       helper.make_node("Gemm", ["cls", "head_w", "head_b"], ["logits"])])
        g.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes]))
    onnx.checker.check_model(m)
    return m


def save_model(model: onnx.ModelProto | bytes, path: Path, onnx_name: str = "model.onnx") -> None:
    """An ONNX model as ``onnx_name`` in directory ``path``, a TFLite one (its bytes) as model.tflite."""
    if isinstance(model, bytes):
        (path / "model.tflite").write_bytes(model)
    else:
        onnx.save(model, str(path / onnx_name))


def text_dir(path: Path, model: onnx.ModelProto | bytes, config: dict, tok: Tokenizer,
             optimum: bool = False) -> Path:
    """A Hugging Face-layout directory; ``optimum``: the ONNX export under onnx/ as Optimum writes it."""
    path.mkdir(parents=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512, "pad_token": "[PAD]"}))
    (path / "config.json").write_text(json.dumps(config))
    if optimum:
        (path / "onnx").mkdir()
    save_model(model, path, "onnx/model.onnx" if optimum else "model.onnx")
    return path


def sst_dir(path: Path, tok: Tokenizer) -> Path:
    """The DistilBERT-shaped sentiment classifier, exported under onnx/ as Optimum does."""
    # the shift centres the seeded head: test texts get both labels, each with a margin int8 and int4 keep
    model = encoder_with_head(tok.get_vocab_size(), "cls", 2, shift=5.6)
    return text_dir(path, model, SST_CONFIG, tok, optimum=True)


def image_dir(path: Path, model: onnx.ModelProto | bytes | None = None) -> Path:
    """An image classifier (default: a ResNet, batch 2, 32x32) with a preprocessor config: bilinear resize
    of the short side, center crop, 1/255, ImageNet mean and std."""
    path.mkdir(parents=True)
    (path / "preprocessor_config.json").write_text(json.dumps({
        "do_resize": True, "size": {"shortest_edge": IMAGE_SHORT}, "resample": 2, "do_center_crop": True,
        "crop_size": {"height": IMAGE_CROP, "width": IMAGE_CROP}, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": IMAGE_MEAN, "image_std": IMAGE_STD}))
    (path / "config.json").write_text(json.dumps({"architectures": ["ResNetForImageClassification"],
                                                  "id2label": IMAGE_LABELS}))
    save_model(resnet(batch=2, size=IMAGE_CROP) if model is None else model, path)
    return path


def _seeded(b: TfliteBuilder, seed: int):
    """``w(*shape, scale=0.3)``: a seeded float32 constant of ``b``."""
    rng = np.random.default_rng(seed)

    def w(*shape: int, scale: float = 0.3) -> int:
        return b.const(f"w{len(b.tensors)}", (rng.standard_normal(shape) * scale).astype(np.float32))

    return w


def text_tflite(vocab: int, ids_dtype: str = "int32", seq: int = SEQ, shift: float = 0.0) -> bytes:
    """A bag-of-words sentiment classifier as a TFLite export has it: input_ids and attention_mask of
    ``ids_dtype``, the embedding rows (GATHER) averaged under the mask (CAST, MUL, SUM, DIV), then two
    FULLY_CONNECTED layers to the two SST labels' logits; ``shift`` is added to the last logit's bias."""
    b = TfliteBuilder()
    w = _seeded(b, 4)
    ids, mask = b.tensor("input_ids", (1, seq), ids_dtype), b.tensor("attention_mask", (1, seq), ids_dtype)
    emb, maskf, mask3 = (b.tensor("emb", (1, seq, HIDDEN)), b.tensor("mask_f", (1, seq)),
                         b.tensor("mask_3d", (1, seq, 1)))
    b.op("GATHER", [w(vocab, HIDDEN, scale=1.0), ids], [emb], ("GatherOptions", {"Axis": 0}))
    b.op("CAST", [mask], [maskf])
    b.op("RESHAPE", [maskf, b.const("mask_shape", np.array([1, seq, 1], np.int32))], [mask3])
    masked, total, count = (b.tensor("masked", (1, seq, HIDDEN)), b.tensor("total", (1, HIDDEN)),
                            b.tensor("count", (1, 1)))
    b.op("MUL", [emb, mask3], [masked], ("MulOptions", {}))
    axis = b.const("seq_axis", np.array([1], np.int32))
    b.op("SUM", [masked, axis], [total], ("ReducerOptions", {"KeepDims": False}))
    b.op("SUM", [maskf, axis], [count], ("ReducerOptions", {"KeepDims": True}))
    mean, hidden = b.tensor("mean", (1, HIDDEN)), b.tensor("hidden", (1, 32))
    logits = b.tensor("logits", (1, 2))
    b.op("DIV", [total, count], [mean], ("DivOptions", {}))
    b.op("FULLY_CONNECTED", [mean, w(32, HIDDEN), w(32, scale=0.1)], [hidden],
         ("FullyConnectedOptions", {"FusedActivationFunction": 1}))
    b.op("FULLY_CONNECTED", [hidden, w(2, 32, scale=1.0), b.const("b2", np.array([0.0, shift], np.float32))],
         [logits], ("FullyConnectedOptions", {}))
    return b.build([ids, mask], [logits])


def image_tflite(batch: int = 2) -> bytes:
    """An NHWC CNN over IMAGE_CROP x IMAGE_CROP RGB: CONV_2D (stride 2, RELU6), DEPTHWISE_CONV_2D,
    MAX_POOL_2D, then a flatten read by FULLY_CONNECTED: the logits depend on where each pixel and channel
    sits, so an image fed in another layout or channel order gives other scores."""
    b = TfliteBuilder()
    w = _seeded(b, 6)
    half, pooled, classes = IMAGE_CROP // 2, IMAGE_CROP // 8, len(IMAGE_LABELS)
    x = b.tensor("pixel_values", (batch, IMAGE_CROP, IMAGE_CROP, 3))
    c1, d1 = b.tensor("conv", (batch, half, half, 8)), b.tensor("depthwise", (batch, half, half, 8))
    b.op("CONV_2D", [x, w(8, 3, 3, 3), w(8)], [c1],
         ("Conv2DOptions", {"Padding": 0, "StrideH": 2, "StrideW": 2, "FusedActivationFunction": 3}))
    b.op("DEPTHWISE_CONV_2D", [c1, w(1, 3, 3, 8), w(8)], [d1],
         ("DepthwiseConv2DOptions", {"Padding": 0, "StrideH": 1, "StrideW": 1, "DepthMultiplier": 1}))
    pool, flat = b.tensor("pool", (batch, pooled, pooled, 8)), b.tensor("flat", (batch, pooled * pooled * 8))
    b.op("MAX_POOL_2D", [d1], [pool], ("Pool2DOptions", {"Padding": 1, "StrideH": 4, "StrideW": 4,
                                                           "FilterHeight": 4, "FilterWidth": 4}))
    b.op("RESHAPE", [pool, b.const("flat_shape", np.array([batch, -1], np.int32))], [flat])
    logits = b.tensor("logits", (batch, classes))
    b.op("FULLY_CONNECTED", [flat, w(classes, pooled * pooled * 8), w(classes)], [logits],
         ("FullyConnectedOptions", {}))
    return b.build([x], [logits])


KEYWORDS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", "silence", "unknown"]
ID2LABEL = {str(i): k for i, k in enumerate(KEYWORDS)}


def audio_dir(path: Path, model: onnx.ModelProto, preprocessor: dict, architecture: str) -> Path:
    """A keyword spotter's directory: config.json with the keywords as id2label, the feature extractor's
    preprocessor_config.json, the model."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"architectures": [architecture], "id2label": ID2LABEL}))
    (path / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    onnx.save(model, str(path / "model.onnx"))
    return path


def feature_net(shape: list[int], features_first: bool) -> onnx.ModelProto:
    """A seeded conv classifier over [1, feats, frames] (Conv1d) or [1, 1, frames, feats] (Conv2d)."""
    b = NetBuilder("kws", seed=3)
    if features_first:
        y = b.conv_bn(b.conv_bn("x", shape[1], 24, (3,)), 24, 24, (3,), dilation=2)
    else:
        y = b.conv_bn(b.conv_bn("x", 1, 8, 3, stride=2), 8, 24, 3, stride=2)
    return b.build([("x", shape)], b.head(y, 24, len(KEYWORDS)), [shape[0], len(KEYWORDS)])


def clips(rate: int, seconds: list[float], seed: int = 0) -> list[np.ndarray]:
    """Tones with noise, one per length (shorter and longer than a model's clip: padded / cut)."""
    rng = np.random.default_rng(seed)
    out = []
    for k, s in enumerate(seconds):
        t = np.arange(int(rate * s)) / rate
        out.append(0.3 * np.sin(2 * np.pi * (300 + 500 * k) * t) + 0.05 * rng.standard_normal(t.size))
    return out


def write_wav(path: Path, x: np.ndarray, rate: int) -> np.ndarray:
    """16-bit mono PCM with the stdlib ``wave`` module; returns the samples as the file holds them."""
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return pcm / 32768.0


#: the waveform keyword spotter's rate and clip (half a second), batch 2
WAVE_RATE, WAVE_CLIP = 8000, 4000


def wave_dir(path: Path) -> Path:
    """A Wav2Vec2-style keyword spotter on raw waveforms: each clip normalised to zero mean and unit
    variance, then padded or cut to ``WAVE_CLIP`` samples."""
    return audio_dir(path, audio(batch=2, length=WAVE_CLIP), {
        "feature_extractor_type": "Wav2Vec2FeatureExtractor", "feature_size": 1, "sampling_rate": WAVE_RATE,
        "padding_value": 0.0, "do_normalize": True, "return_attention_mask": False},
        "Wav2Vec2ForSequenceClassification")


COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def hub_cache(cache: Path, repo: str, source: Path, names: list[str]) -> Path:
    """``names`` of ``source`` cached for ``repo`` as huggingface_hub caches a download: each file a blob
    named by its digest, linked from ``snapshots/<commit>/``; ``refs/main`` names the commit."""
    base = cache / f"models--{repo.replace('/', '--')}"
    snapshot = base / "snapshots" / COMMIT
    (base / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(COMMIT)
    for name in names:
        data = (source / name).read_bytes()
        blob = base / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot
