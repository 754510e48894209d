"""Pre- and post-processing that travels in a bundle: texts, images or waveforms in, labels, spans or
embeddings out.

The host (``cuvil_edge.pretrained``) translates a Hugging Face directory's configs into one normalized
``processing.json`` next to the model's spec; a device reads only that, with numpy and, for text models,
the optional ``tokenizers`` wheel (``pip install 'cuvil-edge[text]'``). The compiled model has a fixed
batch and sequence length, so items run in chunks of the batch (the last one padded), texts are
truncated to the sequence length and waveforms padded or cut to the model's clip, or cut into windows of
it with a hop (``run_windows``).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ProcessingError

PROCESSING_FILE = "processing.json"
PROCESSING_FORMAT = 1
TASKS = ("text-classification", "token-classification", "sentence-embeddings", "image-classification",
         "audio-classification")
TEXT_ROLES = ("input_ids", "attention_mask", "token_type_ids")
RESAMPLE = ("nearest", "bilinear", "bicubic")
#: an image model's input layout: ONNX exports take NCHW (the default, what configs without ``layout``
#: mean), TFLite models NHWC, which their import keeps at the model's inputs
IMAGE_LAYOUTS = ("NCHW", "NHWC")
#: what an audio model takes: the (normalised) waveform itself, log-mel frames, MFCCs of them, or Kaldi
#: filter banks (``compute-fbank-feats``, as ``torchaudio.compliance.kaldi.fbank``: AST, Speech2Text)
AUDIO_FEATURES = ("waveform", "log-mel", "mfcc", "fbank")
MEL_SCALES = ("htk", "slaney")
WINDOWS = ("hann", "hamming")
#: Kaldi's frame windows (symmetric; povey: hann to the power 0.85)
KALDI_WINDOWS = ("povey", "hanning", "hamming", "rectangular")
#: log of the mel energies: natural, log10, or Whisper's (log10, floored 8 below the clip's peak, (x+4)/4)
AUDIO_LOGS = ("ln", "log10", "whisper")
#: energies below this are floored before the log (Hugging Face's ``mel_floor``)
MEL_FLOOR = 1e-10
#: Kaldi's floor before the log of its filter-bank energies: float32's epsilon
KALDI_FLOOR = float(np.finfo(np.float32).eps)
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

#: name -> (shape, dtype) of each model input, as in the model's spec
InputShapes = Mapping[str, tuple[Sequence[int], str]]
#: an image: HWC (or HW) uint8 array, or a path to a .npy, binary .ppm/.pgm or (with Pillow) any image file
Image = np.ndarray | str | os.PathLike
#: a waveform: 1-D float samples at the model's rate in [-1, 1], or a .wav file's path or bytes
Audio = np.ndarray | str | os.PathLike | bytes
Predict = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]


@dataclass(frozen=True, eq=False)
class Classification:
    """One text's, image's or clip's class: the top label, its probability and every class's
    probability."""

    label: str
    score: float
    index: int
    scores: np.ndarray
    labels: tuple[str, ...] = field(default=(), repr=False)  # the model's, to name ``top``'s classes

    def top(self, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` most probable (label, probability) pairs, best first."""
        order = np.argsort(-self.scores, kind="stable")[:k]
        return [(_label_of(self.labels, int(i)), float(self.scores[i])) for i in order]


@dataclass(frozen=True)
class Span:
    """A run of tokens with one entity label: character offsets into the text, the mean token score."""

    label: str
    score: float
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class AudioWindow:
    """One window of a clip cut into the model's window with a hop (VAD-style): where it lies, in seconds
    from the clip's start (``end``: the window's last sample, or the clip's, when it ends first), and the
    model's class for it."""

    start: float
    end: float
    result: Classification


Result = Classification | list[Span] | np.ndarray


def _label_of(labels: Sequence[str], i: int) -> str:
    return labels[i] if i < len(labels) else f"LABEL_{i}"


