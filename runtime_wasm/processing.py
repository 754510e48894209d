"""Pre- and post-processing that travels in a bundle: texts or images in, labels, spans or embeddings out.

The host (``cuvil_edge.pretrained``) translates a Hugging Face directory's configs into one normalized
``processing.json`` next to the model's spec; a device reads only that, with numpy and, for text models,
the optional ``tokenizers`` wheel (``pip install 'cuvil-edge[text]'``). The compiled model has a fixed
batch and sequence length, so items run in chunks of the batch (the last one padded) and texts are
truncated to the sequence length.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ProcessingError

PROCESSING_FILE = "processing.json"
PROCESSING_FORMAT = 1
TASKS = ("text-classification", "token-classification", "sentence-embeddings", "image-classification")
TEXT_ROLES = ("input_ids", "attention_mask", "token_type_ids")
RESAMPLE = ("nearest", "bilinear", "bicubic")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

#: name -> (shape, dtype) of each model input, as in the model's spec
InputShapes = Mapping[str, tuple[Sequence[int], str]]
#: an image: HWC (or HW) uint8 array, or a path to a .npy, binary .ppm/.pgm or (with Pillow) any image file
Image = np.ndarray | str | os.PathLike
Predict = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]


@dataclass(frozen=True, eq=False)
class Classification:
    """One text's or image's class: the top label, its probability and every class's probability."""

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
    if not isinstance(name, str) or not _SAFE_NAME.match(name) or name == PROCESSING_FILE:
        raise ProcessingError(f"{what}: {name!r} is not a plain file name")
    return name


@dataclass(frozen=True)
class ProcessingConfig:
    """The validated ``processing.json``: task, labels, output tensor and the text or image settings."""

    task: str
    output: str
    labels: tuple[str, ...] = ()
    text: Mapping[str, Any] | None = None
    image: Mapping[str, Any] | None = None
    multi_label: bool = False
    normalize: bool = True

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
        if task == "image-classification":
            image = _check_image(_field(d, "image", dict, what))
        else:
            text = _field(d, "text", dict, what)
            _file_name(text.get("tokenizer"), f"{what}: text.tokenizer")
            inputs = _field(text, "inputs", dict, f"{what}: text")
            if not {"input_ids"} <= set(inputs) <= set(TEXT_ROLES):
                raise ProcessingError(f"{what}: text.inputs must map input_ids (optionally attention_mask, "
                                      f"token_type_ids) to model inputs, got {sorted(inputs)}")
            _field(text, "pad_id", int, f"{what}: text")
        return cls(task, _field(d, "output", str, what), tuple(labels), text, image,
                   bool(d.get("multi_label", False)), bool(d.get("normalize", True)))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": PROCESSING_FORMAT, "task": self.task, "output": self.output,
                             "labels": list(self.labels), "multi_label": self.multi_label,
                             "normalize": self.normalize}
        if self.text is not None:
            d["text"] = dict(self.text)
        if self.image is not None:
            d["image"] = dict(self.image)
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
                   f"rescale {im['rescale']:g}, mean {im['mean']}, std {im['std']}")
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


class Processor:
    """Runs a compiled model on texts or images: ``run(items, predict)`` -> one typed result per item.

    ``inputs`` is the model's input signature (name -> (shape, dtype)): its batch and sequence length
    decide the chunking, padding and truncation."""

    def __init__(self, config: ProcessingConfig, files: Mapping[str, bytes], inputs: InputShapes) -> None:
        self.config = config
        self._files = dict(files)
        self._inputs = {k: (tuple(int(d) for d in s), str(t)) for k, (s, t) in inputs.items()}
        missing = [f for f in config.files if f not in self._files]
        if missing:
            raise ProcessingError(f"processing files missing: {missing}")
        feeds = (config.text["inputs"].values() if config.text is not None else [config.image["input"]])
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
        """One image -> the model's CHW float input: to RGB, resize, center crop, rescale, normalise."""
        im = self.config.image
        if im is None:
            raise ProcessingError(f"a {self.config.task} model takes no images")
        x = _rgb(read_image(image) if isinstance(image, (str, os.PathLike)) else image)
        shape, dtype = self._inputs[im["input"]]
        if im.get("resize") is not None:
            h, w = _target_size(x.shape[:2], im["resize"])
            x = resize(x, h, w, im["resample"])
        crop = im.get("crop") or {"height": shape[-2], "width": shape[-1]}
        x = center_crop(x, crop["height"], crop["width"])
        if x.shape[:2] != tuple(shape[-2:]):
            raise ProcessingError(f"preprocessed image is {x.shape[:2]}, the model takes {tuple(shape[-2:])}")
        y = (x.astype(np.float64) * im["rescale"] - np.asarray(im["mean"])) / np.asarray(im["std"])
        return y.transpose(2, 0, 1).astype(dtype)

    # -- run --------------------------------------------------------------------------------------
    def encode(self, chunk: Sequence[Any]) -> tuple[dict[str, np.ndarray], list[Any]]:
        """Up to ``batch`` items -> the model's feeds, padded to the batch, and the tokenizer's encodings
        (which ``decode`` needs for token offsets and masks; none for images)."""
        if len(chunk) > self.batch:
            raise ProcessingError(f"a chunk holds at most {self.batch} items, got {len(chunk)}")
        if self.config.image is None:
            return self._encode_texts(list(chunk) + [""] * (self.batch - len(chunk)))
        name = self.config.image["input"]
        shape, dtype = self._inputs[name]
        feed = np.zeros((self.batch, *shape[1:]), dtype)
        for i, image in enumerate(chunk):
            feed[i] = self.preprocess_image(image)
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
        if task in ("text-classification", "image-classification"):
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
    """HWC uint8 -> HWC uint8 of ``height`` x ``width`` (rounded and clipped, as Pillow returns it)."""
    if resample not in _FILTERS:
        raise ProcessingError(f"unknown resample {resample!r}; known: {RESAMPLE}")
    x = image.astype(np.float64)
    if image.shape[0] != height:
        x = np.einsum("oh,hwc->owc", resize_weights(image.shape[0], height, resample), x)
    if image.shape[1] != width:
        x = np.einsum("pw,owc->opc", resize_weights(image.shape[1], width, resample), x)
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


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
    if p.suffix == ".npy":
        return np.load(p)
    data = p.read_bytes()
    if data[:2] in (b"P5", b"P6"):
        return _netpbm(data, p)
    try:
        from PIL import Image as PILImage
    except ImportError:
        raise ProcessingError(f"{p}: only .npy and binary .ppm/.pgm images can be read without Pillow "
                              "(pip install pillow)") from None
    with PILImage.open(p) as im:
        return np.asarray(im.convert("RGB"))


def _netpbm(data: bytes, path: Path) -> np.ndarray:
    fields: list[bytes] = []
    pos = 2
    while len(fields) < 3:
        m = re.compile(rb"\s*(#[^\n]*\n\s*)*(\d+)").match(data, pos)
        if m is None:
            raise ProcessingError(f"{path}: malformed PPM/PGM header")
        fields.append(m.group(2))
        pos = m.end()
    w, h, maxval = (int(f) for f in fields)
    channels = 3 if data[:2] == b"P6" else 1
    pixels = data[pos + 1:pos + 1 + w * h * channels]
    if maxval != 255 or len(pixels) != w * h * channels:
        raise ProcessingError(f"{path}: only complete 8-bit PPM/PGM images are read")
    return np.frombuffer(pixels, np.uint8).reshape(h, w, channels)
