"""``cuvil-edge demo``: the whole pipeline on a generated model, checked against onnxruntime."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np


def run_demo(workdir: str | None = None, repeat: int = 50) -> int:
    import onnx

    from runtime_wasm import ModuleCache, probe_host
    from runtime_wasm.loader import load_model_dir

    from . import zoo
    from .bench import median_p95, timings_ms
    from .model import CuvilModel
    from .oracle import ort_session

    root = Path(workdir or tempfile.mkdtemp(prefix="cuvil-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.2f}s] {msg}", flush=True)

    onnx_path = root / "mobilenet_v2_like.onnx"
    onnx.save(zoo.mobilenet(size=96), onnx_path)
    say(f"1. generated a MobileNetV2-style model (seeded weights): {onnx_path}")

    model = CuvilModel.load(onnx_path)
    model.optimize(targets="all", progress=lambda m: say("   " + m))
    out_dir = model.save(root / "mobilenet_v2_like.cuvil")
    assert model.compiled is not None
    say(f"2. built {len(model.compiled.spec.variants)} module variants into {out_dir}")

    cache = ModuleCache(root / "module-cache")
    probes = probe_host()
    t = time.perf_counter()
    device = load_model_dir(out_dir, probes=probes, cache=cache)
    cold = (time.perf_counter() - t) * 1e3
    device.close()
    t = time.perf_counter()
    device = load_model_dir(out_dir, probes=probes, cache=cache)
    warm = (time.perf_counter() - t) * 1e3
    say(f"3. device load ({probes.family}, relaxed SIMD {'yes' if probes.relaxed_simd else 'no'}): "
        f"cold {cold:.1f} ms (Cranelift compile), warm {warm:.1f} ms (precompiled cache)")

    spec = device.spec
    rng = np.random.default_rng(0)
    inputs = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in spec.inputs}
    ours = device.predict(inputs)
    sess = ort_session(str(onnx_path))
    ref = sess.run(None, inputs)
    worst = max(float(np.max(np.abs(ours[o.name] - r))) for o, r in zip(spec.outputs, ref))
    ok = all(np.allclose(ours[o.name], r, rtol=1e-4, atol=1e-4) for o, r in zip(spec.outputs, ref))
    say(f"4. wasmtime output vs onnxruntime: max |diff| = {worst:.2e} -> {'match' if ok else 'MISMATCH'}")

    device.set_inputs(inputs)
    ours_ms, ours_p95 = median_p95(timings_ms(device.run, repeat=repeat))
    ort_ms, ort_p95 = median_p95(timings_ms(lambda: sess.run(None, inputs), repeat=repeat))
    say(f"5. latency, 1 thread, median of {repeat}: cuvil-edge wasm {ours_ms:.3f} ms (p95 {ours_p95:.3f}), "
        f"onnxruntime native {ort_ms:.3f} ms (p95 {ort_p95:.3f}), ratio {ours_ms / ort_ms:.2f}x")
    device.close()

    say("6. ship it: sign, publish over MQTT; a cuvil-agent verifies, self-tests, installs and serves it")
    from .cli_fleet import demo as fleet_demo

    shipped = fleet_demo(root, model_dirs=[out_dir]) == 0
    ok = ok and shipped
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1
