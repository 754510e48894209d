"""DistilBERT-shaped encoder (6 x 768, 12 heads, FFN 3072, seq 128, attention mask) at one thread:
our compiled module in wasmtime next to onnxruntime fp32 native, same model, same inputs.

Ours is timed on the zero-copy serving path (``set_inputs`` once, ``instance.run()`` per call). With
``--web``, onnxruntime-web's WASM backend (one thread, SIMD) under Node runs the same model on the same
inputs through ``_peers.ort_web`` (needs ``npm install`` in benchmarks/node/); it is skipped with a
note when Node or the package is missing.

    python benchmarks/bench_transformers.py [--repeat 10] [--layers 6] [--seq 128] [--web]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _peers import ort_web

from cuvil_edge import CuvilModel
from cuvil_edge.here import host_target
from cuvil_edge.oracle import ort_peer
from cuvil_edge.testing.zoo_transformers import bert_encoder, bert_feeds
from cuvil_edge.tools.bench import median_p95, timings_ms


def times_ms(fn, warmup: int, repeat: int) -> tuple[float, float]:
    """(median, p95) of ``repeat`` timed calls after ``warmup`` untimed ones."""
    return median_p95(timings_ms(fn, warmup, repeat))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--web", action="store_true", help="also run onnxruntime-web (WASM) under Node")
    args = ap.parse_args()

    model = bert_encoder(layers=args.layers, seq=args.seq)
    feeds = bert_feeds(args.seq)
    t0 = time.perf_counter()
    cm = CuvilModel.load(model).optimize(targets=[host_target()])
    build_s = time.perf_counter() - t0
    sess = ort_peer(model)
    want = sess.run(None, feeds)[0]
    cm.threads = 1  # the one-thread comparison (bench_threads.py: more)
    got = cm.predict(feeds)["last_hidden_state"]
    err = float(np.abs(got - want).max())
    inst = cm.instance
    inst.set_inputs(feeds)
    ours = times_ms(inst.run, 2, args.repeat)
    native = times_ms(lambda: sess.run(None, feeds), 2, args.repeat)
    rows: list[tuple[str, tuple[float, float] | str]] = [
        ("cuvil-edge (wasmtime, 1 thread)", ours), ("onnxruntime fp32 native (1 thread)", native)]
    notes = []
    if args.web:
        web = ort_web(model, feeds, args.repeat, warmup=2)
        if isinstance(web, str):
            rows.append(("onnxruntime-web wasm (Node, 1 thread)", web))
        else:
            rows.append((f"onnxruntime-web {web.version} wasm (Node, {web.threads} thread)",
                         (web.median_ms, web.p95_ms)))
            web_err = float(np.abs(web.outputs["last_hidden_state"] - want).max())
            notes.append(f"onnxruntime-web: simd={web.simd}, max |web - ORT| = {web_err:.2e}")
    print(f"DistilBERT-shaped encoder: {args.layers} layers x 768, 12 heads, FFN 3072, seq {args.seq}; "
          f"build {build_s:.1f} s; max |ours - ORT| = {err:.2e}")
    print(f"{'runtime':44s} {'median ms':>10s} {'p95 ms':>9s} {'vs ours':>8s}")
    for name, t in rows:
        if isinstance(t, str):
            print(f"{name:44s} {t}")
        else:
            print(f"{name:44s} {t[0]:10.1f} {t[1]:9.1f} {t[0] / ours[0]:7.2f}x")
    for note in notes:
        print(note)
    print(f"ours / ORT native = {ours[0] / native[0]:.2f} (target <= 3)")

if __name__ == "__main__":
    main()
