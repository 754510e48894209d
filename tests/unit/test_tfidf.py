"""TfIdfVectorizer over token ids against onnxruntime: every mode, skips, unigrams to trigrams, a pool
with lengths outside [min, max], weights, 1-D and 2-D inputs, and the build-time fold."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from cuvil_edge import CuvilModel
from cuvil_edge.errors import UnsupportedOperator
from tests.support.ort_check import check_with_ort, make_model

# unigrams 2 3 5 4, bigrams (5 6) (7 8) (6 7) (3 2), trigrams (2 3 5) (6 7 8)
POOL = dict(pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 3, 2, 2, 3, 5, 6, 7, 8], ngram_counts=[0, 4, 12],
            ngram_indexes=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9])


def _node(**attrs) -> object:
    return helper.make_node("TfIdfVectorizer", ["X"], ["Y"], name="tfidf", **{**POOL, **attrs})


@pytest.mark.parametrize("mode,weights", [("TF", None), ("IDF", None), ("IDF", True), ("TFIDF", True),
                                          ("TFIDF", None)])
@pytest.mark.parametrize("lengths", [(1, 3), (2, 2), (1, 1), (2, 3)])
def test_tfidf_matches_onnxruntime(mode: str, weights: bool | None, lengths: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(lengths))
    w = {"weights": [float(v) for v in rng.uniform(0.5, 2.0, 10).round(2)]} if weights else {}
    node = _node(mode=mode, min_gram_length=lengths[0], max_gram_length=lengths[1], max_skip_count=3, **w)
    feeds = [{"X": rng.integers(1, 9, (3, 17)).astype(np.int64)} for _ in range(2)]
    checked = check_with_ort([node], feeds, ["Y"], opset=9)
    assert checked.kernels == {"i64-tfidf"}
    assert any(v.any() for v in checked.got[0].values())  # the seeded rows do hold pool grams


def test_tfidf_one_row_of_int32_and_the_fold() -> None:
    x = np.array([2, 3, 5, 6, 7, 8, 3, 2, 4, 4, 5, 6], np.int32)
    node = _node(mode="TF", min_gram_length=1, max_gram_length=3, max_skip_count=1)
    got = check_with_ort([node], {"X": x}, ["Y"], opset=9).got[0]["Y"]
    assert got.shape == (10,) and got[[0, 8, 9]].tolist() == [2.0, 1.0, 1.0]  # unigram 2 twice, both trigrams
    folded = make_model([node], {}, {"Y": got}, inits={"X": x}, opset=9)
    with CuvilModel.load(folded).optimize() as cm:
        assert {n.op for n in cm.graph.nodes} == {"copy"}  # folded at build time, by the same counting
        np.testing.assert_array_equal(cm.predict({})["Y"], got)


@pytest.mark.parametrize("attrs,why", [
    ({"pool_strings": ["a", "b"]}, "pool of strings"),
    ({"ngram_indexes": [0, 1]}, "ngram_indexes for 10 pool grams"),
    ({"ngram_counts": [0, 19, 12]}, "not ascending"),
    ({"max_gram_length": 4}, "gram lengths"),
])
def test_tfidf_refusals_name_the_node(attrs: dict, why: str) -> None:
    node = _node(**{"mode": "TF", "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 0, **attrs})
    x, y = np.zeros((2, 5), np.int64), np.zeros((2, 10), np.float32)
    model = make_model([node], {"X": x}, {"Y": y}, opset=9)
    with pytest.raises(UnsupportedOperator, match=f"'tfidf'.*{why}"):
        CuvilModel.load(model)
