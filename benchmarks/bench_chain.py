"""int8 layers handing uint8 to int8 readers (``cuvil_edge/quant/chain.py``) against the same build with f32
between them (``chain=False``): arena bytes (the linear memory activations take) and latency, one thread,
on the real-size convnets (MobileNetV2 224, ResNet-50 224, YOLOv8n-style 320; seeded weights, static int8
on seeded calibration samples). Outputs are checked bit-identical before timing.

    python benchmarks/bench_chain.py [--repeat 60] [--calib 2]
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_real_size import _samples, interleaved, mobilenet_v2, resnet50, yolov8n

from cuvil_edge import CuvilModel
from cuvil_edge.here import host_target

NETS = {"MobileNetV2 224": (mobilenet_v2, 224), "ResNet-50 224": (resnet50, 224),
        "YOLOv8n-style 320": (yolov8n, 320)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=60, help="timed calls per build")
    ap.add_argument("--calib", type=int, default=2)
    args = ap.parse_args()
    print("| int8 model (1 thread) | chained layers | arena MB chained / f32 between | "
          "ms chained / f32 between (ratio) |\n|---|---|---|---|")
    for name, (make, size) in NETS.items():
        proto, calib = make(), _samples(size, args.calib, 0)
        x = _samples(size, 1, 7)[0]
        builds = {chain: CuvilModel.load(proto).optimize("int8", targets=[host_target()], calibration=calib,
                                                         max_threads=1, kernel_cost=False, chain=chain)
                  for chain in (True, False)}
        outs = {chain: m.predict(x) for chain, m in builds.items()}
        assert all(np.array_equal(outs[True][k], outs[False][k]) for k in outs[False]), name
        ms = interleaved({chain: (lambda m=m, x=x: m.predict(x)) for chain, m in builds.items()}, 3,
                         args.repeat)
        arena = {chain: m.compiled.program.arena_size / 2**20 for chain, m in builds.items()}
        chained = sum("yq" in n.attrs for n in builds[True].compiled.graph.nodes)
        print(f"| {name} | {chained} | {arena[True]:.1f} / {arena[False]:.1f} | "
              f"{ms[True]:.1f} / {ms[False]:.1f} ({ms[False] / ms[True]:.2f}x) |", flush=True)
        for m in builds.values():
            m.close()


if __name__ == "__main__":
    main()
