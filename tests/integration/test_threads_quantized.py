"""Intra-op threads on the integer kernels: quantized builds give the same bits on 2 and 3 threads as on one
(GEMMs split by weight panels, convolutions by pixels or output channels, depthwise by channels, the
per-tensor dynamic range reduced per thread and combined in a fixed order)."""

from __future__ import annotations

import numpy as np
import pytest

from cuvil_edge.testing import zoo, zoo_transformers
from cuvil_edge.testing.zoo import NetBuilder
from tests.support.threads import build_threaded, open_threaded, seeded_inputs

pytestmark = pytest.mark.integration


def _calibration(proto, n: int = 2) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    inputs = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in proto.graph.input]
    return [{name: rng.standard_normal(shape).astype(np.float32) for name, shape in inputs} for _ in range(n)]


def _bert(seq: int = 64):
    return zoo_transformers.bert_encoder(layers=1, hidden=256, heads=4, ffn=1024, seq=seq)


def _convs():
    """Two images of few pixels: a strided (subsampled) 1x1 and a 3x3 conv split by output channels, then a
    1x1 split by pixels (K a multiple of 32 everywhere, so int4 takes them all)."""
    b = NetBuilder("convs")
    y = b.op("Relu", [b.conv("x", 64, 128, 1, stride=2, pad=0)])
    y = b.op("Relu", [b.conv(y, 128, 128, 3)])
    return b.build([("x", [2, 64, 12, 12])], b.conv(y, 128, 64, 1), [2, 64, 6, 6])


def _grouped_convs():
    """Two images of many pixels through grouped 3x3 and 1x1 convs: each (image, group) a loop of pixel
    claims in every thread's own part of the scratch, the last claim of each short (P = 23 x 23)."""
    b = NetBuilder("grouped")
    y = b.op("Relu", [b.conv("x", 16, 32, 3, group=2)])
    y = b.op("Relu", [b.conv(y, 32, 64, 1, group=4)])
    return b.build([("x", [2, 16, 23, 23])], b.conv(y, 64, 32, 3, group=2), [2, 32, 23, 23])


#: name -> (model, precision), at sizes where most quantized nodes are split: int8 static (1x1, depthwise
#: and im2col convs by pixels, by channels on few pixels), int8-dynamic (the per-tensor range; per-token
#: ranges and the 8x4 GEMM), int4 (the 8x4 GEMM on an encoder, its GEMV on one token, convs by channels
#: and by pixels)
CASES = {
    "mobilenet-int8": (lambda: zoo.mobilenet(size=128), "int8"),
    "resnet-int8-dynamic": (lambda: zoo.resnet(size=128), "int8-dynamic"),
    "convs-int8": (_convs, "int8"),
    "grouped-convs-int8": (_grouped_convs, "int8"),
    "convs-int4": (_convs, "int4"),
    "resnet-int4": (lambda: zoo.resnet(size=64), "int4"),
    "bert-1-token-int4": (lambda: _bert(seq=1), "int4"),
    "bert-int8-dynamic": (_bert, "int8-dynamic"),
    "bert-int4": (_bert, "int4"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_quantized_threaded_outputs_equal_one_thread_bit_for_bit(case):
    make, precision = CASES[case]
    proto = make()
    options = {"calibration": _calibration(proto)} if precision == "int8" else {}
    model = build_threaded(proto, precision, **options)
    kernels = model.compiled.program.kernels_used
    assert any(kernels.get(n, "").startswith(("qs8", "qb4")) for n in model.compiled.program.parallel_nodes)
    xs = seeded_inputs(model.spec)
    with open_threaded(model, 1) as one:
        ref = one.predict(xs)
    for n in (2, 3):
        with open_threaded(model, n) as m:
            assert m.threads == n
            for _ in range(2):  # a second job reuses the parked threads
                out = m.predict(xs)
                assert all(np.array_equal(out[k], ref[k]) for k in ref), (case, n)
