"""What determinism mode costs: the module this host would pick (relaxed tier of its family, plain engine)
next to the fleet-wide one determinism mode runs everywhere (simd128 x86, NaN canonicalization), same
inputs, one thread, interleaved rounds in one process; medians and the ratio.

    python benchmarks/bench_determinism.py [--repeat 30] [--rounds 3] [--models resnet,mobilenet,...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import onnx
import wasmtime
from bench_real_size import mobilenet_v2

from cuvil_edge import ALL_TARGETS, CuvilModel, Target
from cuvil_edge.here import host_target
from cuvil_edge.oracle import random_feeds
from cuvil_edge.testing.zoo import mobilenet, resnet
from cuvil_edge.testing.zoo_transformers import bert_encoder
from cuvil_edge.tools.bench import timings_ms
from runtime_wasm import EngineConfig, WasmModel
from runtime_wasm.loader import read_model_dir

MODELS = {
    "resnet64": lambda: resnet(size=64),
    "mobilenet64": lambda: mobilenet(size=64),
    "mobilenetv2-224": mobilenet_v2,
    "bert-2x128": lambda: bert_encoder(layers=2),
}


def instance(model_dir: Path, target: Target, deterministic: bool) -> WasmModel:
    spec, chosen, wasm, weights = read_model_dir(model_dir, target.name)
    engine = wasmtime.Engine(EngineConfig(chosen.tier, deterministic=deterministic).build())
    return WasmModel(engine, wasmtime.Module(engine, wasm), spec, weights)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    host, fleet = host_target(), Target("simd128", "x86")
    print(f"host variant {host.name} (plain engine) vs determinism mode {fleet.name} (canonical NaNs)")
    print(f"{'model':18} {'host ms':>9} {'determ. ms':>11} {'cost':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            proto: onnx.ModelProto = MODELS[name]()
            out = CuvilModel.load(proto).optimize(targets=ALL_TARGETS).save(Path(tmp) / name)
            fast, det = instance(out, host, False), instance(out, fleet, True)
            feeds = random_feeds(fast.spec.inputs, np.random.default_rng(0))
            for m in (fast, det):
                m.set_inputs(feeds)
            a, b = [], []
            for _ in range(args.rounds):  # interleaved, so machine noise falls on both
                a += timings_ms(fast.run, repeat=args.repeat)
                b += timings_ms(det.run, repeat=args.repeat)
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"{name:18} {ma:9.2f} {mb:11.2f} {mb / ma:5.2f}x")
            fast.close()
            det.close()


if __name__ == "__main__":
    main()
