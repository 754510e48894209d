"""Whole nets, ONNX -> wasm -> wasmtime, against onnxruntime; plus the graph shape each pass promises
(BN folded, activations fused, depthwise kernel chosen), which numbers alone would not catch."""

from __future__ import annotations

import functools

import onnx
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.testing.zoo import DW_PREFIX, NETS, WEIGHTS_AS

pytestmark = pytest.mark.integration


@functools.cache
def compiled(net: str, weights_as: str = "initializer", batch: int = 1) -> tuple[onnx.ModelProto, CuvilModel]:
    """Build once per session: the numeric and the structural tests share one compile."""
    proto = NETS[net](weights_as, batch)
    return proto, CuvilModel.load(proto).optimize(targets=[Target()])


def ops(model: CuvilModel) -> list[str]:
    assert model.compiled is not None
    return [n.op for n in model.compiled.graph.nodes]


@pytest.mark.parametrize("weights_as", WEIGHTS_AS)
@pytest.mark.parametrize("net", sorted(NETS))
def test_net_matches_ort(net: str, weights_as: str, matches_ort) -> None:
    proto, model = compiled(net, weights_as)
    matches_ort(proto, model, n_inputs=3, seed=1)


@pytest.mark.parametrize("net", ["mlp", "resnet"])
def test_batch_two_matches_ort(net: str, matches_ort) -> None:
    proto, model = compiled(net, batch=2)
    matches_ort(proto, model, n_inputs=2, seed=2)


@pytest.mark.parametrize("net", sorted(NETS))
def test_constant_nodes_compile_like_initializers(net: str) -> None:
    """Weights stored as Constant nodes must reach the same packed weights as initializers."""
    (_, a), (_, b) = compiled(net, "initializer"), compiled(net, "constant")
    assert a.compiled is not None and b.compiled is not None
    assert ops(a) == ops(b)
    assert a.compiled.weights == b.compiled.weights


def test_mlp_relus_fused_into_gemms() -> None:
    _, model = compiled("mlp")
    assert model.compiled is not None
    nodes = model.compiled.graph.nodes
    assert [n.op for n in nodes] == ["gemm"] * 3
    assert [bool(n.attrs.get("act")) for n in nodes] == [True, True, False]


@pytest.mark.parametrize("net", ["resnet", "mobilenet", "audio"])
def test_batchnorm_folded(net: str) -> None:
    assert "channel_affine" not in ops(compiled(net)[1])


@pytest.mark.parametrize("net", ["resnet", "unet", "audio"])
def test_no_standalone_activation(net: str) -> None:
    """Every Relu here follows a conv or the residual Add: all fuse into the producer's epilogue."""
    assert "epilogue_act" not in ops(compiled(net)[1])


def test_mobilenet_depthwise_uses_direct_kernel() -> None:
    """IR nodes keep their ONNX names, so the depthwise convs are the kernel-table entries ``dw*``."""
    _, model = compiled("mobilenet")
    assert model.compiled is not None
    dw = {name: k for name, k in model.compiled.program.kernels_used.items() if name.startswith(DW_PREFIX)}
    assert len(dw) == 4, model.compiled.program.kernels_used
    assert all("dwconv" in k for k in dw.values()), dw


def test_mlp_all_variants_match_ort(matches_ort) -> None:
    """Every tier x family module the packager ships computes the same numbers (arm-tuned modules run
    on x86 too; only their speed differs)."""
    from runtime_wasm import probe_host
    from runtime_wasm.loader import instantiate

    proto = NETS["mlp"]("initializer", 1)
    model = CuvilModel.load(proto).optimize(targets="all")
    c = model.compiled
    assert c is not None
    assert {(v.tier, v.family) for v in c.spec.variants} == {
        (t, f) for t in ("simd128", "relaxed") for f in ("x86", "arm")}
    relaxed_ok = probe_host().relaxed_simd
    runnable = [v for v in c.spec.variants if v.tier != "relaxed" or relaxed_ok]
    assert runnable, "no variant can run on this host"
    for v in runnable:
        with instantiate(c.spec, c.modules[v.name], c.weights, v) as wm:
            matches_ort(proto, wm, n_inputs=3, seed=3)
