"""PyTorch in (the ``torch`` extra): ``CuvilModel.from_torch``, ``cuvil_edge.compile`` and
``torch.compile(backend="cuvil")`` against eager PyTorch, and ``from_pretrained`` on a Hugging Face
directory that has PyTorch weights only, against transformers' own pipeline, then built, signed, installed
and asked by ``cuvil-agent infer --text``. Models are built here from configs with seeded weights; no
network."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import cuvil_edge
from cuvil_agent.cli import main as agent_main
from cuvil_agent.serve import InferenceServer, ModelHost
from cuvil_edge import CuvilModel, ExportError, Target
from cuvil_edge.cli import main as edge_main
from cuvil_edge.signing import Keyring, build_bundle
from ota import Installer
from tests.support.torch_pretrained import TEXTS, pipeline_scores, pytorch_sst_dir

pytestmark = pytest.mark.integration
HW = "test-device"


class Block(nn.Module):
    """A torchvision-style residual block: conv-bn-relu twice and a projected shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                                  nn.ReLU(), nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.short(x))


def cnn() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                        Block(16, 32, 2), Block(32, 32, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(32, 10))
    for m in net.modules():  # batch statistics that are not the identity, so folding them is checked
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return net.eval()


class TinyEncoder(nn.Module):
    """Token embedding, two pre-norm transformer layers and a pooled head: a small text transformer."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.embed = nn.Embedding(100, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.embed(ids)).mean(dim=1))


def close(got: np.ndarray, want: torch.Tensor, rtol: float = 1e-4) -> None:
    want = want.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


@pytest.mark.parametrize("exporter", ["auto", "dynamo", "torchscript"])
def test_from_torch_matches_eager_pytorch_for_a_cnn(exporter):
    net, x = cnn(), torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    model = CuvilModel.from_torch(net, x, exporter=exporter).optimize(targets=[Target()])
    (y,) = model.predict([x.numpy()]).values()
    close(y, net(x))


def test_from_torch_matches_eager_pytorch_for_a_transformer():
    net = TinyEncoder().eval()
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(3))
    model = CuvilModel.from_torch(net, (ids,), input_names=["ids"], output_names=["scores"])
    assert [t.name for t in model.spec.inputs] == ["ids"]
    assert [t.name for t in model.spec.outputs] == ["scores"]
    close(model.predict({"ids": ids.numpy()})["scores"], net(ids))


def test_compile_returns_a_callable_on_tensors_built_per_shape():
    net = cnn()
    fast = cuvil_edge.compile(net, targets=[Target()])
    for batch in (1, 3, 1):
        x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(batch))
        y = fast(x)
        assert isinstance(y, torch.Tensor) and y.shape == (batch, 10)
        close(y.numpy(), net(x))
    assert len(fast._built) == 2  # one build per input shape, reused


def test_torch_compile_backend_cuvil_matches_eager():
    net = cnn()
    compiled = torch.compile(net, backend="cuvil", dynamic=False)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    close(compiled(x).numpy(), net(x))
    x2 = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    close(compiled(x2).numpy(), net(x2))  # the same build, new values


def test_export_failures_are_typed_and_name_every_exporter():
    with pytest.raises(ExportError, match="training mode"):
        CuvilModel.from_torch(nn.Linear(4, 2).train(), torch.zeros(1, 4))
    with pytest.raises(ExportError, match="unknown exporter 'onnx'"):
        CuvilModel.from_torch(nn.Linear(4, 2).eval(), torch.zeros(1, 4), exporter="onnx")

    class Singular(nn.Module):  # linalg_svdvals: neither exporter has an ONNX form for it
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.svdvals(x)

    with pytest.raises(ExportError) as caught:
        CuvilModel.from_torch(Singular().eval(), torch.randn(1, 4, 4))
    message = str(caught.value)
    assert "Singular could not be exported and imported" in message
    assert "dynamo" in message and "torchscript" in message


# -- a Hugging Face checkpoint with PyTorch weights only ------------------------------------------------


@pytest.fixture(scope="module")
def torch_sst(tmp_path_factory) -> Path:
    return pytorch_sst_dir(tmp_path_factory.mktemp("pt-sst"))


def test_from_pretrained_exports_pytorch_weights_and_matches_the_transformers_pipeline(torch_sst):
    want = pipeline_scores(torch_sst)
    labels = [max(scores, key=scores.__getitem__) for scores in want]
    assert set(labels) == {"NEGATIVE", "POSITIVE"}
    model = CuvilModel.from_pretrained(torch_sst).optimize(targets=[Target()])
    got = model.predict(TEXTS)
    for result, scores in zip(got, want):
        assert result.label == max(scores, key=scores.__getitem__)
        assert abs(result.score - scores[result.label]) < 1e-4
    for precision in ("int8", "int4"):
        calibration = TEXTS if precision == "int8" else None  # static int8 calibrates on texts
        quantized = CuvilModel.from_pretrained(torch_sst).optimize(precision, targets=[Target()],
                                                                   calibration=calibration)
        assert [r.label for r in quantized.predict(TEXTS)] == labels, precision


def test_a_pytorch_only_checkpoint_builds_installs_and_cuvil_agent_infers_its_label(torch_sst, tmp_path,
                                                                                    capsys):
    expected = CuvilModel.from_pretrained(torch_sst).optimize(targets=[Target()]).predict(TEXTS[0])
    out = tmp_path / "sst.cuvil"
    assert edge_main(["build", str(torch_sst), "-o", str(out), "-q", "--targets", "simd128-x86"]) == 0
    ring = Keyring.init(tmp_path / "keys", root_keys=1, root_threshold=1)
    bundle = tmp_path / "sst.cvb"
    build_bundle(out, bundle, ring.release_keys(), version="1.0.0", release=1, hardware_ids=[HW])
    root = tmp_path / "root.json"
    root.write_text(json.dumps(ring.root_envelope()))
    state = tmp_path / "state"
    assert agent_main(["install", str(bundle), "--state-dir", str(state), "--root", str(root),
                       "--hardware-id", HW]) == 0
    host = ModelHost(Installer(state, HW))
    server = InferenceServer(tmp_path / "infer.sock", host)
    try:
        capsys.readouterr()
        assert agent_main(["infer", "--state-dir", str(state), "--hardware-id", HW, "--socket",
                           str(server.path), "--text", TEXTS[0]]) == 0
        printed = capsys.readouterr().out.splitlines()
    finally:
        server.close()
        host.close()
    assert printed[0] == f"{expected.label} {expected.score:.4f} (release 1): {TEXTS[0]}"
