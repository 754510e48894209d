"""Hugging Face-layout sources for ``CuvilModel.from_pretrained`` and ``cuvil-edge build <dir-or-id>``.

A local directory (or a hub id, fetched through ``huggingface_hub`` into its cache, or read from the
cache when offline) holds ``config.json``, the model (the ONNX export, ``model.onnx`` or Optimum's
``onnx/model*.onnx``, or a TFLite model: ``find_model``; else PyTorch weights, exported by
``frontend.torch_export``), a ``tokenizer.json`` for text tasks and a
``preprocessor_config.json`` for images and audio (a feature extractor's: raw waveforms, log-mel / MFCC
frames, or Kaldi filter banks).
This module reads them once, on the host, and writes what a device needs as one normalized
``runtime_wasm.processing.ProcessingConfig``: the device never parses Hugging Face configs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime_wasm.processing import TASKS, ProcessingConfig

from .errors import (
    AmbiguousPretrainedModel,
    MissingPretrainedFile,
    ModelFormatError,
    NotInCache,
    PretrainedError,
    UnknownTask,
)
from .frontend import source_format
from .frontend.torch_export import PYTORCH_WEIGHTS, pytorch_weights, shard_names

#: names people and pipelines use for the tasks cuvil-edge processes
TASK_ALIASES = {"sentiment-analysis": "text-classification", "ner": "token-classification",
                "feature-extraction": "sentence-embeddings", "sentence-similarity": "sentence-embeddings",
                "keyword-spotting": "audio-classification", **{t: t for t in TASKS}}
_ARCHITECTURE_TASKS = (("ForAudioClassification", "audio-classification"),
                       ("ForSequenceClassification", "text-classification"),
                       ("ForTokenClassification", "token-classification"),
                       ("ForImageClassification", "image-classification"))
#: Pillow's resampling enum, as preprocessor configs store it
_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
#: files a hub snapshot needs here (the PyTorch weights only where it has no ONNX or TFLite model)
_HUB_PATTERNS = ["*.json", "*.onnx", "onnx/*", "*.tflite", "*.txt", "*.model"]
#: a source's model, as ``find_model`` and then ``load_source`` look for it
_MODEL_FILES = ("an ONNX export (model.onnx or onnx/model*.onnx; export one, e.g. with `optimum-cli export "
                f"onnx`), a .tflite, or PyTorch weights ({' or '.join(PYTORCH_WEIGHTS)})")
DEFAULT_SEQUENCE = 128


@dataclass(frozen=True)
class PretrainedSource:
    """What ``from_pretrained`` builds from: the model file (ONNX or TFLite), static input shapes and the
    processing."""

    directory: Path
    model_path: Path
    input_shapes: dict[str, list[int]]
    processing: ProcessingConfig
    files: dict[str, bytes]  # the files ``processing`` names (the tokenizer)


def _hub_cache(default: str) -> str:
    """huggingface_hub reads its cache's environment once, when imported: read it again at each call, so
    that ``HF_HUB_CACHE`` or ``HF_HOME`` set later (a test, a notebook) is the cache looked in."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hub")
    return default


def _has_model(directory: Path) -> bool:
    """Whether ``find_model`` finds an ONNX or TFLite model (several TFLite without a name still raise)."""
    try:
        find_model(directory)
    except MissingPretrainedFile:
        return False
    return True


