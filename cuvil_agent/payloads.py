"""Texts, images and audio in, typed results out, for the serving front ends (the HTTP API and the Unix
socket).

A model built with ``from_pretrained`` carries its processing in the signed bundle; the agent runs it
(``runtime_wasm.processing``) so a local app sends what it has, strings or encoded images, instead of
token ids and normalised pixels. The processing read is the served release's own (``ServedModel``), and a
reply from another release (an update landed meanwhile) is refused with ``ModelChanged``, never mixed.

On the wire (``cuvil_agent.oip``) a processed call is one BYTES input, ``text``, ``image`` or ``audio`` (WAV
files), and typed outputs: classification ``label`` (BYTES), ``score`` (FP32) and ``scores`` (FP32, every
class); embeddings ``embedding`` (FP32); token classification one row per span across the batch:
``span_item`` (INT64, the input it came from), ``span_label``, ``span_text`` (BYTES), ``span_score``
(FP32), ``span_start``, ``span_end`` (INT64, character offsets). Audio answers one classification row per
window across the batch, with ``window_item`` (INT64), ``window_start`` and ``window_end`` (FP32
seconds): one window per clip, or with the request parameter ``hop_s`` each clip cut into the model's
window every ``hop_s`` seconds (``Processor.run_windows``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ota.errors import BadInferenceRequest, InputOverLimit, ModelChanged, NoProcessing
from runtime_wasm import ModelSpec
from runtime_wasm.processing import (
    PROCESSING_FILE,
    AudioWindow,
    Classification,
    ProcessingError,
    Processor,
    Result,
    decode_image,
    decode_wav,
)
from runtime_wasm.spec import TensorSpec

from .oip import Signature

if TYPE_CHECKING:
    from .serve import ModelHost, ServedModel

log = logging.getLogger(__name__)
_BYTES, _F32, _I64 = "object", "float32", "int64"


def load_processor(slot: str | Path, spec: ModelSpec) -> Processor | None:
    """The slot's signed processing, ready to run (the tokenizer read now, not on a first request); None
    when it has none, or when this device cannot run it (no ``tokenizers`` wheel, a task or feature this
    runtime does not know): the model is then served as tensors only, which is logged."""
    if not (Path(slot) / PROCESSING_FILE).is_file():
        return None
    try:
        processor = Processor.from_dir(slot, {t.name: (t.shape, t.dtype) for t in spec.inputs})
        if processor.config.text is not None:
            processor.tokenizer  # noqa: B018 -- read and configured once, before threads share it
    except ProcessingError as exc:
        log.warning("%s: serving tensors only, its processing cannot run here: %s", slot, exc)
        return None
    return processor


def input_name(processor: Processor) -> str:
    config = processor.config
    return "image" if config.image is not None else "audio" if config.audio is not None else "text"


def signature(processor: Processor) -> Signature:
    """The processed call: one BYTES input of any length, and the task's typed outputs."""
    task = processor.config.task
    if task == "token-classification":
        outputs = [("span_item", _I64, (-1,)), ("span_label", _BYTES, (-1,)), ("span_text", _BYTES, (-1,)),
                   ("span_score", _F32, (-1,)), ("span_start", _I64, (-1,)), ("span_end", _I64, (-1,))]
    elif task == "sentence-embeddings":
        outputs = [("embedding", _F32, (-1, -1))]
    else:
        classes = len(processor.config.labels) or -1
        outputs = [("label", _BYTES, (-1,)), ("score", _F32, (-1,)), ("scores", _F32, (-1, classes))]
        if processor.config.audio is not None:
            outputs += [("window_item", _I64, (-1,)), ("window_start", _F32, (-1,)),
                        ("window_end", _F32, (-1,))]
    return Signature([TensorSpec(input_name(processor), _BYTES, (-1,), 0)],
                     [TensorSpec(name, dtype, shape, 0) for name, dtype, shape in outputs])


def decode_items(processor: Processor, elements: Sequence[bytes], max_items: int, max_item_bytes: int
                 ) -> list[Any]:
    """BYTES elements as the processor's items: strict UTF-8 texts, decoded images or WAV files."""
    name = input_name(processor)
    if not elements:
        raise BadInferenceRequest(f"no {name} given")
    if len(elements) > max_items:
        raise InputOverLimit(f"{len(elements)} {name} items, over the limit of {max_items}")
    for i, e in enumerate(elements):
        if len(e) > max_item_bytes:
            raise InputOverLimit(f"{name} {i} has {len(e)} bytes, over the limit of {max_item_bytes}")
    if name == "image":
        return [decode_image(e, f"image {i}") for i, e in enumerate(elements)]
    if name == "audio":
        rate = processor.config.audio["sampling_rate"]  # type: ignore[index]
        return [decode_wav(e, rate, f"audio {i}") for i, e in enumerate(elements)]
    try:
        return [e.decode("utf-8") for e in elements]
    except UnicodeDecodeError as exc:
        raise BadInferenceRequest(f"a text is not valid UTF-8: {exc}") from None


