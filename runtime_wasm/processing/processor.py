"""``Processor``: a model's ``processing.json`` applied around its ``predict``: texts, images or waveforms
in (tokenized, resized, featurized; chunked to the compiled batch), labels, spans or embeddings out."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ProcessingError
from .audio import audio_features, decode_wav, fit_length, kaldi_fbank, read_wav
from .image import center_crop, read_image, resize, rgb, target_size
from .schema import (
    KALDI_FLOOR,
    PROCESSING_FILE,
    Audio,
    AudioWindow,
    Classification,
    Image,
    InputShapes,
    Predict,
    ProcessingConfig,
    Result,
    Span,
    label_of,
)


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
            from ..spec import ModelSpec

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
        x = rgb(read_image(image) if isinstance(image, (str, os.PathLike)) else image)
        shape, dtype = self._inputs[im["input"]]
        nhwc = im.get("layout", "NCHW") == "NHWC"
        hw = tuple(shape[1:3] if nhwc else shape[-2:])
        if im.get("resize") is not None:
            h, w = target_size(x.shape[:2], im["resize"])
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
        return Classification(label_of(self.config.labels, i), float(p[i]), i, p.astype(np.float32),
                              self.config.labels)

    def _spans(self, logits: np.ndarray, enc: Any, text: str) -> list[Span]:
        """Tokens labelled alike (B-X then I-X, or X X) merge into a span; "O" and special tokens end one."""
        p = self._probabilities(logits)
        spans: list[Span] = []
        current: tuple[str, list[float], int, int] | None = None
        for t, (special, mask) in enumerate(zip(enc.special_tokens_mask, enc.attention_mask)):
            i = int(np.argmax(p[t]))
            label = label_of(self.config.labels, i)
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
