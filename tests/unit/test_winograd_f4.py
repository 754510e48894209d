"""Winograd F(4x4, 3x3) (``f32-conv-winograd-f4x4-4x8``) against onnxruntime, the per-node choice between it
and F(2x2, 3x3), and determinism mode's bits across the simd128 variants.

F(4x4) rounds more than F(2x2) (larger transform coefficients), so outputs are compared on the scale of
the output (max |ours - ORT| against max |ORT|), the bound issue 40 sets for the real-size nets; a broken
transform, tile edge or chunk is off by the output's own size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.ops.conv import uses_winograd_f4, winograd_tiling
from cuvil_edge.oracle import ort_session
from tests.support.conv import conv_model
from tests.support.determinism import run_under

F4, F2 = "f32-conv-winograd-f4x4-4x8", "f32-conv-winograd-f2x2-4x8"
#: max |ours - onnxruntime| / max |onnxruntime| (measured 1.5e-6 to 7e-6 on these cases)
SCALED_ERROR = 2e-5

CASES = {
    # odd output sizes: the last tile row and the last quad's tiles half outside
    "odd-33x35": ([1, 16, 33, 35], [16, 16, 3, 3], dict(pads=[1, 1, 1, 1])),
    # two images, asymmetric pads, output channels not a multiple of 4
    "asym-pads-batch2": ([2, 24, 31, 30], [20, 24, 3, 3], dict(pads=[0, 2, 1, 0])),
    "valid": ([1, 32, 30, 30], [48, 32, 3, 3], dict(auto_pad="VALID")),
    "same-upper": ([1, 40, 29, 31], [36, 40, 3, 3], dict(auto_pad="SAME_UPPER")),
    # several chunks of tile rows, a shorter last one
    "chunks": ([1, 96, 46, 40], [100, 96, 3, 3], dict(pads=[1, 1, 1, 1])),
}


def _check(model, x_shape: list[int], scale_model=None) -> CuvilModel:
    """Compiled ``model`` against onnxruntime on two seeded inputs; the error's scale is the output of
    ``scale_model`` (default ``model``: the conv before a clamping activation for fused ones)."""
    cm = CuvilModel.load(model).optimize(targets=[Target()])
    sess, scale = ort_session(model), ort_session(scale_model or model)
    for seed in (0, 1):
        feeds = {"x": np.random.default_rng(seed).standard_normal(x_shape).astype(np.float32)}
        got, want = cm.predict(feeds)["y"], sess.run(None, feeds)[0]
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= SCALED_ERROR * np.abs(scale.run(None, feeds)[0]).max()
    return cm


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", list(CASES))
def test_f4_matches_onnxruntime(case: str, bias: bool) -> None:
    x, w, attrs = CASES[case]
    cm = _check(conv_model("Conv", x, w, bias=bias, **attrs), x)
    assert list(cm.compiled.program.kernels_used.values()) == [F4]


@pytest.mark.parametrize("act", [("Relu", {}), ("Clip", {}), ("LeakyRelu", dict(alpha=0.1))],
                         ids=["relu", "clip", "leaky"])
def test_f4_fuses_bias_and_activation(act: tuple[str, dict]) -> None:
    x = [1, 16, 29, 33]
    w, pads = [20, 16, 3, 3], [1, 1, 1, 1]
    cm = _check(conv_model("Conv", x, w, act=act, pads=pads), x, conv_model("Conv", x, w, pads=pads))
    assert [n.op for n in cm.graph.nodes] == ["conv"], "the activation should be fused into the conv"
    assert list(cm.compiled.program.kernels_used.values()) == [F4]


def test_chunks_case_runs_several_chunks() -> None:
    """The "chunks" case really splits its tile rows (else it would not test the split)."""
    x, w, _ = CASES["chunks"]
    g = dict(C=x[1], M=w[0], OH=x[2], OW=x[3], sh=1)
    assert winograd_tiling(g, 4)[1] < -(-g["OH"] // 4)


def _geometry(c: int, m: int, oh: int, ow: int, stride: int = 1, group: int = 1,
              dil: int = 1) -> dict[str, int]:
    return dict(N=1, C=c, M=m, G=group, D=1, H=oh, W=ow, kd=1, kh=3, kw=3, sd=1, sh=stride, sw=stride, dd=1,
                dh=dil, dw=dil, pd=0, pt=1, pl=1, pdb=0, pb=1, pr=1, OD=1, OH=oh, OW=ow)


@pytest.mark.parametrize(("c", "m", "oh", "ow", "f4"), [
    (64, 64, 56, 56, True),      # ResNet-50 224's stride-1 3x3s
    (128, 128, 28, 28, True),
    (256, 256, 14, 14, False),   # 36 C M transformed weights re-streamed per chunk: F(4x4) lost 0.74x
    (512, 512, 7, 7, False),     # and 0.42x
    (16, 16, 80, 80, True),      # YOLOv8n-style 320: C2f bottlenecks and the heads
    (32, 32, 40, 40, True),
    (64, 80, 40, 40, True),
    (64, 64, 20, 20, False),     # 20 columns compute 32: F(4x4) 0.97-1.1x
    (128, 128, 10, 10, False),   # 0.67-0.8x
    (96, 100, 30, 26, False),
    (64, 64, 7, 7, False),       # a quad of 4x4 tiles is 16 columns: 7x7 computes 128 pixels for 49
    (16, 20, 9, 10, False),
    (8, 64, 56, 56, False),      # F(2x2)'s own bound: too few channels for any Winograd
])
def test_f4_choice(c: int, m: int, oh: int, ow: int, f4: bool) -> None:
    assert uses_winograd_f4(_geometry(c, m, oh, ow)) == f4


@pytest.mark.parametrize(("stride", "group", "dil"), [(2, 1, 1), (1, 2, 1), (1, 1, 2)])
def test_f4_stays_off_where_winograd_does_not_apply(stride: int, group: int, dil: int) -> None:
    """Stride 2 (its own polyphase kernel), groups and dilation never take F(4x4)."""
    assert not uses_winograd_f4(_geometry(64, 64, 56, 56, stride, group, dil))


def test_kernel_recorded_per_node() -> None:
    """In one net each node takes its own kernel: a wide-plane layer F(4x4), a 7x7 one F(2x2)."""
    from cuvil_edge.testing.zoo import NetBuilder

    b = NetBuilder("two", seed=3)
    y = b.conv_bn("x", 16, 32, 3)                                   # 40x40: F(4x4)
    y = b.op("MaxPool", [y], kernel_shape=[8, 8], strides=[6, 6])   # 40x40 -> 6x6
    y = b.conv_bn(y, 32, 32, 3)                                     # 6x6: F(2x2)
    proto = b.build([("x", [1, 16, 40, 40])], y, [1, 32, 6, 6])
    cm = CuvilModel.load(proto).optimize(targets=[Target()])
    assert sorted(k for k in cm.compiled.program.kernels_used.values() if "conv" in k) == [F2, F4]
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 16, 40, 40)).astype(np.float32)}
    want = ort_session(proto).run(None, feeds)[0]
    got = cm.predict(feeds)[proto.graph.output[0].name]
    assert np.abs(got - want).max() <= SCALED_ERROR * np.abs(want).max()


def test_determinism_mode_bits_across_simd128_variants(tmp_path: Path) -> None:
    """The transforms multiply by powers of two only (exact), so the simd128 x86 and arm modules give the
    same bits, under engines with and without FMA/AVX."""
    x = [1, 24, 29, 30]
    targets = [Target("simd128", "x86"), Target("simd128", "arm")]
    cm = CuvilModel.load(conv_model("Conv", x, [28, 24, 3, 3], act=("Relu", {}), pads=[1, 1, 1, 1]))
    cm.optimize(targets=targets)
    assert list(cm.compiled.program.kernels_used.values()) == [F4]
    out = cm.save(tmp_path / "m")
    feeds = {"x": np.random.default_rng(9).standard_normal(x).astype(np.float32)}
    runs = {(t.name, flags): run_under(out, t.name, flags, [feeds])[0]["y"]
            for t in targets for flags in ((), ("has_fma", "has_avx2", "has_avx"))}
    assert len(set(runs.values())) == 1, "simd128 variants differ"
