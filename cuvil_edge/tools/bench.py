"""Side-by-side timing against onnxruntime: medians and p95 of one-thread runs, measured in one process;
and the GEMM ceilings of this host that ``cuvil-edge profile`` rates conv/GEMM nodes against.

Shared by ``cuvil-edge bench`` and ``profile``, the demo and the scripts in ``benchmarks/``; tests never
time anything.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..codegen.toolchain import Target
from ..here import host_target
from ..model import CuvilModel
from ..oracle import ort_peer, random_feeds
from ..timing import CEILING_SHAPE, profile_model


def timings_ms(fn: Callable[[], object], warmup: int = 5, repeat: int = 50) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def median_p95(xs: list[float]) -> tuple[float, float]:
    return statistics.median(xs), float(np.percentile(xs, 95))


@dataclass(frozen=True)
class Comparison:
    ours_ms: float
    ours_p95_ms: float
    ort_ms: float
    ort_p95_ms: float
    build_s: float
    module_bytes: int
    max_abs_diff: float

    @property
    def ratio(self) -> float:
        return self.ours_ms / self.ort_ms


def compare_with_ort(proto: onnx.ModelProto, model: CuvilModel | None = None, warmup: int = 5,
                     repeat: int = 50, seed: int = 0, threads: int = 1) -> Comparison:
    """Build (unless given a built model) for this host, then time our zero-copy ``run()`` and
    onnxruntime with the same thread count on the same seeded inputs, alternating so both see the same
    machine."""
    t0 = time.perf_counter()
    if model is None:
        model = CuvilModel.load(proto).optimize(targets=[host_target()])
    build_s = time.perf_counter() - t0
    assert model.compiled is not None
    feeds = random_feeds(model.compiled.spec.inputs, seed)
    model.threads = threads
    inst = model.instance
    ours_out = inst.predict(feeds)
    sess = ort_peer(proto, threads)
    ref = sess.run(None, feeds)
    diff = max(float(np.max(np.abs(o - r))) for o, r in zip(ours_out.values(), ref))
    ours, ort = [], []
    for _ in range(max(1, repeat // 10)):  # interleave blocks: a noisy neighbour hits both sides
        ours += timings_ms(inst.run, warmup, 10)
        ort += timings_ms(lambda: sess.run(None, feeds), warmup, 10)
    variant = model.compiled.spec.variants[0]
    return Comparison(*median_p95(ours), *median_p95(ort), build_s, variant.size, diff)


@functools.cache
def measured_ceilings(target: Target, repeat: int = 10) -> dict[str, float]:
    """dtype ("fp32", "int8", "int4") -> single-thread GFLOP/s or GOPS of CEILING_SHAPE's MatMul built
    at that precision for ``target`` (seeded weights, int8 calibrated on one seeded sample, every layer
    quantized): one profiling build each, its node's median of ``3 * repeat`` runs. Cached per process:
    it costs about a second."""
    m, n, k = CEILING_SHAPE
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "ceiling",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [w])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    calib = [{"x": rng.standard_normal((m, k)).astype(np.float32)}]
    out = {}
    for dtype in ("fp32", "int8", "int4"):
        options = {"calibration": calib, "kernel_cost": False} if dtype == "int8" else {}
        with CuvilModel.load(proto) as model:
            model.optimize(dtype, targets=[target], **options)
            out[dtype] = next(r.rate for r in profile_model(model, target, 3 * repeat) if r.ops)
    return out
