"""``from_pretrained`` on a hub id whose cached snapshot holds PyTorch weights only: the snapshot is exported
as a local directory is, and matches transformers' own pipeline; an id cached with neither an ONNX / TFLite
model nor PyTorch weights is a typed error naming the id, the cache and what was looked for. No network:
the cache is laid out here as huggingface_hub keeps it (content-addressed blobs, a snapshot directory of
links to them named by the commit, ``refs/main`` naming the commit), the hub endpoint a port nothing
listens on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from huggingface_hub import constants as hf_constants
from safetensors.torch import load_file

from cuvil_edge import CuvilModel, MissingPretrainedFile, Target
from cuvil_edge.testing.broker import free_port
from tests.support.pretrained import hub_cache
from tests.support.torch_pretrained import pipeline_scores, pytorch_sst_dir

pytestmark = pytest.mark.integration
TEXTS = ["I love this movie!", "This is terrible."]


@pytest.fixture(scope="module")
def torch_sst(tmp_path_factory) -> Path:
    """The DistilBERT SST-2-shaped checkpoint (model.safetensors), and its weights as pytorch_model.bin."""
    path = pytorch_sst_dir(tmp_path_factory.mktemp("pt-sst"))
    torch.save(load_file(path / "model.safetensors"), path / "pytorch_model.bin")
    return path


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    """The hub cache, through HF_HOME (HF_HUB_CACHE unset: HF_HOME is read when resolving, not at import),
    HF_HUB_OFFLINE set; exports kept under tmp_path."""
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cuvil"))
    return tmp_path / "hf" / "hub"


def close_to_pipeline(model: CuvilModel, want: list[dict[str, float]]) -> None:
    for result, scores in zip(model.predict(TEXTS), want):
        assert result.label == max(scores, key=scores.__getitem__)
        assert abs(result.score - scores[result.label]) < 1e-4
        assert result.scores.tolist() == pytest.approx([scores[k] for k in ("NEGATIVE", "POSITIVE")],
                                                       abs=1e-4)


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_a_cached_hub_id_with_pytorch_weights_only_exports_and_matches_the_transformers_pipeline(
        torch_sst, offline_hub, weights):
    want = pipeline_scores(torch_sst)[:len(TEXTS)]
    assert {max(s, key=s.__getitem__) for s in want} == {"NEGATIVE", "POSITIVE"}
    hub_cache(offline_hub, "acme/pt-sst", torch_sst,
              ["config.json", "tokenizer.json", "tokenizer_config.json", weights])
    close_to_pipeline(CuvilModel.from_pretrained("acme/pt-sst").optimize(targets=[Target()]), want)


def test_without_hub_offline_an_unreachable_hub_falls_back_to_the_cached_weights(torch_sst, tmp_path,
                                                                                monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf_constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    names = ["config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"]
    hub_cache(cache, "acme/pt-sst", torch_sst, names)
    local = CuvilModel.from_pretrained(torch_sst).optimize(targets=[Target()])
    hub = CuvilModel.from_pretrained("acme/pt-sst").optimize(targets=[Target()])
    assert [r.scores.tolist() for r in hub.predict(TEXTS)] == [r.scores.tolist()
                                                               for r in local.predict(TEXTS)]


@pytest.mark.parametrize("offline", [True, False])
def test_a_hub_id_cached_without_any_model_names_the_id_the_cache_and_what_was_looked_for(
        torch_sst, tmp_path, monkeypatch, offline):
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(hf_constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    snapshot = hub_cache(cache, "acme/no-weights", torch_sst, ["config.json", "tokenizer.json"])
    why = ", and HF_HUB_OFFLINE is set" if offline else " and none could be downloaded"
    with pytest.raises(MissingPretrainedFile) as raised:
        CuvilModel.from_pretrained("acme/no-weights")
    assert str(raised.value) == (
        f"hub model 'acme/no-weights' has no model in the cache {cache} (snapshot {snapshot}){why}: "
        "looked for an ONNX export (model.onnx or onnx/model*.onnx; export one, e.g. with `optimum-cli "
        "export onnx`), a .tflite, or PyTorch weights (model.safetensors or pytorch_model.bin)")