def resolve(path_or_id: str | os.PathLike[str], revision: str | None = None) -> Path:
    """A local directory as is; otherwise a hub id's snapshot directory in the local Hugging Face cache
    (downloaded first unless ``HF_HUB_OFFLINE`` is set; the cache is ``HF_HUB_CACHE``, ``$HF_HOME/hub`` or
    the default). A snapshot with no ONNX or TFLite model gets its PyTorch weights too (the first of
    ``PYTORCH_WEIGHTS`` the repository has, whole or as the shards its index names, to export), and none
    of these is ``MissingPretrainedFile`` naming the id, the cache and the files looked for."""
    path = Path(os.fspath(path_or_id))
    if path.is_dir():
        return path
    if path.exists():
        raise MissingPretrainedFile(f"{path} is a file: from_pretrained takes a model directory or a hub id "
                                    "(an .onnx file loads with CuvilModel.load)")
    repo_id = os.fspath(path_or_id)
    if not _HUB_ID.fullmatch(repo_id):  # a missing path, as for any model file
        raise FileNotFoundError(errno.ENOENT, "no such model directory (and not a hub id)", repo_id)
    try:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise PretrainedError(f"{repo_id}: no such directory; hub ids need huggingface_hub "
                              "(pip install 'cuvil-edge[host]')") from None
    cache = _hub_cache(constants.HF_HUB_CACHE)
    offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    where = f"hub model {repo_id!r}" + (f" at revision {revision!r}" if revision else "")

    def snapshot(rev: str | None, patterns: list[str]) -> Path:
        return Path(snapshot_download(repo_id, revision=rev, cache_dir=cache, local_files_only=offline,
                                      allow_patterns=patterns))

    try:
        directory = snapshot(revision, _HUB_PATTERNS)
    except LocalEntryNotFoundError:
        raise NotInCache(f"{where} is not in the local cache {cache}, and it could not be downloaded"
                         + (" (HF_HUB_OFFLINE is set)" if offline else "")) from None
    except (HfHubHTTPError, ValueError) as exc:  # unknown repository or revision, malformed id
        raise PretrainedError(f"{where}: {exc}") from None
    if _has_model(directory):
        return directory
    for name in PYTORCH_WEIGHTS:  # whole, else the shards of an index (it came with *.json)
        index = directory / f"{name}.index.json"
        if not (directory / name).is_file():
            wanted = shard_names(index) if index.is_file() else [name]
            missing = [n for n in wanted if not (directory / n).is_file()]
            with contextlib.suppress(LocalEntryNotFoundError):  # listed by the hub, not cached, offline
                if missing:  # pinned to the snapshot's commit, which names its directory
                    snapshot(directory.name, missing)
        if (directory / name).is_file() or index.is_file():  # a shard still missing: load_source names it
            return directory
    raise MissingPretrainedFile(
        f"{where} has no model in the cache {cache} (snapshot {directory})"
        + (", and HF_HUB_OFFLINE is set" if offline else " and none could be downloaded")
        + f": looked for {_MODEL_FILES}")


def _json(path: Path, required: bool = True) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise MissingPretrainedFile(f"{path.parent} has no {path.name}")
        return {}
    try:
        data = json.loads(path.read_bytes())
    except ValueError as exc:
        raise PretrainedError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PretrainedError(f"{path} is not a JSON object")
    return data


def find_model(directory: Path) -> Path:
    """The ONNX export first (``model.onnx``, else Optimum's ``onnx/model.onnx``, else the first
    ``onnx/model*.onnx``), as the Hugging Face layout's reference format; else ``model.tflite``, else the
    directory's one ``*.tflite``. Several ``*.tflite`` and none named ``model.tflite``: nothing says
    which is the model (an int8 and a float one, say), so ``AmbiguousPretrainedModel``."""
    for candidate in (directory / "model.onnx", directory / "onnx" / "model.onnx"):
        if candidate.is_file():
            return candidate
    found = sorted((directory / "onnx").glob("model*.onnx"))
    if found:
        return found[0]
    if (directory / "model.tflite").is_file():
        return directory / "model.tflite"
    tflite = sorted(p for p in directory.glob("*.tflite") if p.is_file())
    if len(tflite) > 1:
        raise AmbiguousPretrainedModel(f"{directory} holds {len(tflite)} TFLite models "
                                       f"({', '.join(p.name for p in tflite)}) and no model.tflite: "
                                       "name the one to build model.tflite")
    if not tflite:
        raise MissingPretrainedFile(f"{directory} has no model: looked for {_MODEL_FILES}")
    return tflite[0]


