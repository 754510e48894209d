"""Texts and images in, typed results out, for the serving front ends (the HTTP API and the Unix socket).

A model built with ``from_pretrained`` carries its processing in the signed bundle; the agent runs it
(``runtime_wasm.processing``) so a local app sends what it has, strings or encoded images, instead of
token ids and normalised pixels. The processing read is the served release's own (``ServedModel``), and a
reply from another release (an update landed meanwhile) is refused with ``ModelChanged``, never mixed.

On the wire (``ota.oip``) a processed call is one BYTES input, ``text`` or ``image``, and typed outputs:
classification ``label`` (BYTES), ``score`` (FP32) and ``scores`` (FP32, every class); embeddings
``embedding`` (FP32); token classification one row per span across the batch: ``span_item`` (INT64, the
input it came from), ``span_label``, ``span_text`` (BYTES), ``span_score`` (FP32), ``span_start``,
``span_end`` (INT64, character offsets).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime_wasm import ModelSpec
from runtime_wasm.processing import (
    PROCESSING_FILE,
    Classification,
    ProcessingError,
    Processor,
    Result,
    decode_image,
)
from runtime_wasm.spec import TensorSpec

from .errors import BadInferenceRequest, InputOverLimit, ModelChanged, NoProcessing
from .oip import Signature

if TYPE_CHECKING:
    from .serve import ModelHost, ServedModel

log = logging.getLogger(__name__)
_BYTES, _F32, _I64 = "object", "float32", "int64"


def load_processor(slot: str | Path, spec: ModelSpec) -> Processor | None:
    """The slot's signed processing, ready to run (the tokenizer read now, not on a first request); None
    when it has none, or when this device cannot run it (no ``tokenizers`` wheel, a task this runtime does
    not know) or serve it (audio: no waveform bytes on the wire yet): the model is then served as tensors
    only, which is logged."""
    if not (Path(slot) / PROCESSING_FILE).is_file():
        return None
    try:
        processor = Processor.from_dir(slot, {t.name: (t.shape, t.dtype) for t in spec.inputs})
        if processor.config.text is not None:
            processor.tokenizer  # noqa: B018 -- read and configured once, before threads share it
        elif processor.config.image is None:
            raise ProcessingError(f"{processor.config.task} items cannot be sent as text or image bytes")
    except ProcessingError as exc:
        log.warning("%s: serving tensors only, its processing cannot run here: %s", slot, exc)
        return None
    return processor


def input_name(processor: Processor) -> str:
    return "image" if processor.config.image is not None else "text"


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
    return Signature([TensorSpec(input_name(processor), _BYTES, (-1,), 0)],
                     [TensorSpec(name, dtype, shape, 0) for name, dtype, shape in outputs])


def decode_items(processor: Processor, elements: Sequence[bytes], max_items: int, max_item_bytes: int
                 ) -> list[Any]:
    """BYTES elements as the processor's items: strict UTF-8 texts, or decoded images."""
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
    try:
        return [e.decode("utf-8") for e in elements]
    except UnicodeDecodeError as exc:
        raise BadInferenceRequest(f"a text is not valid UTF-8: {exc}") from None


def processor_of(served: ServedModel) -> Processor:
    """The served release's processing; ``NoProcessing`` when it takes tensors only here."""
    if served.processor is None:
        raise NoProcessing(f"model {served.name!r} takes tensors only here (no processing it can run)")
    return served.processor


def run(host: ModelHost, served: ServedModel, items: Sequence[Any], captured_at: float | None
        ) -> list[Result]:
    """``items`` through ``served``'s processing and ``host``'s model, in chunks of its batch."""
    processor = processor_of(served)

    def predict(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        release, outputs = host.predict(feeds, captured_at)
        if release != served.release:
            raise ModelChanged(f"release {release} answered a request processed for release "
                               f"{served.release}: ask again")
        return outputs

    return processor.run(list(items), predict)


def _bytes(values: Sequence[str]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() for v in values]
    return out


def result_tensors(results: Sequence[Result]) -> dict[str, np.ndarray]:
    """Typed results as the named tensors of ``signature`` (one row per item; per span for spans)."""
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


def result_record(result: Result) -> dict[str, Any]:
    """One typed result as JSON: label, score and the top classes; spans; or the embedding."""
    if isinstance(result, Classification):
        return {"label": result.label, "score": result.score, "top": result.top()}
    if isinstance(result, list):
        return {"spans": [{"label": s.label, "score": s.score, "start": s.start, "end": s.end, "text": s.text}
                          for s in result]}
    return {"embedding": result.tolist()}
