"""MobileNetV2 at its real size (torchvision's layer shapes, 224x224, seeded weights, no download): our fp32
and static int8 modules next to onnxruntime fp32 and int8 (QDQ from its own ``quantize_static``, which we
also compile: its uint8 activations run our 8-bit kernels), one thread, timed in one process in
interleaved blocks so a noisy neighbour hits every engine alike; then the per-node profile of the
depthwise and 1x1 convolutions in our fp32 and int8 builds (time and GOPS, 2 ops per multiply-add).

The 64x64 zoo nets hide what real sizes show: at 224 the depthwise layers run on 112x112 planes, and
the 1x1 convs (most of the multiply-adds) on up to 112x112 pixels with as few as 16 input channels.

    python benchmarks/bench_real_size.py [--repeat 30] [--size 224] [--calib 4]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from cuvil_edge import CuvilModel
from cuvil_edge.bench import host_target, timings_ms
from cuvil_edge.ops.conv import conv_geometry, is_depthwise
from cuvil_edge.oracle import ort_session
from cuvil_edge.profile import profile_model
from cuvil_edge.zoo import DW_PREFIX, NetBuilder

#: torchvision.models.mobilenet_v2: (expansion t, output channels c, repeats n, first stride s)
MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))


def mobilenet_v2(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """torchvision's MobileNetV2 (width 1.0) as its ONNX export looks: Conv + BN + Clip(0, 6) blocks,
    inverted residuals (no 1x1 expansion when t = 1), a 1280-wide last conv, pooled Gemm head."""
    b = NetBuilder("mobilenet_v2", seed=seed)
    y = b.conv_bn("x", 3, 32, 3, act="Relu6", stride=2)
    cin = 32
    for t, c, n, s in MOBILENET_V2:
        for i in range(n):
            stride, mid = (s if i == 0 else 1), cin * t
            h = b.conv_bn(y, cin, mid, 1, act="Relu6") if t != 1 else y
            h = b.conv_bn(h, mid, mid, 3, act="Relu6", stride=stride, group=mid, name=b.fresh(DW_PREFIX))
            h = b.conv_bn(h, mid, c, 1, act=None)
            y = b.op("Add", [y, h]) if stride == 1 and cin == c else h
            cin = c
    y = b.conv_bn(y, cin, 1280, 1, act="Relu6")
    return b.build([("x", [1, 3, size, size])], b.head(y, 1280, classes), [1, classes])


def _samples(size: int, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)} for _ in range(n)]


def ort_int8(proto: onnx.ModelProto, calib: list[dict[str, np.ndarray]], wd: Path) -> onnx.ModelProto:
    """onnxruntime's static QDQ int8 (per-channel weights, uint8 activations) on the same calibration."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(calib)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    onnx.save(proto, wd / "fp32.onnx")
    logging.getLogger().setLevel(logging.ERROR)  # its advice to pre-process the model, once per tensor
    quantize_static(str(wd / "fp32.onnx"), str(wd / "int8.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True)
    return onnx.load(wd / "int8.onnx")


def interleaved(engines: dict[str, Callable[[], object]], warmup: int, repeat: int) -> dict[str, float]:
    """Median ms per engine, timed in blocks of 5 calls taken in turn."""
    times: dict[str, list[float]] = {k: [] for k in engines}
    for fn in engines.values():
        timings_ms(fn, warmup, 0)
    for _ in range(max(1, repeat // 5)):
        for k, fn in engines.items():
            times[k] += timings_ms(fn, 0, 5)
    return {k: statistics.median(v) for k, v in times.items()}


Rows = dict[str, tuple[str, str, float, float]]


def conv_profile(model: CuvilModel, repeat: int) -> dict[str, Rows]:
    """"depthwise" / "1x1" -> node -> (kernel, geometry, us, GOPS) for those convs of the compiled graph
    (one profile run)."""
    assert model.compiled is not None
    nodes = {n.name: n for n in model.compiled.graph.nodes}
    rows: dict[str, Rows] = {"depthwise": {}, "1x1": {}}
    for r in profile_model(model, host_target(), repeat=repeat):
        node = nodes[r.name]
        if node.op not in ("conv", "qconv"):
            continue
        g = conv_geometry(node)
        kind = "depthwise" if is_depthwise(g) else "1x1" if g["kh"] == g["kw"] == 1 else None
        if kind is None:
            continue
        ops = 2 * g["N"] * g["M"] * g["OH"] * g["OW"] * g["kh"] * g["kw"] * g["C"] // g["G"]
        taps = f"{g['kh']}x{g['kw']}s{g['sh']}" if kind == "depthwise" else f"->{g['M']}"
        rows[kind][r.name] = (r.kernel, f"{g['C']}x{g['H']}x{g['W']} {taps}", r.median_us,
                              ops / r.median_us / 1e3)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=30, help="timed calls per engine")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--calib", type=int, default=4, help="calibration samples (ours and onnxruntime's)")
    ap.add_argument("--profile-repeat", type=int, default=10, help="runs per node in the profile")
    args = ap.parse_args()
    os.environ.setdefault("CUVIL_CACHE_DIR", tempfile.mkdtemp(prefix="cuvil-bench-"))
    target = host_target()
    proto = mobilenet_v2(args.size)
    calib = _samples(args.size, args.calib, 1)
    feeds = _samples(args.size, 1, 0)[0]
    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
        q_proto = ort_int8(proto, calib, Path(tmp))
    fp32 = CuvilModel.load(proto).optimize(targets=[target])
    int8 = CuvilModel.load(proto).optimize("int8", targets=[target], calibration=calib)
    qdq = CuvilModel.load(q_proto).optimize(targets=[target])
    ref = ort_session(proto).run(None, feeds)[0].reshape(-1).astype(np.float64)
    engines: dict[str, Callable[[], object]] = {}
    outputs = {}
    for name, m in (("cuvil fp32", fp32), ("cuvil int8", int8), ("cuvil int8 (ORT QDQ)", qdq)):
        inst = m.instance
        outputs[name] = next(iter(inst.predict(feeds).values()))
        inst.set_inputs(feeds)
        engines[name] = inst.run
    for name, p in (("onnxruntime fp32", proto), ("onnxruntime int8 QDQ", q_proto)):
        sess = ort_session(p)
        outputs[name] = sess.run(None, feeds)[0]
        engines[name] = lambda s=sess: s.run(None, feeds)
    med = interleaved(engines, args.warmup, args.repeat)
    print(f"MobileNetV2 {args.size}x{args.size} (torchvision shapes, seeded weights), {target.name}, "
          f"1 thread, medians of {max(1, args.repeat // 5) * 5} interleaved calls")
    print(f"{'engine':22s} {'median ms':>10s} {'vs ORT fp32':>12s} {'vs ours fp32':>13s} {'cos':>8s}")
    for name, ms in med.items():
        y = outputs[name].reshape(-1).astype(np.float64)
        cos = float(y @ ref / np.linalg.norm(y) / np.linalg.norm(ref))  # vs onnxruntime fp32
        print(f"{name:22s} {ms:10.2f} {ms / med['onnxruntime fp32']:11.2f}x {ms / med['cuvil fp32']:12.2f}x "
              f"{cos:8.5f}")
    prof = {k: conv_profile(m, args.profile_repeat) for k, m in (("fp32", fp32), ("int8", int8))}
    for kind in ("depthwise", "1x1"):
        print_convs(kind, {k: p[kind] for k, p in prof.items()}, args.profile_repeat)
    for m in (fp32, int8, qdq):
        m.close()


def print_convs(kind: str, prof: dict[str, Rows], repeat: int) -> None:
    """The fp32 and int8 profile rows of each ``kind`` conv node side by side."""
    print(f"\n{kind} convs (profile builds, medians of {repeat}; GOPS = 2 x MACs / time)")
    print(f"{'node':8s} {'C x H x W, taps/out':22s} {'fp32 kernel':20s} {'us':>8s} {'GOPS':>6s}  "
          f"{'int8 kernel':26s} {'us':>8s} {'GOPS':>6s}")
    for node, (k32, shape, us32, g32) in prof["fp32"].items():
        k8, _, us8, g8 = prof["int8"][node]
        print(f"{node[:8]:8s} {shape:22s} {k32[:20]:20s} {us32:8.1f} {g32:6.2f}  "
              f"{k8[:26]:26s} {us8:8.1f} {g8:6.2f}")
    ms = {k: sum(r[2] for r in rows.values()) / 1e3 for k, rows in prof.items()}
    print(f"{len(prof['int8'])} {kind} nodes: fp32 {ms['fp32']:.2f} ms, int8 {ms['int8']:.2f} ms in all")


if __name__ == "__main__":
    main()
