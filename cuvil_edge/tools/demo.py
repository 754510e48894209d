"""``cuvil-edge demo`` and ``cuvil-edge fleet demo``: the whole pipeline on a generated model, checked against
onnxruntime, and a release rolled out over MQTT to an agent on this machine.

The one product module that uses ``cuvil_edge.testing`` (a generated model, a throwaway broker, a tiny
release): showing the pipeline with no model, broker or device of the user's own is what a demo is for.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from cuvil_agent.agent import Agent
from cuvil_agent.config import AgentConfig
from cuvil_agent.serve import infer
from ota.golden import decode_vector, release_vectors
from runtime_wasm import ModuleCache, probe_host
from runtime_wasm.loader import load_model_dir

from ..fleet.publisher import Publisher, format_rollout
from ..model import CuvilModel
from ..oracle import ort_session
from ..signing import Keyring, build_bundle
from ..testing import zoo
from ..testing.broker import LocalBroker
from ..testing.release import tiny_release
from .bench import median_p95, timings_ms


def run_demo(workdir: str | None = None, repeat: int = 50) -> int:
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
    shipped = run_fleet_demo(root, model_dirs=[out_dir]) == 0
    ok = ok and shipped
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1


def run_fleet_demo(workdir: str | os.PathLike[str] | None = None, backend: str | None = None,
                   model_dirs: Sequence[str | os.PathLike[str]] = ()) -> int:
    """Broker, publisher and one agent on this machine: release 1 active, release 2 rolled out over MQTT,
    then inference through the agent's socket. Mosquitto when installed, else the embedded amqtt."""
    with tempfile.TemporaryDirectory(prefix="cuvil-fleet-demo-", dir=workdir) as tmp:
        base = Path(tmp)
        ring = Keyring.init(base / "keys", 1, 1, 1, 1)
        if model_dirs:  # ship these built models as releases 1, 2, ...
            bundles = [base / f"release-{i}.cvb" for i in range(1, len(model_dirs) + 1)]
            for i, (d, b) in enumerate(zip(model_dirs, bundles), 1):
                build_bundle(d, b, ring.release_keys(), version=f"1.0.{i}", release=i, hardware_ids=["demo"])
        else:
            bundles = [tiny_release(base, ring, release, "demo") for release in (1, 2)]
        with LocalBroker(base / "broker", backend=backend) as broker:
            print(f"broker: {broker.backend} on 127.0.0.1:{broker.port}")
            cfg = AgentConfig(device_id="demo-device", fleet="demo", state_dir=str(base / "device"),
                              trust_root=str(ring.directory / "root.json"), hardware_id="demo",
                              socket=str(base / "device" / "infer.sock"), log_file=str(base / "agent.log"),
                              broker=broker.settings())
            agent, stop = Agent(cfg), threading.Event()
            thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
            thread.start()
            pub = Publisher(broker.settings(), "demo", ring.release_keys(), base / "fleet.json").start()
            try:
                for bundle in bundles:
                    pub.wait_for_devices(1, 10)
                    pub.publish(bundle, canary=100.0, halt_on=0.0)
                    rollout = pub.watch(timeout_s=60, stage_timeout_s=60)
                    print(format_rollout(rollout), flush=True)
                    active = agent.installer.active_model()
                    inputs, want = decode_vector(release_vectors(active.directory, active.manifest.golden)[0])
                    release, got = infer(cfg.socket, inputs)
                    ok = all(np.allclose(got[k], want[k], rtol=1e-5, atol=1e-5) for k in want)
                    print(f"  inference via {cfg.socket}: release {release}, golden output "
                          f"{'matches' if ok else 'DIFFERS'}")
            finally:
                pub.close()
                stop.set()
                thread.join(15)
    return 0 if rollout.status == "complete" and ok else 1
