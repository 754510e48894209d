"""A BERT-shaped model passed through onnxruntime's transformer optimizer (``optimize_model``), whose
com.microsoft fusions (Attention, SkipLayerNormalization, Gelu) must build and match onnxruntime. The model
is a small seeded BERT written as transformers 4 wrote it (the additive -10000 mask the optimizer's
attention fusion knows; transformers 5's mask path is left unfused) and exported locally by the TorchScript
exporter, as ``optimize_model`` expects. EmbedLayerNormalization, which the optimizer does not fuse here,
and the other contrib ops are checked one by one in ``tests/unit/test_contrib_ops.py``; the 4-bit path
(``MatMulNBitsQuantizer``) in ``test_prequantized.py::test_matmul_nbits``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.frontend.torch_export import export_once
from cuvil_edge.oracle import ort_session
from tests.support.ort_check import assert_outputs_close

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.integration

HEADS, HIDDEN, LAYERS, BATCH, SEQ, VOCAB = 2, 32, 2, 2, 8, 100
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: what the optimizer must have fused for the test to prove anything
FUSED = {"Attention", "SkipLayerNormalization"}
GELUS = {"Gelu", "FastGelu", "BiasGelu"}


class Layer(torch.nn.Module):
    """One encoder layer: self-attention, then the MLP, each added back and layer-normed."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(4))
        self.ln1, self.ln2 = (torch.nn.LayerNorm(HIDDEN, eps=1e-12) for _ in range(2))
        self.up, self.down = torch.nn.Linear(HIDDEN, 4 * HIDDEN), torch.nn.Linear(4 * HIDDEN, HIDDEN)

    @staticmethod
    def heads(x: torch.Tensor) -> torch.Tensor:
        return x.view(x.size(0), x.size(1), HEADS, HIDDEN // HEADS).permute(0, 2, 1, 3)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = self.heads(self.q(h)) @ self.heads(self.k(h)).transpose(-1, -2) / math.sqrt(HIDDEN // HEADS)
        ctx = (torch.softmax(scores + mask, dim=-1) @ self.heads(self.v(h))).permute(0, 2, 1, 3).contiguous()
        h = self.ln1(self.o(ctx.view(ctx.size(0), ctx.size(1), HIDDEN)) + h)
        return self.ln2(self.down(torch.nn.functional.gelu(self.up(h))) + h)


class Bert(torch.nn.Module):
    """Word, position and segment embeddings, layer-normed, through ``LAYERS`` encoder layers."""

    def __init__(self) -> None:
        super().__init__()
        self.words, self.positions = torch.nn.Embedding(VOCAB, HIDDEN), torch.nn.Embedding(32, HIDDEN)
        self.segments, self.ln = torch.nn.Embedding(2, HIDDEN), torch.nn.LayerNorm(HIDDEN, eps=1e-12)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(LAYERS))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.size(1), dtype=torch.long).unsqueeze(0).expand_as(ids)
        h = self.ln(self.words(ids) + self.positions(positions) + self.segments(segments))
        additive = (1.0 - mask[:, None, None, :].to(torch.float32)) * -10000.0
        for layer in self.layers:
            h = layer(h, additive)
        return h


@pytest.fixture(scope="module")
def optimized_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from onnxruntime.transformers.optimizer import optimize_model

    torch.manual_seed(0)
    args = tuple(torch.ones(BATCH, SEQ, dtype=torch.int64) for _ in INPUTS)
    proto = export_once(Bert().eval(), args, "torchscript", INPUTS, ["last_hidden_state"])
    folder = tmp_path_factory.mktemp("bert")
    onnx.save(proto, folder / "bert.onnx")
    optimized = optimize_model(str(folder / "bert.onnx"), model_type="bert", num_heads=HEADS,
                               hidden_size=HIDDEN)
    optimized.save_model_to_file(str(folder / "bert_opt.onnx"))
    return folder / "bert_opt.onnx"


def feeds(seed: int) -> dict[str, np.ndarray]:
    """Seeded ids, segments, and a mask right-padding the first sequence to 5 tokens."""
    rng = np.random.default_rng(seed)
    mask = np.ones((BATCH, SEQ), np.int64)
    mask[0, 5:] = 0
    return {"input_ids": rng.integers(0, VOCAB, (BATCH, SEQ)), "attention_mask": mask,
            "token_type_ids": rng.integers(0, 2, (BATCH, SEQ))}


def test_optimized_bert_builds_and_matches_onnxruntime(optimized_bert: Path) -> None:
    graph = onnx.load(optimized_bert).graph
    contrib = {n.op_type for n in graph.node if n.domain == "com.microsoft"}
    assert FUSED <= contrib and contrib & GELUS, f"the optimizer fused only {sorted(contrib)}"
    sess = ort_session(optimized_bert)
    int32 = {i.name for i in sess.get_inputs() if "int32" in i.type}  # the optimizer may narrow them
    with CuvilModel.load(optimized_bert).optimize(targets=[Target()]) as model:
        assert "attention" in model.graph.op_counts()  # the fused kernel, not a decomposition
        for seed in range(3):
            feed = {k: v.astype(np.int32 if k in int32 else np.int64) for k, v in feeds(seed).items()}
            want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
            assert_outputs_close(model.predict(feed), want, what=f"seed {seed}")