def _has_audio_features(directory: Path) -> bool:
    """A ``preprocessor_config.json`` of a feature extractor (it names a sampling rate), not an image
    processor: what tells ``Wav2Vec2ForSequenceClassification`` from a text classifier."""
    return "sampling_rate" in _json(directory / "preprocessor_config.json", required=False)


def infer_task(config: Mapping[str, Any], directory: Path) -> str:
    """From ``architectures`` (``*ForSequenceClassification``...), else from what the directory holds."""
    audio = _has_audio_features(directory)
    for arch in config.get("architectures") or []:
        for suffix, task in _ARCHITECTURE_TASKS:
            if str(arch).endswith(suffix):
                return "audio-classification" if audio and task == "text-classification" else task
        if str(arch).endswith("Model"):  # a bare encoder: its states pool into sentence embeddings
            return "sentence-embeddings"
    if (directory / "modules.json").is_file() or (directory / "sentence_bert_config.json").is_file():
        return "sentence-embeddings"
    if config.get("id2label") and audio:
        return "audio-classification"
    if config.get("id2label") and (directory / "preprocessor_config.json").is_file():
        return "image-classification"
    if config.get("id2label") and (directory / "tokenizer.json").is_file():
        return "text-classification"
    raise UnknownTask(f"cannot tell the task of {directory} from config.json (architectures "
                      f"{config.get('architectures')}); give task= one of {', '.join(TASK_ALIASES)}")


def _labels(config: Mapping[str, Any]) -> list[str]:
    id2label = config.get("id2label") or {}
    try:
        by_id = {int(k): str(v) for k, v in id2label.items()}
    except (ValueError, AttributeError):
        raise PretrainedError("config.json: id2label must map class ids to names") from None
    return [by_id.get(i, f"LABEL_{i}") for i in range(max(by_id, default=-1) + 1)]


#: ([(input name, dims with None for symbolic ones, is float)], {output name: dims})
ModelIO = tuple[list[tuple[str, list[int | None], bool]], dict[str, list[int | None]]]


def _tflite_io(path: Path) -> ModelIO:
    """Through the TFLite frontend's flatbuffer reader (no interpreter): the entry signature's tensors,
    TFLite order (NHWC), an unknown dim (-1) as None."""
    from .frontend.tflite import entry_io, read_tflite

    _, inputs, outputs = entry_io(read_tflite(path))

    def dims(shape: Sequence[int]) -> list[int | None]:
        return [d if d > 0 else None for d in shape]

    return ([(name, dims(t.shape), t.dtype in ("float32", "float16")) for name, t in inputs],
            {name: dims(t.shape) for name, t in outputs})


