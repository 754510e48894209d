"""Conv, ConvTranspose, Gemm and MatMul against onnxruntime (one thread), one small model per case.

Each case builds a one- or two-node ONNX model with seeded weights, compiles one variant (the default
``Target()``) and compares outputs on seeded inputs. Shapes are chosen so both the vector interior and
the scalar borders/tails of every kernel run (odd widths, widths above and below 4 and 8).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.here import host_tiers
from cuvil_edge.ops import conv as conv_op
from cuvil_edge.ops.conv import WINOGRAD_FLOATS, conv_geometry, uses_direct, uses_winograd, winograd_tiling
from runtime_wasm.variants import probe_host
from tests.support.conv import build, conv_model, rand
from tests.support.ort_check import assert_matches_ort


def compile_and_check(model: onnx.ModelProto) -> CuvilModel:
    cm = CuvilModel.load(model).optimize(targets=[Target()])
    assert_matches_ort(model, cm, n_inputs=2)
    return cm


IM2COL, DIRECT, POINTWISE = "f32-conv-im2col-gemm-4x8", "f32-conv-direct-4x8", "f32-conv1x1-gemm-4x8"
SUBSAMPLE = "f32-conv1x1-subsample-gemm-4x8"
WINOGRAD, WINOGRAD_S2 = "f32-conv-winograd-f2x2-4x8", "f32-conv-winograd-s2-f2x2-4x8"
CONV_CASES = {
    "2d-3x3-pad1": ([1, 3, 9, 11], [5, 3, 3, 3], dict(pads=[1, 1, 1, 1]), DIRECT),
    "1d-stride2-dil2": ([2, 4, 23], [6, 4, 3], dict(strides=[2], dilations=[2], pads=[1, 2]), IM2COL),
    "2d-strides-dilations": ([1, 2, 12, 13], [4, 2, 3, 2], dict(strides=[2, 1], dilations=[1, 2]), DIRECT),
    "same-upper": ([1, 3, 10, 9], [4, 3, 3, 3], dict(auto_pad="SAME_UPPER", strides=[2, 2]), IM2COL),
    "same-lower": ([1, 3, 10, 9], [4, 3, 4, 3], dict(auto_pad="SAME_LOWER", strides=[2, 2]), IM2COL),
    "valid": ([1, 3, 10, 9], [4, 3, 3, 3], dict(auto_pad="VALID"), DIRECT),
    "asymmetric-pads": ([1, 3, 8, 10], [4, 3, 3, 3], dict(pads=[0, 1, 2, 0]), DIRECT),
    "groups-2": ([1, 4, 7, 9], [6, 2, 3, 3], dict(group=2, pads=[1, 1, 1, 1]), DIRECT),
    "pointwise-1x1": ([2, 16, 5, 5], [12, 16, 1, 1], {}, POINTWISE),
    "pointwise-1x1-groups-1d": ([2, 8, 37], [6, 4, 1], dict(group=2), POINTWISE),
    "1x1-stride2": ([1, 8, 9, 11], [6, 8, 1, 1], dict(strides=[2, 2]), IM2COL),
    # strided 1x1 from 400 output pixels: odd planes (vector runs plus scalar tails), two images, groups,
    # 1D, stride 3x2; fewer pixels (7x7 in: 4x4 out) and padded ones keep im2col
    "1x1-s2-57x57-batch2": ([2, 24, 57, 57], [20, 24, 1, 1], dict(strides=[2, 2]), SUBSAMPLE),
    "1x1-s2-groups": ([1, 8, 41, 39], [6, 4, 1, 1], dict(strides=[2, 2], group=2), SUBSAMPLE),
    "1x1-s2-1d": ([2, 8, 801], [6, 8, 1], dict(strides=[2]), SUBSAMPLE),
    "1x1-s3x2": ([1, 8, 61, 45], [6, 8, 1, 1], dict(strides=[3, 2]), SUBSAMPLE),
    "1x1-s2-7x7": ([1, 32, 7, 7], [36, 32, 1, 1], dict(strides=[2, 2]), IM2COL),
    "1x1-s2-pad1": ([1, 8, 9, 11], [6, 8, 1, 1], dict(strides=[2, 2], pads=[1, 1, 1, 1]), IM2COL),
    "channel-multiplier-2": ([1, 3, 8, 8], [6, 1, 3, 3], dict(group=3, pads=[1, 1, 1, 1]), DIRECT),
    # direct: several 8-pixel panels per row plus a narrow last one, rows of 4 output channels plus a
    # remainder, wide asymmetric pads, the 1D dilated shape of audio nets, and both sides of the choice
    "direct-5x5-asym-wide": ([2, 20, 11, 21], [14, 20, 5, 5], dict(pads=[2, 1, 1, 3]), DIRECT),
    "direct-1d-dil4": ([1, 12, 45], [16, 12, 3], dict(dilations=[4], pads=[4, 4]), DIRECT),
    "direct-unpadded-1d": ([2, 6, 19], [5, 6, 4], {}, DIRECT),
    "many-outputs-im2col": ([1, 8, 10, 12], [20, 8, 3, 3], dict(pads=[1, 1, 1, 1]), IM2COL),
    # winograd: odd output rows and columns (tiles half outside), a tile row of one quad (a half GEMM
    # panel), output channels not a multiple of 4, two images; asymmetric and no padding; several
    # chunks of tile rows with a shorter last one
    "winograd-odd-batch2": ([2, 16, 9, 7], [18, 16, 3, 3], dict(pads=[1, 1, 1, 1]), WINOGRAD),
    "winograd-asym-pads": ([1, 16, 12, 21], [16, 16, 3, 3], dict(pads=[0, 2, 1, 0]), WINOGRAD),
    "winograd-valid": ([1, 20, 10, 9], [16, 20, 3, 3], dict(auto_pad="VALID"), WINOGRAD),
    "winograd-chunks": ([1, 96, 30, 26], [100, 96, 3, 3], dict(pads=[1, 1, 1, 1]), WINOGRAD),
    # stride-2 winograd: odd input and output sizes (tiles half outside, 5-row patches past the input),
    # output channels not a multiple of 4, two images; asymmetric pads; SAME_UPPER; several chunks
    "winograd-s2-odd-batch2": ([2, 16, 25, 29], [18, 16, 3, 3], dict(strides=[2, 2], pads=[1, 1, 1, 1]),
                               WINOGRAD_S2),
    "winograd-s2-asym-pads": ([1, 16, 26, 31], [20, 16, 3, 3], dict(strides=[2, 2], pads=[0, 2, 1, 0]),
                              WINOGRAD_S2),
    "winograd-s2-same-upper": ([1, 24, 24, 27], [16, 24, 3, 3], dict(strides=[2, 2], auto_pad="SAME_UPPER"),
                               WINOGRAD_S2),
    "winograd-s2-chunks": ([1, 96, 60, 52], [100, 96, 3, 3], dict(strides=[2, 2], pads=[1, 1, 1, 1]),
                           WINOGRAD_S2),
    "small-output-s2-im2col": ([1, 64, 20, 20], [64, 64, 3, 3], dict(strides=[2, 2], pads=[1, 1, 1, 1]),
                               IM2COL),
}


# every case with a bias; bias-free runs the same kernels, so two cases cover it
@pytest.mark.parametrize(("case", "bias"), [(c, True) for c in CONV_CASES] +
                         [("2d-3x3-pad1", False), ("groups-2", False), ("winograd-odd-batch2", False),
                          ("winograd-s2-odd-batch2", False)])
def test_conv(case: str, bias: bool) -> None:
    x, w, attrs, expected = CONV_CASES[case]
    m = compile_and_check(conv_model("Conv", x, w, bias=bias, **attrs))
    assert m.compiled is not None
    assert list(m.compiled.program.kernels_used.values()) == [expected]


STRIDED_1X1 = [c for c, v in CONV_CASES.items() if v[3] == SUBSAMPLE]


@pytest.mark.parametrize("tier", host_tiers())
def test_strided_1x1_equals_the_im2col_path(tier: str) -> None:
    """Subsampling the planes, then the in-place 1x1 GEMM, gives the bits im2col + GEMM gave, per tier."""
    for case in STRIDED_1X1:
        x, w, attrs, _ = CONV_CASES[case]
        model = conv_model("Conv", x, w, **attrs)
        feeds = {"x": np.random.default_rng(7).standard_normal(x).astype(np.float32)}
        target = Target(tier, probe_host().family)
        new = CuvilModel.load(model).optimize(targets=[target])
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(conv_op, "is_pointwise_strided", lambda g: False)
            old = CuvilModel.load(model).optimize(targets=[target])
            assert list(old.compiled.program.kernels_used.values()) == [IM2COL], case
            want = old.predict(feeds)["y"]
        assert list(new.compiled.program.kernels_used.values()) == [SUBSAMPLE], case
        np.testing.assert_array_equal(new.predict(feeds)["y"], want, err_msg=case)


@pytest.mark.parametrize(("cin", "cout", "k", "stride", "group", "size", "direct"), [
    (24, 8, 3, 1, 1, 64, True),      # unet decoder: few outputs, im2col would dominate
    (32, 16, 3, 1, 1, 32, True),
    (32, 64, 3, 1, 1, 28, False),    # 16 row panels share each im2col panel
    (128, 16, 3, 1, 1, 14, False),   # K = 1152: scattered input lines thrash L1 per row panel
    (16, 16, 3, 2, 1, 32, False),    # width stride 2: panels are not contiguous input runs
    (64, 16, 3, 1, 1, 56, False),    # padded copy over the scratch budget
    (32, 32, 3, 1, 2, 16, True),     # 16 outputs per group
])
def test_direct_choice(cin: int, cout: int, k: int, stride: int, group: int, size: int, direct: bool) -> None:
    g = dict(N=1, C=cin, M=cout, G=group, D=1, H=size, W=size, kd=1, kh=k, kw=k, sd=1, sh=stride, sw=stride,
             dd=1, dh=1, dw=1, pd=0, pt=1, pl=1, pdb=0, pb=1, pr=1)
    assert uses_direct(g) == direct


def _geometry(cin: int, cout: int, k: int, stride: int, group: int, dil: int, size: int) -> dict[str, int]:
    g = dict(N=1, C=cin, M=cout, G=group, D=1, H=size, W=size, kd=1, kh=k, kw=k, sd=1, sh=stride, sw=stride,
             dd=1, dh=dil, dw=dil, pd=0, pt=1, pl=1, pdb=0, pb=1, pr=1, OD=1)
    g["OH"] = g["OW"] = (size + 2 - dil * (k - 1) - 1) // stride + 1
    return g


@pytest.mark.parametrize(("cin", "cout", "k", "stride", "group", "dil", "winograd"), [
    (64, 64, 3, 1, 1, 1, True),      # YOLOv8n / ResNet-50 3x3 blocks
    (16, 16, 3, 1, 1, 1, True),      # smallest taken: beats direct by 1.1-1.3x
    (32, 16, 3, 1, 1, 1, True),      # also a direct-kernel shape: winograd wins
    (8, 64, 3, 1, 1, 1, False),      # transforms per input channel dominate
    (64, 8, 3, 1, 1, 1, False),
    (64, 64, 3, 2, 1, 1, False),     # F(2x2, 3x3) is stride 1 only
    (64, 64, 3, 1, 2, 1, False),
    (64, 64, 3, 1, 1, 2, False),
    (64, 64, 5, 1, 1, 1, False),
])
def test_winograd_choice(cin: int, cout: int, k: int, stride: int, group: int, dil: int,
                         winograd: bool) -> None:
    assert uses_winograd(_geometry(cin, cout, k, stride, group, dil, 28)) == winograd


@pytest.mark.parametrize(("cin", "cout", "k", "stride", "group", "dil", "size", "winograd"), [
    (128, 128, 3, 2, 1, 1, 56, True),    # ResNet-50 stride-2 3x3s: 28x28 and 14x14 outputs
    (256, 256, 3, 2, 1, 1, 28, True),
    (16, 32, 3, 2, 1, 1, 160, True),     # YOLOv8n-style 320 downsampling convs
    (512, 512, 3, 2, 1, 1, 14, False),   # 7x7 outputs: few tiles per 2.8x larger transformed weights
    (128, 128, 3, 2, 1, 1, 20, False),   # 10x10 outputs: tile quads a third empty
    (3, 32, 3, 2, 1, 1, 224, False),     # MobileNetV2 / YOLO first conv: transforms per input channel
    (64, 64, 3, 1, 1, 1, 56, False),     # stride 1: F(2x2, 3x3)
    (64, 64, 3, 2, 2, 1, 56, False),
    (64, 64, 3, 2, 1, 2, 56, False),
    (64, 64, 5, 2, 1, 1, 56, False),
])
def test_winograd_s2_choice(cin: int, cout: int, k: int, stride: int, group: int, dil: int, size: int,
                            winograd: bool) -> None:
    assert conv_op.uses_winograd_s2(_geometry(cin, cout, k, stride, group, dil, size)) == winograd


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize(("cin", "cout", "size"), [(16, 16, 7), (64, 64, 40), (512, 512, 7), (256, 256, 112)])
def test_winograd_tiling(cin: int, cout: int, size: int, stride: int) -> None:
    """Quads of tiles cover each output row, and a chunk stays in budget unless it is one tile row."""
    g = _geometry(cin, cout, 3, stride, 1, 1, size)
    twp, rows = winograd_tiling(g)
    assert twp % 4 == 0 and 2 * twp >= g["OW"] > 2 * twp - 8
    assert 1 <= rows <= (g["OH"] + 1) // 2
    per_tile = 16 * (cin + cout) if stride == 1 else 25 * cin + 9 * cout
    assert rows == 1 or per_tile * twp * rows <= WINOGRAD_FLOATS


@pytest.mark.parametrize("case", ["winograd-chunks", "winograd-s2-chunks"])
def test_winograd_chunks_case_runs_several_chunks(case: str) -> None:
    """The "chunks" cases really split their tile rows (else they would not test the split)."""
    x, w, attrs, _ = CONV_CASES[case]
    g = conv_geometry(CuvilModel.load(conv_model("Conv", x, w, **attrs)).graph.nodes[0])
    _, rows = winograd_tiling(g)
    assert rows < (g["OH"] + 1) // 2


DW_CASES = {
    "3x3-s1-pad1": ([1, 8, 13, 19], 3, dict(pads=[1, 1, 1, 1]), "f32-dwconv-3x3s1"),
    "3x3-s2-pad1": ([1, 8, 14, 21], 3, dict(strides=[2, 2], pads=[1, 1, 1, 1]), "f32-dwconv-3x3s2"),
    "3x3-s2-same-upper": ([2, 4, 9, 16], 3, dict(strides=[2, 2], auto_pad="SAME_UPPER"), "f32-dwconv-3x3s2"),
    "5x5-dil-asym": ([1, 5, 12, 17], 5, dict(dilations=[2, 1], pads=[2, 1, 0, 3]), "f32-dwconv-5x5s1"),
    "3x3-s3": ([1, 3, 11, 26], 3, dict(strides=[3, 3], pads=[1, 1, 1, 1]), "f32-dwconv-3x3s3"),
    "1d-k5": ([1, 6, 30], 5, dict(pads=[2, 2]), "f32-dwconv-1x5s1"),
}


@pytest.mark.parametrize("case", list(DW_CASES))
def test_depthwise(case: str) -> None:
    x, k, attrs, kernel = DW_CASES[case]
    c = x[1]
    w = [c, 1, k, k] if len(x) == 4 else [c, 1, k]
    cm = compile_and_check(conv_model("Conv", x, w, group=c, **attrs))
    assert list(cm.compiled.program.kernels_used.values()) == [kernel]


@pytest.mark.parametrize("act", [("Relu", {}), ("Clip", {})], ids=["relu", "clip"])
@pytest.mark.parametrize(("c", "w", "group", "kernel"), [
    (6, [4, 6, 3, 3], 1, DIRECT), (6, [6, 1, 3, 3], 6, "f32-dwconv-3x3s1"),
    (16, [20, 16, 3, 3], 1, WINOGRAD), (16, [20, 16, 3, 3], 1, WINOGRAD_S2)],
    ids=["direct", "depthwise", "winograd", "winograd-s2"])
def test_conv_fused_activation(c: int, w: list[int], group: int, kernel: str, act: tuple[str, dict]) -> None:
    stride = 2 if kernel == WINOGRAD_S2 else 1  # (its 24 x 26 input gives 12 x 13 outputs: taken)
    model = conv_model("Conv", [1, c, 24, 26] if stride == 2 else [1, c, 9, 10], w, act=act, group=group,
                       pads=[1, 1, 1, 1], strides=[stride, stride])
    cm = compile_and_check(model)
    assert [n.op for n in cm.graph.nodes] == ["conv"], "the activation should be fused into the conv"
    assert list(cm.compiled.program.kernels_used.values()) == [kernel]


PADDED_DW_ACTS = {"none": None, "relu": ("Relu", {}), "clip": ("Clip", {}), "silu": "silu",
                  "leakyrelu": ("LeakyRelu", {"alpha": 0.1}), "hardswish": ("HardSwish", {})}


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("act", list(PADDED_DW_ACTS))
def test_padded_depthwise_under_every_activation_path(stride: int, act: str) -> None:
    """The padded 3x3 depthwise kernels run a copy per common activation (none, ReLU, clip, SiLU: its kind
    a constant, ACT_SPECIALIZED) and the rest through the general switch; each is fused and matches."""
    attrs = dict(group=6, pads=[1, 1, 1, 1], strides=[stride, stride])
    if act == "silu":
        rng = np.random.default_rng(11)
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
                 helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
        model = build(nodes, {"x": (1, 6, 11, 13)}, {"w": rand(rng, 6, 1, 3, 3), "b": rand(rng, 6)})
    else:
        model = conv_model("Conv", [1, 6, 11, 13], [6, 1, 3, 3], act=PADDED_DW_ACTS[act], **attrs)
    cm = compile_and_check(model)
    (node,) = cm.graph.nodes
    assert node.attrs.get("act", ("none",))[0] == act
    assert conv_op.dw_padded_plane(conv_geometry(node)) is not None
    assert list(cm.compiled.program.kernels_used.values()) == [f"f32-dwconv-3x3s{stride}"]


DECONV_CASES = {
    "2d-s2-pads-outpad": ([1, 6, 5, 7], [6, 4, 3, 3], dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                                           output_padding=[1, 1])),
    "2d-s1": ([2, 3, 6, 9], [3, 5, 3, 3], dict(pads=[1, 0, 1, 2])),
    "1d-s3": ([1, 4, 9], [4, 3, 4], dict(strides=[3], pads=[1, 0])),
    "group2-dil2": ([1, 4, 5, 6], [4, 3, 3, 2], dict(group=2, dilations=[2, 2], strides=[1, 2])),
    "output-shape": ([1, 3, 4, 5], [3, 2, 3, 3], dict(strides=[2, 2], output_shape=[9, 12])),
    "same-upper": ([1, 3, 4, 5], [3, 2, 3, 3], dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    "same-lower": ([1, 3, 4, 5], [3, 2, 3, 4], dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    "output-shape-same-lower": ([1, 2, 4, 5], [2, 3, 3, 3], dict(strides=[2, 2], output_shape=[10, 8],
                                                                 auto_pad="SAME_LOWER")),
    "valid-4x4-s2": ([1, 8, 7, 9], [8, 4, 4, 4], dict(strides=[2, 2], auto_pad="VALID")),
}


@pytest.mark.parametrize("case", list(DECONV_CASES))
def test_conv_transpose(case: str) -> None:
    x, w, attrs = DECONV_CASES[case]
    cm = compile_and_check(conv_model("ConvTranspose", x, w, bias=case != "2d-s1", **attrs))
    assert all(k.startswith("f32-deconv-") for k in cm.compiled.program.kernels_used.values())


def test_conv_transpose_relu() -> None:
    compile_and_check(conv_model("ConvTranspose", [1, 4, 5, 5], [4, 3, 3, 3], act=("Relu", {}),
                                 strides=[2, 2], pads=[1, 1, 1, 1]))


@pytest.mark.parametrize(("trans_a", "trans_b", "alpha", "beta", "c_shape"), [
    (0, 0, 1.0, 1.0, (9,)),
    (1, 0, 0.5, 2.0, (1, 9)),
    (0, 1, 1.5, 0.0, (9,)),
    (1, 1, 1.0, 0.5, (5, 9)),
])
def test_gemm(trans_a: int, trans_b: int, alpha: float, beta: float, c_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(trans_a * 2 + trans_b)
    m, k, n = 5, 13, 9
    weights = {"b": rand(rng, *((n, k) if trans_b else (k, n))), "c": rand(rng, *c_shape)}
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=trans_a, transB=trans_b, alpha=alpha,
                            beta=beta)
    compile_and_check(build([node], {"a": (k, m) if trans_a else (m, k)}, weights))


def test_gemm_runtime_b() -> None:
    node = helper.make_node("Gemm", ["a", "b"], ["y"], transB=1, alpha=0.75)
    compile_and_check(build([node], {"a": (6, 11), "b": (10, 11)}, {}))


@pytest.mark.parametrize(("a_shape", "b_shape", "b_const"), [
    ((7, 12), (12, 10), True),
    ((3, 5, 12), (12, 17), True),
    ((2, 1, 5, 6), (3, 6, 9), False),
    ((4, 6), (2, 6, 3), False),
    ((6,), (6, 5), True),
    ((2, 3, 6), (6,), False),
])
def test_matmul(a_shape: tuple[int, ...], b_shape: tuple[int, ...], b_const: bool) -> None:
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    inputs = {"a": a_shape} | ({} if b_const else {"b": b_shape})
    weights = {"b": rand(rng, *b_shape)} if b_const else {}
    compile_and_check(build([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs, weights))


@pytest.mark.parametrize("winograd", [True, False])
def test_silu_after_a_conv_runs_in_its_epilogue(winograd: bool):
    """x * Sigmoid(x) after a conv (YOLOv8's Conv block) becomes the conv's fused activation: one node, no
    separate pass over the output, the same values as onnxruntime."""
    rng = np.random.default_rng(7)
    c = 16 if winograd else 3
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    model = build(nodes, {"x": (1, c, 12, 12)}, {"w": rand(rng, 16, c, 3, 3) * np.float32(0.3),
                                                 "b": rand(rng, 16)})
    cm = compile_and_check(model)
    assert cm.graph.op_counts() == {"conv": 1}
    (node,) = cm.graph.nodes
    assert node.attrs["act"][0] == "silu"
    assert ("winograd" in cm.compiled.program.kernels_used[node.name]) == winograd
