"""``processing.json``: the normalized processing config a bundle carries (``ProcessingConfig``, each
field's type and range checked as it is read), the result types, and which files travel with it."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ProcessingError

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
        return [(label_of(self.labels, int(i)), float(self.scores[i])) for i in order]


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


def label_of(labels: Sequence[str], i: int) -> str:
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