def _field(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = d.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind in (int, (int, float)):
        raise ProcessingError(f"{what}: field {key!r} missing or not {getattr(kind, '__name__', kind)}")
    return value


def _file_name(name: Any, what: str) -> str:
    """A plain file name inside the model directory: never a path that leaves it."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name) or name == PROCESSING_FILE:
        raise ProcessingError(f"{what}: {name!r} is not a plain file name")
    return name


@dataclass(frozen=True)
class ProcessingConfig:
    """The validated ``processing.json``: task, labels, output tensor and the text, image or audio
    settings."""

    task: str
    output: str
    labels: tuple[str, ...] = ()
    text: Mapping[str, Any] | None = None
    image: Mapping[str, Any] | None = None
    multi_label: bool = False
    normalize: bool = True
    audio: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: Any) -> ProcessingConfig:
        what = PROCESSING_FILE
        if not isinstance(d, Mapping) or d.get("format") != PROCESSING_FORMAT:
            raise ProcessingError(f"{what}: not a processing config of format {PROCESSING_FORMAT}")
        task = _field(d, "task", str, what)
        if task not in TASKS:
            raise ProcessingError(f"{what}: unknown task {task!r}; known: {', '.join(TASKS)}")
        labels = _field(d, "labels", list, what)
        if not all(isinstance(x, str) for x in labels):
            raise ProcessingError(f"{what}: labels must be strings")
        text = d.get("text")
        image = d.get("image")
        audio = d.get("audio")
        if task == "image-classification":
            image = _check_image(_field(d, "image", dict, what))
        elif task == "audio-classification":
            audio = _check_audio(_field(d, "audio", dict, what))
        else:
            text = _field(d, "text", dict, what)
            _file_name(text.get("tokenizer"), f"{what}: text.tokenizer")
            inputs = _field(text, "inputs", dict, f"{what}: text")
            if not {"input_ids"} <= set(inputs) <= set(TEXT_ROLES):
                raise ProcessingError(f"{what}: text.inputs must map input_ids (optionally attention_mask, "
                                      f"token_type_ids) to model inputs, got {sorted(inputs)}")
            _field(text, "pad_id", int, f"{what}: text")
        return cls(task, _field(d, "output", str, what), tuple(labels), text, image,
                   bool(d.get("multi_label", False)), bool(d.get("normalize", True)), audio)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": PROCESSING_FORMAT, "task": self.task, "output": self.output,
                             "labels": list(self.labels), "multi_label": self.multi_label,
                             "normalize": self.normalize}
        if self.text is not None:
            d["text"] = dict(self.text)
        if self.image is not None:
            d["image"] = dict(self.image)
        if self.audio is not None:
            d["audio"] = dict(self.audio)
        return d

    @property
    def files(self) -> tuple[str, ...]:
        """The files this config names (the tokenizer), which travel with it in the bundle."""
        return (self.text["tokenizer"],) if self.text is not None else ()

    def summary(self) -> str:
        """One line for ``inspect``: task, labels and what processing runs."""
        if self.image is not None:
            im = self.image
            how = (f"image: resize {im.get('resize')} {im['resample']}, crop {im.get('crop')}, "
                   f"rescale {im['rescale']:g}, mean {im['mean']}, std {im['std']}, "
                   f"{im.get('layout', 'NCHW')}")
        elif self.audio is not None:
            au = self.audio
            how = f"audio: {au['sampling_rate']} Hz {au['features']}"
            if au["features"] == "fbank":
                how += (f", {au['win_length']}-sample {au['window']} frames every {au['hop_length']}, "
                        f"n_fft {au['n_fft']}, pre-emphasis {au['preemphasis']:g}, {au['num_mel_bins']} "
                        f"Kaldi mels, features (x - {au['feature_mean']:g}) / {au['feature_std']:g}")
                how += ", utterance CMVN" if au["cmvn"] else ""
            elif au["features"] != "waveform":
                how += (f", n_fft {au['n_fft']} hop {au['hop_length']}, {au['num_mel_bins']} "
                        f"{au['mel_scale']} mels, log {au['log']}")
                how += f", {au['num_mfcc']} MFCCs" if au["features"] == "mfcc" else ""
            how += ", normalised" if au["normalize"] else ""
        else:
            assert self.text is not None
            how = f"text: tokenizer {self.text['tokenizer']}, inputs {sorted(self.text['inputs'].values())}"
            if self.task == "sentence-embeddings":
                how += ", mean pooling" + (" + L2 normalisation" if self.normalize else "")
        labels = f"labels {list(self.labels)}" if self.labels else "no labels"
        return f"task {self.task}, output {self.output!r}, {labels}; {how}"


def _check_image(im: Mapping[str, Any]) -> Mapping[str, Any]:
    what = f"{PROCESSING_FILE}: image"
    _field(im, "input", str, what)
    if im.get("resample") not in RESAMPLE:
        raise ProcessingError(f"{what}: resample must be one of {RESAMPLE}, got {im.get('resample')!r}")
    if im.get("layout", "NCHW") not in IMAGE_LAYOUTS:
        raise ProcessingError(f"{what}: layout must be one of {IMAGE_LAYOUTS}, got {im.get('layout')!r}")
    for key in ("resize", "crop"):
        size = im.get(key)
        if size is not None and not (isinstance(size, Mapping) and (
                set(size) == {"height", "width"} or set(size) == {"shortest_edge"})
                and all(isinstance(v, int) and v > 0 for v in size.values())):
            raise ProcessingError(f"{what}: {key} must be null, {{height, width}} or {{shortest_edge}}")
    _field(im, "rescale", (int, float), what)
    for key in ("mean", "std"):
        v = _field(im, key, list, what)
        if len(v) != 3 or not all(isinstance(x, (int, float)) for x in v):
            raise ProcessingError(f"{what}: {key} must be three numbers")
    if any(s == 0 for s in im["std"]):
        raise ProcessingError(f"{what}: std must not be zero")
    return im


def _check_audio(au: Mapping[str, Any]) -> Mapping[str, Any]:
    what = f"{PROCESSING_FILE}: audio"
    _field(au, "input", str, what)
    if au.get("features") not in AUDIO_FEATURES:
        raise ProcessingError(f"{what}: features must be one of {AUDIO_FEATURES}, got {au.get('features')!r}")
    if not isinstance(au.get("normalize"), bool):
        raise ProcessingError(f"{what}: field 'normalize' missing or not bool")
    _field(au, "padding_value", (int, float), what)
    keys = ["sampling_rate"] + (["n_fft", "win_length", "hop_length", "num_mel_bins"]
                                if au["features"] != "waveform" else [])
    keys += ["num_mfcc"] if au["features"] == "mfcc" else []
    for key in keys:
        if _field(au, key, int, what) <= 0:
            raise ProcessingError(f"{what}: {key} must be positive")
    if au["features"] == "waveform":
        return au
    if au["win_length"] > au["n_fft"] or au["features"] == "mfcc" and au["num_mfcc"] > au["num_mel_bins"]:
        raise ProcessingError(f"{what}: win_length must not exceed n_fft, nor num_mfcc num_mel_bins")
    if au["features"] == "fbank":
        allowed_values: tuple[tuple[str, tuple[Any, ...]], ...] = (
            ("window", KALDI_WINDOWS), ("frames_axis", (-1, -2)), ("remove_dc_offset", (True, False)),
            ("cmvn", (True, False)))
        if not 0 <= _field(au, "preemphasis", (int, float), what) <= 1:
            raise ProcessingError(f"{what}: preemphasis must lie in [0, 1]")
        _field(au, "feature_mean", (int, float), what)
        for key in ("sample_scale", "feature_std"):
            if not _field(au, key, (int, float), what) > 0:
                raise ProcessingError(f"{what}: {key} must be positive")
    else:
        allowed_values = (("mel_scale", MEL_SCALES), ("mel_norm", (None, "slaney")), ("window", WINDOWS),
                          ("log", AUDIO_LOGS), ("frames_axis", (-1, -2)), ("center", (True, False)))
    for key, allowed in allowed_values:
        if au.get(key, "?") not in allowed:
            raise ProcessingError(f"{what}: {key} must be one of {allowed}, got {au.get(key)!r}")
    lo, hi = _field(au, "f_min", (int, float), what), _field(au, "f_max", (int, float), what)
    if not 0 <= lo < hi <= au["sampling_rate"] / 2:
        raise ProcessingError(f"{what}: need 0 <= f_min < f_max <= sampling_rate / 2, got {lo}, {hi}")
    return au


class Processor:
    """Runs a compiled model on texts, images or waveforms: ``run(items, predict)`` -> one typed result
    per item.

    ``inputs`` is the model's input signature (name -> (shape, dtype)): its batch and sequence length
    decide the chunking, padding and truncation."""

    def __init__(self, config: ProcessingConfig, files: Mapping[str, bytes], inputs: InputShapes) -> None:
        self.config = config
        self._files = dict(files)
        self._inputs = {k: (tuple(int(d) for d in s), str(t)) for k, (s, t) in inputs.items()}
        missing = [f for f in config.files if f not in self._files]
        if missing:
            raise ProcessingError(f"processing files missing: {missing}")
        feeds = (config.text["inputs"].values() if config.text is not None
                 else [(config.image or config.audio)["input"]])
        unknown = sorted(set(feeds) - set(self._inputs))
        if unknown:
            raise ProcessingError(f"{PROCESSING_FILE} feeds {unknown}, which the model does not take "
                                  f"(inputs: {sorted(self._inputs)})")
        first = self._inputs[next(iter(feeds))][0]
        self.batch = first[0] if first else 1
        self._tokenizer: Any = None

    @classmethod
    def from_dir(cls, path: str | os.PathLike[str], inputs: InputShapes | None = None) -> Processor:
        """The processing of a model directory (a built model or an installed slot); ``inputs`` default to
        its spec's. ``ProcessingError`` when the directory has none."""
        root = Path(path)
        try:
            config = ProcessingConfig.from_dict(json.loads((root / PROCESSING_FILE).read_bytes()))
        except FileNotFoundError:
            raise ProcessingError(f"{root} has no {PROCESSING_FILE}: the model takes tensors only") from None
        except ValueError as exc:
            if isinstance(exc, ProcessingError):
                raise
            raise ProcessingError(f"{root / PROCESSING_FILE} is not JSON: {exc}") from None
        try:
            files = {name: (root / name).read_bytes() for name in config.files}
        except FileNotFoundError as exc:
            raise ProcessingError(f"{root} lacks {Path(exc.filename).name}, which {PROCESSING_FILE} names"
                                  ) from None
        if inputs is None:
            from .spec import ModelSpec

            spec = ModelSpec.from_json((root / "model.json").read_bytes())
            inputs = {t.name: (t.shape, t.dtype) for t in spec.inputs}
        return cls(config, files, inputs)

    def files(self) -> dict[str, bytes]:
        """File name -> bytes to store beside the model: the config and the files it names."""
        data = json.dumps(self.config.to_dict(), indent=1, sort_keys=True).encode()
        return {PROCESSING_FILE: data, **{n: self._files[n] for n in self.config.files}}

    # -- text -------------------------------------------------------------------------------------
    @property
    def sequence_length(self) -> int:
        assert self.config.text is not None
        return self._inputs[self.config.text["inputs"]["input_ids"]][0][-1]

    @property
    def tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer``, truncating and padding to the model's sequence length."""
        if self._tokenizer is None:
            text = self.config.text
            if text is None:
                raise ProcessingError(f"a {self.config.task} model takes no text")
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise ProcessingError("text models need the tokenizers package: "
                                      "pip install 'cuvil-edge[text]'") from None
            try:
                tok = Tokenizer.from_str(self._files[text["tokenizer"]].decode())
            except Exception as exc:  # tokenizers raises plain Exception for a malformed file
                raise ProcessingError(f"cannot read tokenizer {text['tokenizer']}: {exc}") from None
            tok.enable_truncation(max_length=self.sequence_length)
            tok.enable_padding(length=self.sequence_length, pad_id=text["pad_id"],
                               pad_token=text.get("pad_token", "[PAD]"))
            self._tokenizer = tok
        return self._tokenizer

    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def _encode_texts(self, texts: Sequence[str]) -> tuple[dict[str, np.ndarray], list[Any]]:
        assert self.config.text is not None
        bad = [t for t in texts if not isinstance(t, str)]
        if bad:
            raise ProcessingError(f"a {self.config.task} model takes strings, got {type(bad[0]).__name__}")
        encs = self.tokenizer.encode_batch(list(texts))
        arrays = {"input_ids": [e.ids for e in encs], "attention_mask": [e.attention_mask for e in encs],
                  "token_type_ids": [e.type_ids for e in encs]}
        feeds = {}
        for role, name in self.config.text["inputs"].items():
            shape, dtype = self._inputs[name]
            feeds[name] = np.asarray(arrays[role], dtype=dtype).reshape(shape)
        return feeds, encs

    # -- images -----------------------------------------------------------------------------------
    def preprocess_image(self, image: Image) -> np.ndarray:
        """One image -> the model's float input, CHW or (``layout`` NHWC) HWC: to RGB, resize, center crop,
        rescale, normalise."""
        im = self.config.image
        if im is None:
            raise ProcessingError(f"a {self.config.task} model takes no images")
        x = _rgb(read_image(image) if isinstance(image, (str, os.PathLike)) else image)
        shape, dtype = self._inputs[im["input"]]
        nhwc = im.get("layout", "NCHW") == "NHWC"
        hw = tuple(shape[1:3] if nhwc else shape[-2:])
        if im.get("resize") is not None:
            h, w = _target_size(x.shape[:2], im["resize"])
            x = resize(x, h, w, im["resample"])
        crop = im.get("crop") or {"height": hw[0], "width": hw[1]}
        x = center_crop(x, crop["height"], crop["width"])
        if x.shape[:2] != hw:
            raise ProcessingError(f"preprocessed image is {x.shape[:2]}, the model takes {hw}")
        y = (x.astype(np.float64) * im["rescale"] - np.asarray(im["mean"])) / np.asarray(im["std"])
        return (y if nhwc else y.transpose(2, 0, 1)).astype(dtype)

    # -- audio ------------------------------------------------------------------------------------
    @property
    def _audio(self) -> Mapping[str, Any]:
        if self.config.audio is None:
            raise ProcessingError(f"a {self.config.task} model takes no audio")
        return self.config.audio

    def load_audio(self, audio: Audio) -> np.ndarray:
        """A waveform, a .wav file or its bytes as float samples at the model's rate, checked."""
        rate = self._audio["sampling_rate"]
        if isinstance(audio, (bytes, bytearray)):
            x = decode_wav(bytes(audio), rate)
        elif isinstance(audio, (str, os.PathLike)):
            x = read_wav(audio, rate)
        else:
            x = np.asarray(audio)
        if x.ndim != 1 or not x.size or not np.issubdtype(x.dtype, np.number):
            raise ProcessingError(f"a waveform is a non-empty 1-D array of samples, got shape {x.shape}")
        if not np.isfinite(x).all():
            raise ProcessingError("a waveform holds NaN or infinite samples")
        return x.astype(np.float64)

    @property
    def clip_samples(self) -> int:
        """How many samples one model input covers: the window a long clip is cut into."""
        au = self._audio
        item = self._inputs[au["input"]][0][1:]
        if au["features"] == "waveform":
            return math.prod(item)
        frames = item[au["frames_axis"]]
        if au["features"] == "fbank":
            return (frames - 1) * au["hop_length"] + au["win_length"]
        return frames * au["hop_length"] if au["center"] else (frames - 1) * au["hop_length"] + au["n_fft"]

    def preprocess_audio(self, audio: Audio) -> np.ndarray:
        """One waveform (or .wav file) -> the model's input for one clip: padded with ``padding_value`` or
        cut to the clip, then normalised samples, log-mel / MFCC frames or Kaldi filter banks (padded or
        cut as frames, as AST does) in the model's layout."""
        au = self._audio
        x = self.load_audio(audio)
        shape, dtype = self._inputs[au["input"]]
        item = shape[1:]
        if au["normalize"] and au["features"] == "waveform":  # Wav2Vec2: the samples kept, before padding
            x = x[:self.clip_samples]
            x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
        if au["features"] == "waveform":
            return fit_length(x, math.prod(item), au["padding_value"]).reshape(item).astype(dtype)
        frames = item[au["frames_axis"]]
        if au["features"] == "fbank":
            feats = kaldi_fbank(x[:self.clip_samples], au)
            if au["cmvn"] and len(feats):  # Speech2Text: over the clip's own frames, before padding
                feats = (feats - feats.mean(axis=0)) / np.maximum(feats.std(axis=0), KALDI_FLOOR)
            pad = np.full((frames - len(feats), au["num_mel_bins"]), float(au["padding_value"]))
            feats = (np.concatenate([feats, pad]) - au["feature_mean"]) / au["feature_std"]
        else:
            feats = audio_features(fit_length(x, self.clip_samples, au["padding_value"]), au)[:frames]
        if au["frames_axis"] == -1:
            feats = feats.T
        return feats.reshape(item).astype(dtype)

    def window_starts(self, n_samples: int, hop_s: float | None) -> range:
        """The first sample of each window of a clip of ``n_samples``: the model's window every ``hop_s``
        seconds from the start, until one reaches the clip's end (that one padded as a short clip is);
        ``hop_s`` None: the one window the model sees of the clip (its start; the rest is cut)."""
        if hop_s is None:
            return range(1)
        rate = self._audio["sampling_rate"]
        if (not isinstance(hop_s, (int, float)) or isinstance(hop_s, bool) or not math.isfinite(hop_s)
                or round(hop_s * rate) < 1):
            raise ProcessingError(f"the hop between windows is a number of seconds of at least one sample, "
                                  f"got {hop_s!r}")
        hop = round(hop_s * rate)
        count = 1 + -(-max(n_samples - self.clip_samples, 0) // hop)
        return range(0, min(count * hop, n_samples), hop)

    def windows(self, audio: Audio, hop_s: float | None) -> list[tuple[int, int, np.ndarray]]:
        """(first sample, end sample, samples) of each of ``window_starts``."""
        x = self.load_audio(audio)
        n = self.clip_samples
        return [(s, min(s + n, len(x)), x[s:s + n]) for s in self.window_starts(len(x), hop_s)]

    def run_windows(self, items: Sequence[Audio], predict: Predict, hop_s: float | None
                    ) -> list[list[AudioWindow]]:
        """Each clip cut into ``windows`` and every window through the model, batched across clips: one
        list of ``AudioWindow`` per clip, in time order."""
        rate = self._audio["sampling_rate"]
        cut = [(i, s, e, x) for i, item in enumerate(items) for s, e, x in self.windows(item, hop_s)]
        results = self.run([x for *_, x in cut], predict)
        out: list[list[AudioWindow]] = [[] for _ in items]
        for (i, s, e, _), r in zip(cut, results):
            assert isinstance(r, Classification)
            out[i].append(AudioWindow(s / rate, e / rate, r))
        return out

    # -- run --------------------------------------------------------------------------------------
    def encode(self, chunk: Sequence[Any]) -> tuple[dict[str, np.ndarray], list[Any]]:
        """Up to ``batch`` items -> the model's feeds, padded to the batch, and the tokenizer's encodings
        (which ``decode`` needs for token offsets and masks; none for images)."""
        if len(chunk) > self.batch:
            raise ProcessingError(f"a chunk holds at most {self.batch} items, got {len(chunk)}")
        if self.config.text is not None:
            return self._encode_texts(list(chunk) + [""] * (self.batch - len(chunk)))
        name, prepare = ((self.config.image["input"], self.preprocess_image) if self.config.image is not None
                         else (self.config.audio["input"], self.preprocess_audio))
        shape, dtype = self._inputs[name]
        feed = np.zeros((self.batch, *shape[1:]), dtype)
        for i, item in enumerate(chunk):
            feed[i] = prepare(item)
        return {name: feed.reshape(shape)}, []

    def feeds(self, items: Sequence[Any]) -> list[dict[str, np.ndarray]]:
        """The feeds of every chunk of ``items``: e.g. calibration samples from texts or images."""
        return [self.encode(items[i:i + self.batch])[0] for i in range(0, len(items), self.batch)]

    def run(self, items: Sequence[Any], predict: Predict) -> list[Result]:
        """Every item through the model in chunks of its batch size (the last chunk padded)."""
        results: list[Result] = []
        for start in range(0, len(items), self.batch):
            chunk = items[start:start + self.batch]
            feeds, encodings = self.encode(chunk)
            results += self.decode(predict(feeds), encodings, chunk)
        return results

    def decode(self, outputs: Mapping[str, np.ndarray], encodings: Sequence[Any],
               items: Sequence[Any]) -> list[Result]:
        """Model outputs of one chunk -> one result per item of it (padding rows dropped)."""
        if self.config.output not in outputs:
            raise ProcessingError(f"the model has no output {self.config.output!r} (has {sorted(outputs)})")
        y = np.asarray(outputs[self.config.output], np.float64)
        y = y.reshape(self.batch, *y.shape[1:]) if y.shape[:1] != (self.batch,) else y
        task = self.config.task
        if task in ("text-classification", "image-classification", "audio-classification"):
            return [self._classification(row.reshape(-1)) for row in y[:len(items)]]
        if task == "token-classification":
            return [self._spans(y[i], encodings[i], items[i]) for i in range(len(items))]
        return [self._embedding(y[i], encodings[i]) for i in range(len(items))]

    def _probabilities(self, logits: np.ndarray) -> np.ndarray:
        if self.config.multi_label:
            return 1.0 / (1.0 + np.exp(-logits))
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def _classification(self, logits: np.ndarray) -> Classification:
        p = self._probabilities(logits)
        i = int(np.argmax(p))
        return Classification(_label_of(self.config.labels, i), float(p[i]), i, p.astype(np.float32),
                              self.config.labels)

    def _spans(self, logits: np.ndarray, enc: Any, text: str) -> list[Span]:
        """Tokens labelled alike (B-X then I-X, or X X) merge into a span; "O" and special tokens end one."""
        p = self._probabilities(logits)
        spans: list[Span] = []
        current: tuple[str, list[float], int, int] | None = None
        for t, (special, mask) in enumerate(zip(enc.special_tokens_mask, enc.attention_mask)):
            i = int(np.argmax(p[t]))
            label = _label_of(self.config.labels, i)
            prefix, _, entity = label.rpartition("-") if label[:2] in ("B-", "I-") else ("", "", label)
            start, end = enc.offsets[t]
            if special or not mask or entity == "O" or prefix == "B" or (current and current[0] != entity):
                if current is not None:
                    spans.append(Span(current[0], float(np.mean(current[1])), current[2], current[3],
                                      text[current[2]:current[3]]))
                    current = None
                if special or not mask or entity == "O":
                    continue
            if current is None:
                current = (entity, [float(p[t, i])], start, end)
            else:
                current = (entity, [*current[1], float(p[t, i])], current[2], end)
        if current is not None:
            spans.append(Span(current[0], float(np.mean(current[1])), current[2], current[3],
                              text[current[2]:current[3]]))
        return spans

    def _embedding(self, hidden: np.ndarray, enc: Any) -> np.ndarray:
        """Mean of the token states under the attention mask (a pooled 1-D output is used as is)."""
        if hidden.ndim == 2:
            mask = np.asarray(enc.attention_mask, np.float64)[:, None]
            hidden = (hidden * mask).sum(axis=0) / max(mask.sum(), 1.0)
        if self.config.normalize:
            hidden = hidden / max(float(np.linalg.norm(hidden)), 1e-12)
        return hidden.astype(np.float32)


def processing_files(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The processing files of a model directory, config first (none without ``processing.json``): what a
    bundle carries beside spec, weights and modules. A config a device would refuse is refused here."""
    root = Path(path)
    if not (root / PROCESSING_FILE).is_file():
        return ()
    try:
        config = ProcessingConfig.from_dict(json.loads((root / PROCESSING_FILE).read_bytes()))
    except ValueError as exc:
        raise ProcessingError(f"{root / PROCESSING_FILE}: {exc}") from None
    return (PROCESSING_FILE, *config.files)


# -- numpy image operations (Pillow's resampling filters, antialiased when shrinking) --------------------
def _bicubic(x: np.ndarray) -> np.ndarray:
    a, x = -0.5, np.abs(x)
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, ((x - 5) * x + 8) * x * a - 4 * a, 0.0))


_FILTERS: dict[str, tuple[float, Callable[[np.ndarray], np.ndarray]]] = {
    "nearest": (0.5, lambda x: ((x >= -0.5) & (x < 0.5)).astype(np.float64)),
    "bilinear": (1.0, lambda x: np.maximum(0.0, 1.0 - np.abs(x))),
    "bicubic": (2.0, _bicubic),
}


#: how far below halfway a resized sample still rounds up: far above float64 summation error (~1e-13 of
#: 255), far below the distance from halfway of a sample that is not one (weights are short fractions)
TIE_SLACK = 1e-7


def resize_weights(n_in: int, n_out: int, resample: str) -> np.ndarray:
    """[n_out, n_in] interpolation matrix: each output sample's filter over the input, widened by the scale
    when shrinking (an antialiasing low-pass) and normalised to sum to one."""
    support, kernel = _FILTERS[resample]
    scale = n_in / n_out
    stretch = max(scale, 1.0)
    centers = (np.arange(n_out) + 0.5) * scale
    x = (np.arange(n_in)[None, :] + 0.5 - centers[:, None]) / stretch
    w = np.where(np.abs(x) <= support, kernel(x), 0.0)
    return w / w.sum(axis=1, keepdims=True)


def resize(image: np.ndarray, height: int, width: int, resample: str = "bilinear") -> np.ndarray:
    """HWC uint8 -> HWC uint8 of ``height`` x ``width``, rounded half up (as Pillow's fixed-point sums
    round) and clipped. Halfway samples are common (a 48 -> 40 shrink gives dozens per image) and a float
    sum lands an ulp either side of one depending on its order (numpy's einsum paths change between
    releases): ``TIE_SLACK`` puts every one of them above, so the result does not depend on that order."""
    if resample not in _FILTERS:
        raise ProcessingError(f"unknown resample {resample!r}; known: {RESAMPLE}")
    x = image.astype(np.float64)
    if image.shape[0] != height:
        x = np.einsum("oh,hwc->owc", resize_weights(image.shape[0], height, resample), x)
    if image.shape[1] != width:
        x = np.einsum("pw,owc->opc", resize_weights(image.shape[1], width, resample), x)
    return np.clip(np.floor(x + (0.5 + TIE_SLACK)), 0, 255).astype(np.uint8)


def center_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    h, w = image.shape[:2]
    if h < height or w < width:
        raise ProcessingError(f"image of {h}x{w} is smaller than the {height}x{width} crop")
    top, left = (h - height) // 2, (w - width) // 2
    return image[top:top + height, left:left + width]


def _target_size(hw: tuple[int, int], size: Mapping[str, int]) -> tuple[int, int]:
    """``{height, width}`` as is; ``{shortest_edge: s}``: the short side becomes s, the aspect is kept."""
    if "shortest_edge" not in size:
        return size["height"], size["width"]
    s = size["shortest_edge"]
    h, w = hw
    return (s, int(s * w / h)) if h <= w else (int(s * h / w), s)


def _rgb(image: Any) -> np.ndarray:
    x = np.asarray(image)
    if x.dtype != np.uint8:
        raise ProcessingError(f"images are uint8 HWC arrays, got {x.dtype}")
    if x.ndim == 2:
        x = x[:, :, None]
    if x.ndim != 3 or x.shape[2] not in (1, 3, 4) or 0 in x.shape:
        raise ProcessingError(f"images are HWC arrays with 1, 3 or 4 channels, got shape {x.shape}")
    return np.repeat(x, 3, axis=2) if x.shape[2] == 1 else x[:, :, :3]


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """An image file as HWC uint8: .npy and binary PPM/PGM with numpy alone, anything else with Pillow."""
    p = Path(path)
    return decode_image(p.read_bytes(), str(p))


def decode_image(data: bytes, what: str = "image") -> np.ndarray:
    """Encoded image bytes (a request's, or a file's) as an array: .npy (never pickles) and binary PPM/PGM
    with numpy alone, anything else with Pillow; ``ProcessingError`` naming ``what`` when unreadable."""
    if data[:6] == b"\x93NUMPY":
        try:
            return np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:  # truncated, or an object array (pickled)
            raise ProcessingError(f"{what}: unreadable .npy data: {exc}") from None
    if data[:2] in (b"P5", b"P6"):
        return _netpbm(data, what)
    try:
        from PIL import Image as PILImage
    except ImportError:
        raise ProcessingError(f"{what}: only .npy and binary .ppm/.pgm images can be read without Pillow "
                              "(pip install pillow)") from None
    try:
        with PILImage.open(io.BytesIO(data)) as im:
            return np.asarray(im.convert("RGB"))
    except (OSError, ValueError, PILImage.DecompressionBombError) as exc:  # UnidentifiedImageError: OSError
        raise ProcessingError(f"{what}: not a readable image: {exc}") from None


def _netpbm(data: bytes, what: str) -> np.ndarray:
    fields: list[bytes] = []
    pos = 2
    while len(fields) < 3:
        m = re.compile(rb"\s*(#[^\n]*\n\s*)*(\d+)").match(data, pos)
        if m is None:
            raise ProcessingError(f"{what}: malformed PPM/PGM header")
        fields.append(m.group(2))
        pos = m.end()
    w, h, maxval = (int(f) for f in fields)
    channels = 3 if data[:2] == b"P6" else 1
    pixels = data[pos + 1:pos + 1 + w * h * channels]
    if maxval != 255 or len(pixels) != w * h * channels:
        raise ProcessingError(f"{what}: only complete 8-bit PPM/PGM images are read")
    return np.frombuffer(pixels, np.uint8).reshape(h, w, channels)


# -- numpy audio operations (Hugging Face ``audio_utils`` semantics) ------------------------------------
def read_wav(path: str | os.PathLike[str], sampling_rate: int) -> np.ndarray:
    """A .wav file as float samples (``decode_wav``)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ProcessingError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return decode_wav(data, sampling_rate, os.fspath(path))


#: WAVE format tags: integer PCM, IEEE float, and the extensible header naming one of them in its GUID
_WAVE_PCM, _WAVE_FLOAT, _WAVE_EXTENSIBLE = 1, 3, 0xFFFE
_CHUNK = struct.Struct("<4sI")


def _wav_chunks(data: bytes, what: str) -> dict[bytes, bytes]:
    """The chunks of a RIFF/WAVE file by id (the first of each)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ProcessingError(f"{what}: not a WAV file (no RIFF/WAVE header)")
    chunks: dict[bytes, bytes] = {}
    pos = 12
    while pos + _CHUNK.size <= len(data):
        cid, size = _CHUNK.unpack_from(data, pos)
        pos += _CHUNK.size
        if pos + size > len(data):
            raise ProcessingError(f"{what}: truncated WAV file: chunk {cid!r} needs {size} bytes, "
                                  f"{len(data) - pos} follow")
        chunks.setdefault(cid, data[pos:pos + size])
        pos += size + (size & 1)  # chunks are word-aligned
    return chunks


def decode_wav(data: bytes, sampling_rate: int, what: str = "audio") -> np.ndarray:
    """WAV bytes as float samples in [-1, 1], channels averaged to mono: integer PCM of 8 (unsigned),
    16, 24 or 32 bits (divided by 2**(bits-1)) or IEEE float of 32 or 64 bits (as stored), plain or
    ``WAVE_FORMAT_EXTENSIBLE``. Audio at another rate than the model's is refused, not resampled: the
    rate is the model's input contract, and a resampler's filter would change the features.

    A RIFF reader of its own, not the stdlib ``wave`` module: ``wave`` reads integer PCM only."""
    chunks = _wav_chunks(data, what)
    if b"fmt " not in chunks or b"data" not in chunks:
        raise ProcessingError(f"{what}: WAV file without a {'fmt' if b'fmt ' not in chunks else 'data'} "
                              "chunk")
    fmt = chunks[b"fmt "]
    if len(fmt) < 16:
        raise ProcessingError(f"{what}: WAV fmt chunk of {len(fmt)} bytes, at least 16 expected")
    tag, channels, rate, _, block, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag == _WAVE_EXTENSIBLE and len(fmt) >= 26:
        (tag,) = struct.unpack_from("<H", fmt, 24)  # the sub-format GUID starts with the format tag
    kinds = {(_WAVE_PCM, 8): "u1", (_WAVE_PCM, 16): "<i2", (_WAVE_PCM, 24): "i3", (_WAVE_PCM, 32): "<i4",
             (_WAVE_FLOAT, 32): "<f4", (_WAVE_FLOAT, 64): "<f8"}
    kind = kinds.get((tag, bits))
    if kind is None:
        raise ProcessingError(f"{what}: WAV format {tag} with {bits}-bit samples is not supported (integer "
                              "PCM of 8, 16, 24 or 32 bits, or float of 32 or 64 bits)")
    if channels < 1 or block != channels * bits // 8:
        raise ProcessingError(f"{what}: WAV header is inconsistent ({channels} channels, {block}-byte "
                              f"frames of {bits}-bit samples)")
    if rate != sampling_rate:
        raise ProcessingError(f"{what}: {rate} Hz audio, the model takes {sampling_rate} Hz "
                              "(resample it first)")
    raw = chunks[b"data"]
    raw = raw[:len(raw) - len(raw) % block]  # a partial last frame (a cut-off file) is dropped
    if not raw:
        raise ProcessingError(f"{what}: WAV file without samples")
    if kind == "u1":
        x = np.frombuffer(raw, np.uint8).astype(np.float64) - 128.0
    elif kind == "i3":  # little-endian 24-bit: sign-extend through the top byte of an int32
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        x = ((b[:, 0] << 8 | b[:, 1] << 16 | b[:, 2] << 24) >> 8).astype(np.float64)
    else:
        x = np.frombuffer(raw, kind).astype(np.float64)
    if tag == _WAVE_PCM:
        x /= float(1 << (bits - 1))
    return x.reshape(-1, channels).mean(axis=1)


def fit_length(x: np.ndarray, n: int, padding_value: float) -> np.ndarray:
    """The first ``n`` samples, padded at the end with ``padding_value`` (Hugging Face's right padding
    and truncation)."""
    return np.concatenate([x[:n], np.full(max(0, n - len(x)), float(padding_value))])


def _hz_to_mel(f: np.ndarray, scale: str) -> np.ndarray:
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    f = np.asarray(f, np.float64)  # slaney: linear to 1 kHz, logarithmic above
    log_part = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) * 27.0 / np.log(6.4)
    return np.where(f < 1000.0, 3.0 * f / 200.0, log_part)


def _mel_to_hz(m: np.ndarray, scale: str) -> np.ndarray:
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    return np.where(m < 15.0, 200.0 * m / 3.0, 1000.0 * np.exp(np.log(6.4) * (m - 15.0) / 27.0))


def mel_filters(n_freqs: int, n_mels: int, f_min: float, f_max: float, sampling_rate: int, scale: str,
                norm: str | None) -> np.ndarray:
    """[n_freqs, n_mels] triangular filters evenly spaced on the mel scale (``mel_filter_bank``)."""
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.float64(f_min), scale), _hz_to_mel(np.float64(f_max), scale),
                                   n_mels + 2), scale)
    fft_freqs = np.linspace(0, sampling_rate // 2, n_freqs)
    slopes = edges[None, :] - fft_freqs[:, None]
    widths = np.diff(edges)
    filters = np.maximum(0.0, np.minimum(-slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]))
    if norm == "slaney":  # equal area per filter
        filters *= 2.0 / (edges[2:] - edges[:-2])
    return filters


def _window(kind: str, length: int, n_fft: int) -> np.ndarray:
    """A periodic window of ``length`` centred in ``n_fft`` samples."""
    w = (np.hanning if kind == "hann" else np.hamming)(length + 1)[:-1]
    out = np.zeros(n_fft)
    start = (n_fft - length) // 2
    out[start:start + length] = w
    return out


def dct_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_in, n_out] orthonormal DCT-II: MFCCs are ``log_mel @ dct_matrix``."""
    k, n = np.arange(n_out)[None, :], np.arange(n_in)[:, None]
    m = np.cos(np.pi / n_in * (n + 0.5) * k) * np.sqrt(2.0 / n_in)
    m[:, 0] /= np.sqrt(2.0)
    return m


def audio_features(x: np.ndarray, au: Mapping[str, Any]) -> np.ndarray:
    """[frames, features] log-mel energies (or MFCCs) of a waveform: power spectrum of windowed frames
    (reflect-padded by n_fft/2 at both ends when ``center``), mel filters, floored log."""
    n_fft, hop = au["n_fft"], au["hop_length"]
    if au["center"]:
        x = np.pad(x, n_fft // 2, mode="reflect")
    n = 1 + (len(x) - n_fft) // hop
    frames = x[np.arange(n_fft)[None, :] + hop * np.arange(n)[:, None]]
    power = np.abs(np.fft.rfft(frames * _window(au["window"], au["win_length"], n_fft), n_fft)) ** 2
    mel = power @ mel_filters(n_fft // 2 + 1, au["num_mel_bins"], au["f_min"], au["f_max"],
                              au["sampling_rate"], au["mel_scale"], au.get("mel_norm"))
    mel = np.maximum(mel, MEL_FLOOR)
    if au["log"] == "ln":
        out = np.log(mel)
    else:
        out = np.log10(mel)
        if au["log"] == "whisper":  # over the clip the model sees: the extra centred frame is dropped first
            out = out[:n - 1] if au["center"] else out
            out = (np.maximum(out, out.max() - 8.0) + 4.0) / 4.0
    if au["features"] == "mfcc":
        out = out @ dct_matrix(au["num_mel_bins"], au["num_mfcc"])
    return out


# -- Kaldi filter banks (``compute-fbank-feats``; ``torchaudio.compliance.kaldi.fbank``, dither off) ------
def kaldi_window(kind: str, length: int) -> np.ndarray:
    """Kaldi's symmetric frame windows: hanning, hamming, povey (hanning ** 0.85), rectangular."""
    if kind == "rectangular":
        return np.ones(length)
    c = np.cos(2.0 * np.pi * np.arange(length) / (length - 1))
    if kind == "hamming":
        return 0.54 - 0.46 * c
    hann = 0.5 - 0.5 * c
    return hann ** 0.85 if kind == "povey" else hann


def _kaldi_mel(f: np.ndarray | float) -> np.ndarray:
    return 1127.0 * np.log(1.0 + np.asarray(f, np.float64) / 700.0)


def kaldi_mel_banks(n_fft: int, n_mels: int, f_min: float, f_max: float, sampling_rate: int) -> np.ndarray:
    """[n_fft // 2, n_mels] Kaldi filters: triangles evenly spaced and linear on the mel scale
    (1127 ln(1 + f/700)), over the FFT bins below Nyquist (Kaldi leaves that bin out)."""
    lo, hi = _kaldi_mel(f_min), _kaldi_mel(f_max)
    delta = (hi - lo) / (n_mels + 1)
    left = lo + delta * np.arange(n_mels)
    mel = _kaldi_mel(np.arange(n_fft // 2) * sampling_rate / n_fft)[:, None]
    return np.maximum(0.0, np.minimum((mel - left) / delta, (left + 2 * delta - mel) / delta))


def kaldi_fbank(x: np.ndarray, au: Mapping[str, Any]) -> np.ndarray:
    """[frames, mels] log filter-bank energies of a waveform as Kaldi computes them: whole frames of
    ``win_length`` every ``hop_length`` (snip-edges: none without a whole frame), samples scaled by
    ``sample_scale`` (Speech2Text: 16-bit integer range), DC offset removed per frame, pre-emphasis
    (x[i] - k x[i-1], the first sample against itself), the window, the power spectrum of ``n_fft``
    points, the mel filters, the log floored at float32's epsilon."""
    win, hop = au["win_length"], au["hop_length"]
    n = 1 + (len(x) - win) // hop if len(x) >= win else 0
    frames = x[np.arange(win)[None, :] + hop * np.arange(n)[:, None]] * au["sample_scale"]
    if au["remove_dc_offset"]:
        frames = frames - frames.mean(axis=1, keepdims=True)
    frames = frames - au["preemphasis"] * np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    power = np.abs(np.fft.rfft(frames * kaldi_window(au["window"], win), au["n_fft"])) ** 2
    banks = kaldi_mel_banks(au["n_fft"], au["num_mel_bins"], au["f_min"], au["f_max"], au["sampling_rate"])
    return np.log(np.maximum(power[:, :au["n_fft"] // 2] @ banks, KALDI_FLOOR))