def _onnx_io(path: Path) -> ModelIO:
    """Weights not read."""
    import onnx

    try:
        proto = onnx.load(os.fspath(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, ValueError, ... for corrupt files
        raise ModelFormatError(f"{path} is not a readable ONNX model: {exc}") from None
    def dims(v: onnx.ValueInfoProto) -> list[int | None]:
        return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in v.type.tensor_type.shape.dim]

    inits = {t.name for t in proto.graph.initializer}
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    inputs = [(v.name, dims(v), v.type.tensor_type.elem_type in floats)
              for v in proto.graph.input if v.name not in inits]
    return inputs, {v.name: dims(v) for v in proto.graph.output}


#: output ranks each task decodes: [batch, classes], [batch, tokens, classes], states or pooled vectors
_OUTPUT_RANKS = {"text-classification": (2,), "image-classification": (2,), "token-classification": (3,),
                 "sentence-embeddings": (2, 3), "audio-classification": (2,)}


def _check_output(task: str, name: str, dims: list[int | None], labels: list[str]) -> None:
    """The output has the rank the task decodes and, where known, one class per label."""
    if len(dims) not in _OUTPUT_RANKS[task]:
        ranks = " or ".join(map(str, _OUTPUT_RANKS[task]))
        raise PretrainedError(f"a {task} model's output has rank {ranks}, {name!r} has rank {len(dims)}: "
                              "a model for another task? (give task=)")
    if labels and task != "sentence-embeddings" and dims[-1] not in (None, len(labels)):
        raise PretrainedError(f"config.json names {len(labels)} labels, output {name!r} has {dims[-1]} "
                              "classes")


def _sequence_length(config: Mapping[str, Any], tok_config: Mapping[str, Any]) -> int:
    limits = [DEFAULT_SEQUENCE, config.get("max_position_embeddings"), tok_config.get("model_max_length")]
    return min(int(x) for x in limits if isinstance(x, (int, float)) and 0 < x < 1e9)


def _text_processing(directory: Path, config: Mapping[str, Any], inputs: Sequence[str]) -> dict[str, Any]:
    tok_path = directory / "tokenizer.json"
    if not tok_path.is_file():
        raise MissingPretrainedFile(f"{directory} has no tokenizer.json (the fast tokenizer a text model "
                                    "needs; save it with tokenizer.save_pretrained)")
    if "input_ids" not in inputs:
        raise PretrainedError(f"the model takes no input_ids (inputs: {list(inputs)})")
    tok = json.loads(tok_path.read_bytes())
    tok_config = _json(directory / "tokenizer_config.json", required=False)
    padding = tok.get("padding") or {}
    pad_token = padding.get("pad_token") or tok_config.get("pad_token") or "[PAD]"
    if isinstance(pad_token, dict):  # AddedToken serialized by transformers
        pad_token = pad_token.get("content", "[PAD]")
    vocab = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    pad_id = padding.get("pad_id", vocab.get(pad_token, config.get("pad_token_id") or 0))
    return {"tokenizer": "tokenizer.json", "pad_id": int(pad_id), "pad_token": str(pad_token),
            "inputs": {role: role for role in ("input_ids", "attention_mask", "token_type_ids")
                       if role in inputs}}


def _size(value: Any, what: str) -> dict[str, int] | None:
    if value is None:
        return None
    if isinstance(value, int):
        return {"height": value, "width": value}
    if isinstance(value, Mapping) and set(value) in ({"height", "width"}, {"shortest_edge"}):
        return {k: int(v) for k, v in value.items()}
    if isinstance(value, Mapping) and "shortest_edge" in value:  # with longest_edge: not supported here
        return {"shortest_edge": int(value["shortest_edge"])}
    raise PretrainedError(f"preprocessor_config.json: {what} {value!r} is not a size cuvil-edge understands")


def _image_processing(directory: Path, input_name: str, layout: str) -> dict[str, Any]:
    pre = _json(directory / "preprocessor_config.json")
    resample = pre.get("resample", 2)
    if resample not in _RESAMPLE:
        raise PretrainedError(f"preprocessor_config.json: resample {resample} is not supported "
                              f"(only {sorted(_RESAMPLE)}: {sorted(_RESAMPLE.values())})")
    resize = _size(pre.get("size"), "size") if pre.get("do_resize", True) else None
    crop = _size(pre.get("crop_size"), "crop_size") if pre.get("do_center_crop", False) else None
    crop_pct = pre.get("crop_pct")
    if resize and "shortest_edge" in resize and crop_pct and resize["shortest_edge"] < 384:
        edge = resize["shortest_edge"]  # ConvNeXt: resize to edge / crop_pct, then crop edge x edge
        resize, crop = {"shortest_edge": int(edge / crop_pct)}, {"height": edge, "width": edge}
    normalize = pre.get("do_normalize", True)
    rescale = float(pre.get("rescale_factor", 1 / 255)) if pre.get("do_rescale", True) else 1.0
    return {"input": input_name, "layout": layout, "resize": resize, "resample": _RESAMPLE[resample],
            "crop": crop, "rescale": rescale,
            "mean": [float(x) for x in pre.get("image_mean", [0.5] * 3)] if normalize else [0.0] * 3,
            "std": [float(x) for x in pre.get("image_std", [0.5] * 3)] if normalize else [1.0] * 3}


#: feature extractors computing Kaldi filter banks with ``torchaudio.compliance.kaldi.fbank`` (25 ms frames
#: every 10 ms, pre-emphasis 0.97, DC removal, dither off, mels from 20 Hz to Nyquist): the frame window and
#: the scale of the samples each passes. SeamlessM4T (frames stacked in pairs) is not supported.
_KALDI_FBANK = {"ASTFeatureExtractor": ("hanning", 1.0), "Speech2TextFeatureExtractor": ("povey", 32768.0)}
#: ``log_mel`` of a feature extractor -> the log ``processing.json`` names
_LOG_MEL = {"log": "ln", "log10": "log10"}


def _audio_processing(directory: Path, inputs: Sequence[tuple[str, list[int | None], bool]]
                      ) -> tuple[dict[str, Any], list[int | None]]:
    """The audio settings of ``preprocessor_config.json`` (Hugging Face feature-extractor fields) and the
    model input's shape with its clip length filled in where the export leaves it open: one second of
    samples, or Whisper's ``nb_max_frames`` / AST's ``max_length`` / one second of frames."""
    pre = _json(directory / "preprocessor_config.json")
    kind = str(pre.get("feature_extractor_type", ""))
    what = f"preprocessor_config.json ({kind or 'no feature_extractor_type'})"
    if kind == "SeamlessM4TFeatureExtractor":
        raise PretrainedError(f"{what}: stacked Kaldi filter-bank frames are not supported (raw waveforms, "
                              "log-mel and MFCC frames, and AST / Speech2Text filter banks are)")
    floats = [(name, dims) for name, dims, is_float in inputs if is_float]
    if len(floats) != 1:
        raise PretrainedError(f"an audio model takes one float input, this one takes "
                              f"{[n for n, *_ in inputs]}")
    name, dims = floats[0]
    rate = int(pre.get("sampling_rate", 16000))
    audio: dict[str, Any] = {"input": name, "sampling_rate": rate,
                             "normalize": bool(pre.get("do_normalize", False)),
                             "padding_value": float(pre.get("padding_value", 0.0))}
    if kind in _KALDI_FBANK:
        return _fbank_processing(pre, kind, audio, name, dims)
    n_fft = pre.get("n_fft")
    if n_fft is None and kind != "WhisperFeatureExtractor":
        audio["features"] = "waveform"
        return audio, [1, *(d if d is not None else (rate if i == len(dims) - 2 else 1)
                            for i, d in enumerate(dims[1:]))]
    whisper = kind == "WhisperFeatureExtractor"
    n_fft = int(n_fft or 400)
    mels = int(pre.get("num_mel_bins", pre.get("feature_size", 80)))
    mfcc = pre.get("num_mfcc", pre.get("n_mfcc"))
    n_feats = int(mfcc) if mfcc else mels
    hop = int(pre.get("hop_length", 160))
    audio.update({
        "features": "mfcc" if mfcc else "log-mel", "n_fft": n_fft, "hop_length": hop,
        "win_length": int(pre.get("win_length") or n_fft), "num_mel_bins": mels,
        "mel_scale": "slaney" if whisper else str(pre.get("mel_scale", "htk")),
        "mel_norm": "slaney" if whisper else pre.get("norm"), "window": str(pre.get("window", "hann")),
        "f_min": float(pre.get("f_min", pre.get("frequency_min", 0.0))),
        "f_max": float(pre.get("f_max", pre.get("frequency_max", 8000.0 if whisper else rate / 2))),
        "log": "whisper" if whisper else _LOG_MEL.get(pre.get("log_mel", "log")),
        "center": bool(pre.get("center", True)), "normalize": False})
    if audio["log"] is None:
        raise PretrainedError(f"{what}: log_mel {pre.get('log_mel')!r} is not one of {sorted(_LOG_MEL)}")
    if mfcc:
        audio["num_mfcc"] = n_feats
    return audio, _frames_shape(audio, name, dims, n_feats, int(pre.get("nb_max_frames", 1 + rate // hop)))


def _frames_shape(audio: dict[str, Any], name: str, dims: list[int | None], n_feats: int, frames: int
                  ) -> list[int | None]:
    """Set ``audio["frames_axis"]`` from where the input keeps its ``n_feats`` features; the input's shape
    with an open frames dimension set to ``frames``."""
    if len(dims) < 3 or n_feats not in dims[-2:]:
        raise PretrainedError(f"an audio model taking {n_feats} features per frame has an input [batch, "
                              f"(1,) frames, features] or [batch, (1,) features, frames]; {name!r} is {dims}")
    audio["frames_axis"] = -1 if dims[-2] == n_feats else -2
    shape: list[int | None] = [1, *(d if d is not None else 1 for d in dims[1:])]
    if dims[audio["frames_axis"]] is None:
        shape[audio["frames_axis"]] = frames
    return shape


def _fbank_processing(pre: Mapping[str, Any], kind: str, audio: dict[str, Any], name: str,
                      dims: list[int | None]) -> tuple[dict[str, Any], list[int | None]]:
    """AST's and Speech2Text's Kaldi filter banks: frame sizes from the rate, AST's feature normalisation
    ((x - mean) / (2 std) over every frame, padding included) or Speech2Text's utterance CMVN."""
    what = f"preprocessor_config.json ({kind})"
    rate = audio["sampling_rate"]
    win, hop = int(rate * 0.025), int(rate * 0.010)
    window, scale = _KALDI_FBANK[kind]
    mels = int(pre.get("num_mel_bins", pre.get("feature_size", 128)))
    ast = kind == "ASTFeatureExtractor"
    normalize = bool(pre.get("do_normalize", True))
    cmvn = not ast and bool(pre.get("do_ceptral_normalize", True))
    if cmvn and not (pre.get("normalize_means", True) and pre.get("normalize_vars", True)):
        raise PretrainedError(f"{what}: CMVN of means or variances alone is not supported (both or neither)")
    audio.update({
        "features": "fbank", "normalize": False, "win_length": win, "hop_length": hop,
        "n_fft": 1 << (win - 1).bit_length(), "num_mel_bins": mels, "window": window, "preemphasis": 0.97,
        "remove_dc_offset": True, "sample_scale": scale, "f_min": 20.0, "f_max": rate / 2, "cmvn": cmvn,
        "feature_mean": float(pre.get("mean", -4.2677393)) if ast and normalize else 0.0,
        "feature_std": 2.0 * float(pre.get("std", 4.5689974)) if ast and normalize else 1.0})
    if ast:
        audio["padding_value"] = 0.0  # AST pads its frames with zeros, whatever padding_value says
    return audio, _frames_shape(audio, name, dims, mels, int(pre.get("max_length", 1 + (rate - win) // hop)))


def _export_shapes(directory: Path, config: Mapping[str, Any], task: str,
                   given: Mapping[str, Sequence[int]] | None) -> dict[str, list[int]]:
    """The inputs a PyTorch-only checkpoint is exported with, as the ONNX exports of its kind name them:
    token ids, mask (and token types where the config has them) at the sequence length ``load_source``
    uses, or an NCHW image at the processor's size; ``given`` shapes win."""
    given = given or {}
    if task == "image-classification":
        image = _image_processing(directory, "pixel_values", "NCHW")
        size = image["crop"] or image["resize"]
        hw = [size["height"], size["width"]] if size and "height" in size else None
        if hw is None and "pixel_values" not in given:
            raise PretrainedError(f"{directory}: the processor gives no fixed image size to export at: "
                                  "give input_shapes={'pixel_values': [1, 3, H, W]}")
        default = {"pixel_values": [1, int(config.get("num_channels", 3)), *(hw or [0, 0])]}
    else:
        seq = _sequence_length(config, _json(directory / "tokenizer_config.json", required=False))
        types = ["token_type_ids"] if config.get("type_vocab_size") else []
        names = ["input_ids", "attention_mask", *types]
        default = {name: [1, seq] for name in names}
    return {name: [int(d) for d in given.get(name, shape)] for name, shape in default.items()}


def load_source(path_or_id: str | os.PathLike[str], task: str | None = None,
                input_shapes: Mapping[str, Sequence[int]] | None = None,
                revision: str | None = None) -> PretrainedSource:
    """Read a Hugging Face-layout source: its task, static input shapes and device processing."""
    directory = resolve(path_or_id, revision)
    config = _json(directory / "config.json")
    if task is not None and task not in TASK_ALIASES:
        raise UnknownTask(f"unknown task {task!r}; known: {', '.join(TASK_ALIASES)}")
    task = TASK_ALIASES[task] if task is not None else infer_task(config, directory)
    try:
        model_path = find_model(directory)
    except MissingPretrainedFile:
        if not pytorch_weights(directory):
            raise
        from .frontend.torch_export import export_pretrained

        model_path = export_pretrained(directory, task, _export_shapes(directory, config, task, input_shapes))
    tflite = source_format(model_path) == "tflite"
    inputs, outputs = (_tflite_io if tflite else _onnx_io)(model_path)  # named as their import names them
    names = [name for name, _, _ in inputs]
    text = image = audio = None
    if task == "audio-classification":
        audio, shape = _audio_processing(directory, inputs)
        defaults = {audio["input"]: shape}
    elif task == "image-classification":
        # a TFLite model keeps its NHWC input through the import (frontend/tflite/layout.py)
        layout = "NHWC" if tflite else "NCHW"
        pixel = [(name, dims) for name, dims, is_float in inputs if is_float and len(dims) == 4]
        channels = [dims[-1 if layout == "NHWC" else 1] for _, dims in pixel]
        if len(pixel) != 1 or channels[0] not in (None, 3):
            raise PretrainedError(f"an image model takes one {layout} float input of 3 channels, this one "
                                  f"takes {[(name, dims) for name, dims, _ in inputs]}")
        image = _image_processing(directory, pixel[0][0], layout)
        size = image["crop"] or image["resize"]
        hw = [size["height"], size["width"]] if size and "height" in size else [None, None]
        defaults = {pixel[0][0]: [1, *hw, 3] if layout == "NHWC" else [1, 3, *hw]}
    else:
        text = _text_processing(directory, config, names)
        seq = _sequence_length(config, _json(directory / "tokenizer_config.json", required=False))
        defaults = {name: [1, seq] for name in text["inputs"].values()}
    shapes = {}
    for name, dims, _ in inputs:
        given = (input_shapes or {}).get(name)
        fill = defaults.get(name, [1] * len(dims))
        shapes[name] = ([int(d) for d in given] if given is not None
                        else [d if d is not None else (fill[i] or 1) for i, d in enumerate(dims)])
    preferred = {"sentence-embeddings": ("sentence_embedding", "last_hidden_state")}.get(task, ("logits",))
    output = next((o for o in preferred if o in outputs), next(iter(outputs)))
    labels = _labels(config) if task != "sentence-embeddings" else []
    _check_output(task, output, outputs[output], labels)
    processing = ProcessingConfig.from_dict({
        "format": 1, "task": task, "output": output, "labels": labels,
        "text": text, "image": image, "audio": audio,
        "multi_label": config.get("problem_type") == "multi_label_classification", "normalize": True})
    files = {n: (directory / n).read_bytes() for n in processing.files}
    return PretrainedSource(directory, model_path, shapes, processing, files)
