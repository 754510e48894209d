"""int4 (weight-only, group 32) vs int8-dynamic on GEMM- and GEMV-bound MatMul stacks, one thread.

Models (seeded random weights, MatMul + ReLU chains): ``gemv4096`` one 4096x4096 layer at batch 1 (the
weights, 16 MB at int8, come from memory: bandwidth-bound where the last-level cache is smaller; on a
Xeon whose 480 MiB L3 holds them it is compute-bound and int4 ~ int8), ``mlp1024`` eight 1024x1024
layers at batch 1 (the weights of a layer fit in L2: GEMV, compute-bound), ``ffn128`` a transformer FFN
768-3072-768 on 128 tokens (GEMM). Both precisions of a model are built here and timed in this process
with blocks of runs interleaved, so a noisy neighbour hits both; medians, and the int8 / int4 ratio (> 1:
int4 faster).
The DistilBERT-shaped encoder next to onnxruntime is ``bench_quant.py``.

    python benchmarks/bench_int4.py [--rounds 5] [--repeat 10] [models ...]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel
from cuvil_edge.here import host_target
from cuvil_edge.tools.bench import timings_ms

PRECISIONS = ("int8-dynamic", "int4")


def mm_stack(rows: int, dims: list[int]) -> onnx.ModelProto:
    """MatMul layers dims[0] -> dims[1] -> ... on ``rows`` tokens, ReLU between them."""
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i, (k, n) in enumerate(zip(dims[:-1], dims[1:])):
        inits.append(numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32),
                                             f"w{i}"))
        last = i == len(dims) - 2
        nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], ["y" if last else f"m{i}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"m{i}"], [f"h{i}"]))
            cur = f"h{i}"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, dims[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, dims[-1]])
    g = helper.make_graph(nodes, "mm", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


MODELS = {"gemv4096": (1, [4096, 4096]), "mlp1024": (1, [1024] * 9), "ffn128": (128, [768, 3072, 768])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(MODELS), help=f"any of {', '.join(MODELS)}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    if set(args.models) - set(MODELS):
        ap.error(f"unknown models: {sorted(set(args.models) - set(MODELS))}")
    print(f"one thread, {args.rounds} x {args.repeat} timed runs per build, interleaved; "
          f"target {host_target().name}")
    print(f"{'model':10s} {'int8-dyn ms':>12s} {'int4 ms':>9s} {'int8/int4':>10s}  kernels (int4)")
    for name in args.models:
        rows, dims = MODELS[name]
        proto = mm_stack(rows, dims)
        x = np.random.default_rng(1).standard_normal((rows, dims[0])).astype(np.float32)
        built = {p: CuvilModel.load(proto).optimize(p, targets=[host_target()]) for p in PRECISIONS}
        insts = {}
        for p, m in built.items():
            m.threads = 1  # the one-thread comparison (bench_threads.py: more)
            insts[p] = m.instance
            insts[p].predict({"x": x})
        times: dict[str, list[float]] = {p: [] for p in PRECISIONS}
        for _ in range(args.rounds):
            for p in PRECISIONS:
                times[p] += timings_ms(insts[p].run, 2, args.repeat)
        med = {p: statistics.median(t) for p, t in times.items()}
        kernels = ", ".join(sorted(set(built["int4"].compiled.program.kernels_used.values())))
        ratio = med["int8-dynamic"] / med["int4"]
        print(f"{name:10s} {med['int8-dynamic']:12.3f} {med['int4']:9.3f} {ratio:10.2f}  {kernels}")
        for m in built.values():
            m.close()


if __name__ == "__main__":
    main()
