"""``from_pretrained`` on a sharded PyTorch checkpoint (``model.safetensors.index.json`` naming
``model-0000k-of-0000n.safetensors``, or the same for ``pytorch_model.bin``), as transformers saves one past
``max_shard_size``: a local directory and a cached hub id are exported and predict what transformers
predicts; a shard the index names but the directory lacks, and a shard path leaving the directory, are typed
errors naming the index and the shard, before transformers is asked to load anything. No network: the hub
cache is laid out here as huggingface_hub keeps it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from huggingface_hub import constants as hf_constants  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from cuvil_edge import CuvilModel, MissingPretrainedFile, PretrainedError, Target  # noqa: E402
from cuvil_edge.testing.broker import free_port  # noqa: E402
from tests.support.pretrained import hub_cache, train_tokenizer  # noqa: E402

TEXTS = ["I love this movie!", "This is terrible.", "the plot was boring and slow"]
INDEX = "model.safetensors.index.json"


def shards(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("model-*.safetensors"))


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """A seeded DistilBERT-style classifier with its fast tokenizer, saved by transformers in 20 KB shards."""
    path = tmp_path_factory.mktemp("sharded")
    tok = train_tokenizer()
    config = transformers.DistilBertConfig(
        vocab_size=tok.get_vocab_size(), dim=32, n_layers=2, n_heads=2, hidden_dim=64,
        max_position_embeddings=32, num_labels=3, initializer_range=0.5, id2label={0: "a", 1: "b", 2: "c"},
        label2id={"a": 0, "b": 1, "c": 2}, pad_token_id=0)
    torch.manual_seed(11)
    transformers.DistilBertForSequenceClassification(config).save_pretrained(path, max_shard_size="20KB")
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=32).save_pretrained(path)
    assert not (path / "model.safetensors").exists() and len(shards(path)) > 2
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Path:
    """One cuvil cache for the module: the hub snapshot's export is the local directory's, digest for
    digest (index and shards), so it is found there."""
    return tmp_path_factory.mktemp("cuvil")


@pytest.fixture
def cuvil_cache(exports, monkeypatch) -> Path:
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(exports))
    return exports


def transformers_scores(path: Path) -> np.ndarray:
    """Softmax of transformers' own logits, the model and tokenizer loaded from ``path`` (the shards)."""
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(path).eval()
    with torch.no_grad():
        logits = model(**tok(TEXTS, return_tensors="pt", padding=True)).logits
    return torch.softmax(logits, -1).numpy()


def cuvil_scores(path_or_id: str | Path) -> np.ndarray:
    model = CuvilModel.from_pretrained(path_or_id).optimize(targets=[Target()])
    return np.stack([r.scores for r in model.predict(TEXTS)])


def as_bin_shards(source: Path, out: Path) -> Path:
    """``source``'s safetensors shards rewritten as ``pytorch_model-*.bin`` with their index, as older
    transformers saved them."""
    shutil.copytree(source, out, ignore=shutil.ignore_patterns("model*.safetensors*"))
    index = json.loads((source / INDEX).read_text())
    renamed = {name: name.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
               for name in set(index["weight_map"].values())}
    for name, new in renamed.items():
        torch.save(load_file(source / name), out / new)
    index["weight_map"] = {k: renamed[v] for k, v in index["weight_map"].items()}
    (out / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    return out


@pytest.mark.parametrize("weights", ["safetensors", "bin"])
def test_a_sharded_checkpoint_exports_and_predicts_what_transformers_predicts(sharded, cuvil_cache,
                                                                             tmp_path, weights):
    path = sharded if weights == "safetensors" else as_bin_shards(sharded, tmp_path / "bin")
    want = transformers_scores(path)
    np.testing.assert_allclose(cuvil_scores(path), want, atol=1e-4)


def test_a_cached_hub_id_with_sharded_weights_reads_its_index_and_shards(sharded, cuvil_cache, tmp_path,
                                                                         monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_cache(cache, "acme/sharded", sharded, sorted(p.name for p in sharded.iterdir()))
    np.testing.assert_allclose(cuvil_scores("acme/sharded"), transformers_scores(sharded), atol=1e-4)


def test_a_missing_shard_names_the_index_and_the_shard(sharded, cuvil_cache, tmp_path):
    path = shutil.copytree(sharded, tmp_path / "partial")
    (path / shards(path)[1]).unlink()
    with pytest.raises(MissingPretrainedFile) as raised:
        CuvilModel.from_pretrained(path)
    assert str(raised.value) == f"{path / INDEX} names 1 shard(s) that {path} lacks: {shards(sharded)[1]}"


@pytest.mark.parametrize("offline", [True, False])
def test_a_hub_id_whose_shard_is_neither_cached_nor_downloadable_names_it(sharded, cuvil_cache, tmp_path,
                                                                          monkeypatch, offline):
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:  # the fetch of the shard is tried, and fails: the hub endpoint is a port nothing listens on
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(hf_constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    missing = shards(sharded)[2]
    cached = [p.name for p in sharded.iterdir() if p.name != missing]
    snapshot = hub_cache(cache, "acme/sharded", sharded, cached)
    with pytest.raises(MissingPretrainedFile) as raised:
        CuvilModel.from_pretrained("acme/sharded")
    assert str(raised.value) == f"{snapshot / INDEX} names 1 shard(s) that {snapshot} lacks: {missing}"


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/tmp/outside.safetensors", "a\\..\\..\\x", ""])
def test_a_shard_path_leaving_the_directory_is_refused_not_read(sharded, cuvil_cache, tmp_path, shard):
    path = shutil.copytree(sharded, tmp_path / "model")
    shutil.copy(path / shards(path)[0], tmp_path / "outside.safetensors")
    index = json.loads((path / INDEX).read_text())
    index["weight_map"]["distilbert.embeddings.word_embeddings.weight"] = shard
    (path / INDEX).write_text(json.dumps(index))
    with pytest.raises(PretrainedError) as raised:
        CuvilModel.from_pretrained(path)
    assert str(raised.value) == f"{path / INDEX} names shard {shard!r}, not a file inside {path}: refused"


def test_an_index_without_a_weight_map_is_a_typed_error(sharded, cuvil_cache, tmp_path):
    path = shutil.copytree(sharded, tmp_path / "model")
    (path / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": shards(path)}))
    with pytest.raises(PretrainedError, match="no weight_map of tensor names to shard file names"):
        CuvilModel.from_pretrained(path)
