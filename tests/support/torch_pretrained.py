"""A Hugging Face checkpoint with PyTorch weights only (a DistilBERT SST-2-shaped classifier fine-tuned
for a few steps on ``TEXTS``) and transformers' own pipeline scores on it: the oracle of the PyTorch
``from_pretrained`` tests. Needs the ``torch`` extra."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from tests.support.pretrained import train_tokenizer

TEXTS = ["I love this movie!", "This is terrible.", "What a wonderful day", "the plot was boring and slow",
         "great acting, great music", "I hated every minute of it"]


def pytorch_sst_dir(path: Path) -> Path:
    """A DistilBERT SST-2-shaped classifier saved by transformers (safetensors, config.json, the fast
    tokenizer): seeded weights fine-tuned for a few steps on the test texts' sentiment."""
    tok = train_tokenizer()
    config = transformers.DistilBertConfig(
        vocab_size=tok.get_vocab_size(), dim=64, n_layers=2, n_heads=2, hidden_dim=128,
        max_position_embeddings=64, num_labels=2, id2label={0: "NEGATIVE", 1: "POSITIVE"},
        label2id={"NEGATIVE": 0, "POSITIVE": 1}, pad_token_id=0)
    torch.manual_seed(7)
    model = transformers.DistilBertForSequenceClassification(config)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                                model_max_length=64)
    batch = fast(TEXTS, return_tensors="pt", padding=True)
    sentiment = torch.tensor([1, 0, 1, 0, 1, 0])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(40):  # a few steps of fine-tuning: margins a quantized model keeps, as a real one has
        optimizer.zero_grad()
        model(**batch, labels=sentiment).loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(path)
    fast.save_pretrained(path)
    assert (path / "model.safetensors").is_file() and not list(path.glob("*.onnx"))
    return path


def pipeline_scores(path: Path) -> list[dict[str, float]]:
    classify = transformers.pipeline("text-classification", model=str(path), tokenizer=str(path), top_k=None,
                                     device="cpu")
    return [{d["label"]: d["score"] for d in result} for result in classify(TEXTS)]
