"""The real graphs onnx ships in ``onnx/backend/test/data/light`` (ResNet-50, SqueezeNet, VGG-19, ...)
against their shipped outputs, fed the input onnx's own backend runner generates.

Every weight in these graphs is ``ConstantOfShape(0.02)``, so all logits are equal and the shipped
output is a uniform softmax whatever the features were: it checks that every op compiles and the
shapes plumb through, not the numbers. ``test_light_model_random_weights_match_ort`` therefore also
runs each listed graph with seeded random weights against onnxruntime.

Cases listed in ``passing.txt`` must pass; the rest are probed with
``python -m tests.conformance.test_onnx_light --probe [CASE ...]``, which prints a pass/fail line per
case (with the largest errors, so tolerances can be judged) for moving cases into the list.
"""

from __future__ import annotations

import argparse
import gc
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
PASSING_FILE = Path(__file__).with_name("passing.txt")
#: onnx's runner (onnx/backend/test/case/model/__init__.py): rtol 1e-3 (densenet121 2e-3), atol 1e-7
RTOL = {"densenet121": 2e-3}
DEFAULT_RTOL, ATOL = 1e-3, 1e-7


def all_cases() -> list[str]:
    return sorted(p.stem.removeprefix("light_") for p in LIGHT_DIR.glob("light_*.onnx"))


def passing_cases() -> list[str]:
    lines = (ln.strip() for ln in PASSING_FILE.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


def runner_input(value_info: onnx.ValueInfoProto) -> np.ndarray:
    """``arange(n) / n`` in the input's shape, as ``Runner.generate_dummy_data(random=False)`` makes it."""
    dims = value_info.type.tensor_type.shape.dim
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
    n = np.prod(shape)
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


@dataclass
class CaseResult:
    got: dict[str, np.ndarray]
    want: dict[str, np.ndarray]
    seconds: float  # import + compile + first run


def run_case(case: str) -> CaseResult:
    """Compile one light model for one variant, run it on the runner's input, load the shipped output."""
    from cuvil_edge import CuvilModel, Target

    model = onnx.load(str(LIGHT_DIR / f"light_{case}.onnx"))
    inits = {t.name for t in model.graph.initializer}
    feeds = {i.name: runner_input(i) for i in model.graph.input if i.name not in inits}
    want = {o.name: numpy_helper.to_array(onnx.load_tensor(str(LIGHT_DIR / f"light_{case}_output_{k}.pb")))
            for k, o in enumerate(model.graph.output)}
    t0 = time.perf_counter()
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        return CaseResult(cm.predict(feeds), want, time.perf_counter() - t0)


def randomize_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Replace each ``ConstantOfShape`` weight (in place: VGG-19's are 550 MB) by a seeded Constant:
    zero-mean unit-gain weights (so logits stay O(1) and the final softmax does not magnify fp32
    rounding), positive 1D parameters (biases, BN scale/mean/variance: variances must be positive)."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            continue
        shape = tuple(int(d) for d in shapes[node.input[0]])
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 0
        bound = np.sqrt(3 / fan_in) if fan_in else 0.0
        w = rng.uniform(-bound, bound, shape) if fan_in else rng.uniform(0.5, 1.5, shape)
        node.CopyFrom(helper.make_node("Constant", [], list(node.output), name=node.name,
                                       value=numpy_helper.from_array(w.astype(np.float32))))
    return model


def check(result: CaseResult, case: str) -> None:
    assert set(result.got) == set(result.want)
    for name, ref in result.want.items():
        np.testing.assert_allclose(result.got[name], ref, rtol=RTOL.get(case, DEFAULT_RTOL), atol=ATOL,
                                   err_msg=f"{case} output {name!r}")


@pytest.mark.conformance
@pytest.mark.parametrize("case", passing_cases())
def test_light_model_matches_shipped_output(case: str) -> None:
    try:
        check(run_case(case), case)
    finally:
        gc.collect()  # VGG-19 and AlexNet carry hundreds of MB of weights; free them before the next case


@pytest.mark.conformance
@pytest.mark.parametrize("case", passing_cases())
def test_light_model_random_weights_match_ort(case: str, matches_ort) -> None:
    from cuvil_edge import CuvilModel, Target

    model = randomize_weights(onnx.load(str(LIGHT_DIR / f"light_{case}.onnx")))
    try:
        with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
            matches_ort(model, cm, n_inputs=1, seed=0, rtol=RTOL.get(case, DEFAULT_RTOL), atol=1e-6)
    finally:
        gc.collect()


def test_passing_list_is_sorted_unique_and_known() -> None:
    names = passing_cases()
    assert names == sorted(set(names)), "passing.txt must be sorted and without duplicates"
    unknown = set(names) - set(all_cases())
    assert not unknown, f"passing.txt names cases onnx does not ship: {sorted(unknown)}"


def probe(cases: list[str]) -> dict[str, bool]:
    """Try each case and print one line: PASS/FAIL, build time, the largest errors or the exception."""
    results = {}
    for case in cases:
        try:
            r = run_case(case)
            diffs = [(np.abs(r.got[k] - v), np.abs(v).clip(1e-12)) for k, v in r.want.items()]
            abs_err = max(float(d.max()) for d, _ in diffs)
            rel_err = max(float((d / ref).max()) for d, ref in diffs)
            detail = f"{r.seconds:.1f}s, max abs err {abs_err:.2e}, max rel err {rel_err:.2e}"
            check(r, case)
            results[case] = True
            print(f"PASS {case}: {detail}", flush=True)
        except Exception as exc:  # the probe reports every failure, whatever raised it
            results[case] = False
            first = (str(exc).strip().splitlines() or [""])[0]
            print(f"FAIL {case}: {type(exc).__name__}: {first[:300]}", flush=True)
        gc.collect()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", action="store_true", help="try cases and print pass/fail lines")
    parser.add_argument("cases", nargs="*", help="cases to probe (default: every shipped case)")
    args = parser.parse_args()
    if not args.probe:
        parser.error("nothing to do: pass --probe (pytest runs the listed cases)")
    probe(args.cases or all_cases())