def processor_of(served: ServedModel) -> Processor:
    """The served release's processing; ``NoProcessing`` when it takes tensors only here."""
    if served.processor is None:
        raise NoProcessing(f"model {served.name!r} takes tensors only here (no processing it can run)")
    return served.processor


def run(host: ModelHost, served: ServedModel, items: Sequence[Any], captured_at: float | None,
        hop_s: float | None = None, max_windows: int | None = None) -> list[Result] | list[list[AudioWindow]]:
    """``items`` through ``served``'s processing and ``host``'s model, in chunks of its batch; clips as
    their windows (``hop_s``: see ``Processor.window_starts``), at most ``max_windows`` in all."""
    processor = processor_of(served)
    if hop_s is not None and processor.config.audio is None:
        raise BadInferenceRequest(f"hop_s cuts audio; this {processor.config.task} model takes none")

    def predict(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        release, outputs = host.predict(feeds, captured_at)
        if release != served.release:
            raise ModelChanged(f"release {release} answered a request processed for release "
                               f"{served.release}: ask again")
        return outputs

    if processor.config.audio is None:
        return processor.run(list(items), predict)
    windows = sum(len(processor.window_starts(len(x), hop_s)) for x in items)
    if max_windows is not None and windows > max_windows:
        raise InputOverLimit(f"{windows} audio windows, over the limit of {max_windows} (fewer clips, "
                             "shorter ones or a longer hop_s)")
    return processor.run_windows(list(items), predict, hop_s)


def _bytes(values: Sequence[str]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() for v in values]
    return out


def result_tensors(results: Sequence[Result] | Sequence[list[AudioWindow]]) -> dict[str, np.ndarray]:
    """Typed results as the named tensors of ``signature`` (one row per item; per span for spans; per
    window for audio)."""
    if results and all(isinstance(r, list) and r and isinstance(r[0], AudioWindow) for r in results):
        rows = [(i, w) for i, ws in enumerate(results) for w in ws]  # type: ignore[union-attr]
        return {**result_tensors([w.result for _, w in rows]),  # type: ignore[union-attr]
                "window_item": np.array([i for i, _ in rows], np.int64),
                "window_start": np.array([w.start for _, w in rows], np.float32),  # type: ignore[union-attr]
                "window_end": np.array([w.end for _, w in rows], np.float32)}  # type: ignore[union-attr]
    if all(isinstance(r, Classification) for r in results):
        return {"label": _bytes([r.label for r in results]),  # type: ignore[union-attr]
                "score": np.array([r.score for r in results], np.float32),  # type: ignore[union-attr]
                "scores": np.stack([r.scores for r in results]).astype(np.float32)}  # type: ignore[union-attr]
    if all(isinstance(r, np.ndarray) for r in results):
        return {"embedding": np.stack(results).astype(np.float32)}  # type: ignore[arg-type]
    rows = [(i, s) for i, spans in enumerate(results) for s in spans]  # type: ignore[union-attr]
    return {"span_item": np.array([i for i, _ in rows], np.int64),
            "span_label": _bytes([s.label for _, s in rows]), "span_text": _bytes([s.text for _, s in rows]),
            "span_score": np.array([s.score for _, s in rows], np.float32),
            "span_start": np.array([s.start for _, s in rows], np.int64),
            "span_end": np.array([s.end for _, s in rows], np.int64)}


def result_record(result: Result | list[AudioWindow]) -> dict[str, Any]:
    """One typed result as JSON: label, score and the top classes; spans; a clip's windows; or the
    embedding."""
    if isinstance(result, Classification):
        return {"label": result.label, "score": result.score, "top": result.top()}
    if isinstance(result, list) and result and isinstance(result[0], AudioWindow):
        return {"windows": [{"start": w.start, "end": w.end, **result_record(w.result)}
                            for w in result]}  # type: ignore[union-attr]
    if isinstance(result, list):
        return {"spans": [{"label": s.label, "score": s.score, "start": s.start, "end": s.end, "text": s.text}
                          for s in result]}
    return {"embedding": result.tolist()}
