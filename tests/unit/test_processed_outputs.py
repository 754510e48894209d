"""``cuvil_agent.payloads``: the typed results of every task become exactly the tensors its metadata
announces (names, datatypes, ranks), spans flattened across the batch with the item each came from. No model
runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from cuvil_agent import oip
from cuvil_agent.payloads import decode_items, result_tensors, run, signature
from ota.errors import BadInferenceRequest, InputOverLimit, ModelChanged, NoProcessing
from runtime_wasm.processing import Classification, ProcessingConfig, Processor, Span

LABELS = ["O", "B-PER", "I-PER"]


def processor(task: str) -> Processor:
    d: dict[str, Any] = {"format": 1, "task": task, "output": "y", "labels": LABELS}
    if task == "image-classification":
        d["image"] = {"input": "x", "resample": "bilinear", "rescale": 1 / 255, "mean": [0, 0, 0],
                      "std": [1, 1, 1]}
        return Processor(ProcessingConfig.from_dict(d), {}, {"x": ((2, 3, 4, 4), "float32")})
    d["text"] = {"tokenizer": "tokenizer.json", "inputs": {"input_ids": "ids"}, "pad_id": 0}
    return Processor(ProcessingConfig.from_dict(d), {"tokenizer.json": b"{}"}, {"ids": ((2, 8), "int64")})


def classification(i: int) -> Classification:
    scores = np.eye(3, dtype=np.float32)[i] * 0.5 + 0.5 / 3
    return Classification(LABELS[i], float(scores[i]), i, scores, tuple(LABELS))


RESULTS: dict[str, list[Any]] = {
    "text-classification": [classification(1), classification(2)],
    "image-classification": [classification(0)],
    "sentence-embeddings": [np.ones(4, np.float32), np.zeros(4, np.float32)],
    "token-classification": [[Span("PER", 0.9, 0, 5, "Alice"), Span("PER", 0.8, 10, 13, "Bob")], [],
                             [Span("PER", 0.7, 2, 4, "Al")]],
}


@pytest.mark.parametrize("task", sorted(RESULTS))
def test_result_tensors_are_what_the_signature_announces(task):
    sig = signature(processor(task))
    tensors = result_tensors(RESULTS[task])
    assert [t.name for t in sig.outputs] == list(tensors)
    for spec in sig.outputs:
        a = tensors[spec.name]
        assert oip.datatype(a.dtype) == oip.datatype(spec.dtype) and a.ndim == len(spec.shape)
        assert all(s in (-1, d) for s, d in zip(spec.shape, a.shape))
    assert [t.name for t in sig.inputs] == ["image" if task == "image-classification" else "text"]


def test_spans_are_flattened_with_the_item_they_came_from():
    t = result_tensors(RESULTS["token-classification"])
    assert t["span_item"].tolist() == [0, 0, 2]  # item 1 has none
    assert t["span_text"].tolist() == [b"Alice", b"Bob", b"Al"]
    assert t["span_start"].tolist() == [0, 10, 2] and t["span_end"].tolist() == [5, 13, 4]
    np.testing.assert_allclose(t["span_score"], [0.9, 0.8, 0.7])


def test_classifications_give_labels_scores_and_every_class():
    t = result_tensors(RESULTS["text-classification"])
    assert t["label"].tolist() == [b"B-PER", b"I-PER"]
    np.testing.assert_allclose(t["scores"], np.stack([r.scores for r in RESULTS["text-classification"]]))


def test_items_are_bounded_and_texts_must_be_utf8():
    text = processor("text-classification")
    assert decode_items(text, ["héllo".encode()], 2, 16) == ["héllo"]
    with pytest.raises(InputOverLimit, match="3 text items"):
        decode_items(text, [b"a"] * 3, 2, 16)
    with pytest.raises(InputOverLimit, match="17 bytes"):
        decode_items(text, [b"a" * 17], 2, 16)
    with pytest.raises(BadInferenceRequest, match="not valid UTF-8"):
        decode_items(text, [b"caf\xe9"], 2, 16)
    with pytest.raises(BadInferenceRequest, match="no text"):
        decode_items(text, [], 2, 16)


class SwappingHost:
    """Answers its first chunk as release 1, then as release 2: an update landed mid-request."""

    def __init__(self) -> None:
        self.releases = iter([1, 2])

    def predict(self, feeds: dict[str, np.ndarray], captured_at: float | None) -> tuple[int, dict[str, Any]]:
        return next(self.releases), {"y": np.tile(np.arange(3.0), (len(feeds["x"]), 1))}


def test_a_request_answered_by_two_releases_is_refused_not_mixed():
    served = SimpleNamespace(name="m", release=1, processor=processor("image-classification"))
    images = [np.zeros((4, 4, 3), np.uint8)] * 4  # two chunks of the batch of 2
    with pytest.raises(ModelChanged, match="release 2 answered"):
        run(SwappingHost(), served, images, None)  # type: ignore[arg-type]
    assert [r.index for r in run(SwappingHost(), served, images[:2], None)] == [2, 2]  # type: ignore[arg-type]
    tensors_only = SimpleNamespace(name="m", release=1, processor=None)
    with pytest.raises(NoProcessing):
        run(SwappingHost(), tensors_only, images, None)  # type: ignore[arg-type]
