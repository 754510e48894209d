"""Winograd F(4x4,3x3) against F(2x2,3x3) on whole nets (issue 40): ResNet-50 224 and a YOLOv8n-style 320
detector at fp32 on one thread, each built twice in one process, once as shipped (F(4x4) where
``uses_winograd_f4`` picks it) and once with F(2x2) on every stride-1 3x3 conv instead, timed in
interleaved blocks with onnxruntime (one thread) beside them; then each build's error against onnxruntime
on the same input, max |ours - ORT| / max |ORT|. The build cache is off: both builds compile.

    python benchmarks/bench_winograd.py [--repeat 30] [--nets resnet50,yolov8n]
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

import numpy as np
import onnx
from bench_real_size import _samples, interleaved, resnet50, yolov8n

from cuvil_edge import CuvilModel
from cuvil_edge.here import host_target
from cuvil_edge.ops import conv
from cuvil_edge.oracle import ort_peer

NETS = {"resnet50": lambda: resnet50(224), "yolov8n": lambda: yolov8n(320)}


@contextlib.contextmanager
def without_f4() -> Iterator[None]:
    """Builds inside pick F(2x2) where F(4x4) would run."""
    shipped = conv.WINOGRAD_KERNELS
    conv.WINOGRAD_KERNELS = tuple(k for k in shipped if k[0] is not conv.uses_winograd_f4)
    try:
        yield
    finally:
        conv.WINOGRAD_KERNELS = shipped


def f4_convs(model: CuvilModel) -> int:
    assert model.compiled is not None
    nodes = model.compiled.graph.nodes
    return sum(n.op == "conv" and conv.uses_winograd_f4(conv.conv_geometry(n)) for n in nodes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30, help="timed calls per engine")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--nets", default=",".join(NETS))
    args = ap.parse_args()
    os.environ["CUVIL_BUILD_CACHE"] = "0"
    target = host_target()
    print(f"fp32, {target.name}, 1 thread, medians of {max(1, args.repeat // 5) * 5} interleaved calls")
    print(f"{'net':10s} {'F(4x4) convs':>12s} {'F(4x4) ms':>10s} {'F(2x2) ms':>10s} {'ORT ms':>8s} "
          f"{'F4/F2':>6s} {'F4/ORT':>7s} {'err F4':>9s} {'err F2':>9s}")
    for name in args.nets.split(","):
        proto: onnx.ModelProto = NETS[name]()
        size = proto.graph.input[0].type.tensor_type.shape.dim[2].dim_value
        feeds = _samples(size, 1, 0)[0]
        sess = ort_peer(proto)
        ref = sess.run(None, feeds)[0]
        builds = {"f4": CuvilModel.load(proto).optimize(targets=[target])}
        with without_f4():
            builds["f2"] = CuvilModel.load(proto).optimize(targets=[target])
        assert f4_convs(builds["f4"]) > 0, f"{name}: no conv takes F(4x4)"
        err, engines = {}, {}
        for k, m in builds.items():
            m.threads = 1
            out = next(iter(m.predict(feeds).values()))
            err[k] = float(np.abs(out - ref).max() / np.abs(ref).max())
            m.instance.set_inputs(feeds)
            engines[k] = m.instance.run
        engines["ort"] = lambda s=sess, f=feeds: s.run(None, f)
        med = interleaved(engines, args.warmup, args.repeat)
        f4, f2, ort = med["f4"], med["f2"], med["ort"]
        print(f"{name:10s} {f4_convs(builds['f4']):12d} {f4:10.2f} {f2:10.2f} {ort:8.2f} {f4 / f2:5.3f}x "
              f"{f4 / ort:6.2f}x {err['f4']:9.2e} {err['f2']:9.2e}", flush=True)
        for m in builds.values():
            m.close()


if __name__ == "__main__":
    main()
