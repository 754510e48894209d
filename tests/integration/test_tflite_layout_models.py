"""Layout choices the real models brought, on builder models against LiteRT: a conv's explicit PAD runs
NCHW (its transpose at the graph input), a matmul over a conv output's channels is a 1x1 convolution in
that layout (writing an NHWC output channels-last itself); neither leaves an interior transpose
(``interior_transposes``)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.tflite_builder import TfliteBuilder
from tests.support.tflite_third_party import Case, interior_transposes, run_case

pytestmark = pytest.mark.integration


def _w(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def pad_conv() -> bytes:
    """x [1, 9, 11, 3] -> PAD (H, W) -> VALID 3x3 stride-2 conv, as MediaPipe's pose models begin."""
    b = TfliteBuilder()
    x, padded, y = (b.tensor("x", (1, 9, 11, 3)), b.tensor("padded", (1, 11, 13, 3)),
                    b.tensor("y", (1, 5, 6, 4)))
    b.op("PAD", [x, b.const("pads", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))], [padded])
    b.op("CONV_2D", [padded, b.const("w", _w(4, 3, 3, 3)), b.const("b", _w(4, seed=1))], [y],
         ("Conv2DOptions", {"Padding": 1, "StrideH": 2, "StrideW": 2}))
    return b.build([x], [y])


def conv_matmul(adj_y: bool, squeezed: bool) -> bytes:
    """conv [1, 1, 6, 8] (then SQUEEZE of H when ``squeezed``) -> BATCH_MATMUL by a constant [C, 5] (or
    [5, C] with adj_y) -> RELU: the matmul reads the conv output's channels, as openWakeWord's mel
    filterbank does."""
    b = TfliteBuilder()
    x, conv = b.tensor("x", (1, 1, 6, 3)), b.tensor("conv", (1, 1, 6, 8))
    b.op("CONV_2D", [x, b.const("w", _w(8, 1, 1, 3)), b.const("b", _w(8, seed=1))], [conv],
         ("Conv2DOptions", {"Padding": 1, "StrideH": 1, "StrideW": 1}))
    if squeezed:
        rows = b.tensor("rows", (1, 6, 8))
        b.op("SQUEEZE", [conv], [rows], ("SqueezeOptions", {"SqueezeDims": [1]}))
        conv = rows
    out = (1, 6, 5) if squeezed else (1, 1, 6, 5)
    mm, y = b.tensor("mm", out), b.tensor("y", out)
    weights = _w(5, 8, seed=2) if adj_y else _w(8, 5, seed=2)
    b.op("BATCH_MATMUL", [conv, b.const("filters", weights)], [mm],
         ("BatchMatMulOptions", {"AdjX": False, "AdjY": adj_y}))
    b.op("RELU", [mm], [y])
    return b.build([x], [y])


def test_spatial_pad_runs_nchw_after_the_input_transpose() -> None:
    model, _ = run_case(pad_conv(), Case("", ""))
    assert not interior_transposes(model.graph)
    assert [n.op for n in model.graph.nodes][:2] == ["transpose", "pad"]


@pytest.mark.parametrize("squeezed", [False, True], ids=["4d", "3d"])
@pytest.mark.parametrize("adj_y", [False, True], ids=["b", "b-adjoint"])
def test_matmul_over_conv_channels_is_a_1x1_conv(adj_y: bool, squeezed: bool) -> None:
    model, _ = run_case(conv_matmul(adj_y, squeezed), Case("", ""))
    counts = model.graph.op_counts()
    # the second conv writes the NHWC output itself: the input's transpose is the only one
    assert counts["conv"] == counts["conv_nhwc"] == counts["transpose"] == 1
    assert {"gemm", "matmul"}.isdisjoint(counts)
    assert not interior_transposes(model.graph)
