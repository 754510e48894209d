"""quant/chain.py: a static int8 layer whose one reader is another writes the reader's uint8 itself
(``yq``; the reader in "input" mode). Exact: the chained build gives the unchained build's bits on both
tiers, with odd shapes that take every store path of the requantizing epilogue (partial 4-pixel tiles,
output channels past a panel, depthwise rows shorter than a step, a GEMM chain); less arena; and only
sole readers with static activations are chained; a relu / clip that the requantization's clamp
does goes, one it does not stays."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.ir.graph import Graph
from cuvil_edge.ops.qlinear import INPUT, ActQuant
from cuvil_edge.ops.quantize import quantize_u8
from cuvil_edge.quant.chain import act_left
from cuvil_edge.testing import zoo
from cuvil_edge.testing.zoo import NetBuilder


def odd_convs() -> onnx.ModelProto:
    """3x3 (im2col) -> depthwise 3x3 stride 2 -> 1x1 -> depthwise 5x5 -> 1x1 on 13x11 pixels, channel
    counts off the 8-row panels; the last conv's output is the graph's (stays f32)."""
    b = NetBuilder("odd_convs", seed=3)
    y = b.op("Relu", [b.conv("x", 3, 12, 3)])
    y = b.op("Clip", [b.conv(y, 12, 12, 3, stride=2, group=12), b.const(np.float32(0), "lo"),
                      b.const(np.float32(6), "hi")])
    y = b.conv(y, 12, 20, 1)
    y = b.op("Relu", [b.conv(y, 20, 20, 5, group=20)])
    return b.build([("x", [2, 3, 13, 11])], b.conv(y, 20, 9, 1), [2, 9, 7, 6])


def mlp_chain() -> onnx.ModelProto:
    """Gemm -> Relu -> Gemm -> Relu -> Gemm on 3 rows (a partial 4-token block), widths off the panels."""
    b = NetBuilder("mlp_chain", seed=4)
    y = b.gemm(b.gemm("x", 10, 27, "Relu"), 27, 7, "Relu")
    return b.build([("x", [3, 10])], b.gemm(y, 7, 5), [3, 5])


MODELS = {"odd_convs": odd_convs, "mlp_chain": mlp_chain, "mobilenet": lambda: zoo.mobilenet(size=32),
          "resnet": lambda: zoo.resnet(size=32)}


def _samples(proto: onnx.ModelProto, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    shape = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    return [{"x": np.random.default_rng(seed + i).standard_normal(shape).astype(np.float32) * 2}
            for i in range(n)]


def _build(proto: onnx.ModelProto, tier: str, chain: bool, precision: str = "int8") -> CuvilModel:
    calib = _samples(proto, 3, 0) if precision == "int8" else None
    return CuvilModel.load(proto).optimize(precision, targets=[Target(tier)], calibration=calib,
                                           kernel_cost=False, chain=chain)


def _chained(graph: Graph) -> list[str]:
    return [n.name for n in graph.nodes if "yq" in n.attrs]


@pytest.mark.parametrize("tier", ["relaxed", "simd128"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_chained_build_gives_the_unchained_bits(name: str, tier: str) -> None:
    proto = MODELS[name]()
    with _build(proto, tier, True) as on, _build(proto, tier, False) as off:
        assert on.compiled is not None and off.compiled is not None
        assert _chained(on.compiled.graph) and not _chained(off.compiled.graph)
        # less wherever a chained tensor sets the peak (resnet's is its residual f32 tensors)
        arenas = on.compiled.program.arena_size, off.compiled.program.arena_size
        assert arenas[0] < arenas[1] if name != "resnet" else arenas[0] <= arenas[1]
        for x in _samples(proto, 3, 100):
            a, b = on.predict(x), off.predict(x)
            assert all(np.array_equal(a[k], b[k]) for k in b), name


def test_only_sole_static_int8_readers_are_chained() -> None:
    with _build(zoo.mobilenet(size=32), "relaxed", True) as m:
        assert m.compiled is not None
        graph = m.compiled.graph
        uses = graph.consumers()
        outputs = {id(v) for v in graph.outputs}
        chained = 0
        for n in graph.nodes:
            if n.op not in ("qconv", "qgemm"):
                continue
            y, readers = n.outputs[0], uses.get(id(n.outputs[0]), [])
            sole = len(readers) == 1 and id(y) not in outputs and readers[0].op in ("qconv", "qgemm") \
                and readers[0].inputs[0] is y
            assert ("yq" in n.attrs) == sole, n.name
            if sole:
                chained += 1
                (r,) = readers
                assert y.type.dtype == "uint8" and r.attrs["xq"].mode == INPUT and r.attrs["xq"].qmax == 127
                assert n.attrs["yq"].scale == float(r.inputs[-2].const) and \
                    n.attrs["yq"].zero_point == int(r.inputs[-1].const)
            else:
                assert y.type.dtype == "float32"
        assert chained >= 4  # the expand -> depthwise -> project pairs
        # every chained ReLU6 writes onto a grid from 0 with 6 at or past its top: the clamp does the clip
        assert all("act" not in n.attrs for n in graph.nodes if "yq" in n.attrs)
        assert any(n.attrs.get("act") for n in graph.nodes if "yq" not in n.attrs)
        layers = {layer["name"]: layer for layer in m.quantization.record["layers"]}
        assert "chained" in {layer["activations"] for layer in layers.values()}


def test_dynamic_activations_are_not_chained() -> None:
    with _build(zoo.mobilenet(size=32), "relaxed", True, "int8-dynamic") as m:
        assert m.compiled is not None and not _chained(m.compiled.graph)


RELU6 = ("clip", 0.0, 6.0)


@pytest.mark.parametrize(("act", "grid", "left"), [
    (RELU6, (6 / 127, 0), None),           # 0 and 6 land on 0 and 127
    (RELU6, (5.3 / 127, 0), None),         # 6 is past the top: clamped there anyway
    (RELU6, (12 / 127, 0), RELU6),         # 6 lands on 64: the clip is still needed
    (RELU6, (6 / 127, 3), RELU6),          # 0 lands on 3: values below 0 would reach 0..2
    (("clip", -1e-3, 6.0), (6 / 127, 0), None),  # -0.001 rounds to 0
    (("relu", 0.0, 0.0), (0.1, 0), None),
    (("relu", 0.0, 0.0), (0.1, 9), ("relu", 0.0, 0.0)),
    (("hardswish", 0.0, 0.0), (0.1, 0), ("hardswish", 0.0, 0.0)),
    (None, (0.1, 0), None),
])
def test_act_left_drops_only_what_the_clamp_does(act, grid, left) -> None:
    yq = ActQuant.static(grid[0], grid[1], 127)
    assert act_left(act, yq) == left
    if left is None and act is not None:  # the same bytes, checked the kernels' way over a sweep
        f = np.linspace(-20, 20, 40001, dtype=np.float32)
        lo, hi = (0.0, np.inf) if act[0] == "relu" else act[1:]
        clipped = np.clip(f, np.float32(lo), np.float32(hi))
        grid = (yq.scale, yq.zero_point, yq.qmax)
        assert np.array_equal(quantize_u8(clipped, *grid), quantize_u8(f, *grid))
