"""The onnx package's shipped backend cases in ``pytorch-converted``, ``pytorch-operator`` and ``simple``:
each a model.onnx with test_data_set_0/input_*.pb and output_*.pb, compiled and compared with the
shipped outputs (onnx's runner tolerances: rtol 1e-3, atol 1e-7; 1e-5 absolute for our fp32 math).

Cases listed in ``suites_passing.txt`` must pass (the list only grows). Probe the rest with
``python -m tests.conformance.test_onnx_node_suites --probe [CASE ...]``: one pass/fail line per case
with the reason (a known gap from ``KNOWN_GAPS``, else the error: unsupported op named, or the largest
mismatch), then the pass count.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.support.onnx_suites import DATA, passing_cases

SUITES = ("pytorch-converted", "pytorch-operator", "simple")
RTOL, ATOL = 1e-3, 1e-5

#: case-name prefix -> why cuvil-edge does not compile it (out of scope by design, not a bug)
KNOWN_GAPS: dict[str, str] = {}


def known_gap(case: str) -> str | None:
    return next((why for prefix, why in KNOWN_GAPS.items() if case.startswith(prefix)), None)


def all_cases() -> list[str]:
    """``suite/case`` for every case that ships input/output pairs."""
    return sorted(
        f"{d.parent.name}/{d.name}"
        for s in SUITES
        for d in (DATA / s).iterdir()
        if list(d.glob("test_data_set_0/output_*.pb"))
    )


def _tensors(d: Path, kind: str) -> list[np.ndarray]:
    files = sorted(d.glob(f"{kind}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    return [numpy_helper.to_array(onnx.load_tensor(str(f))) for f in files]


def run_case(case: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(ours, shipped) outputs by name for one case; old opsets are upgraded to 7 when below it."""
    from cuvil_edge import CuvilModel, Target

    model = onnx.load(str(DATA / case / "model.onnx"))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 7:
        model = onnx.version_converter.convert_version(model, 7)
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    d = DATA / case / "test_data_set_0"
    feeds = dict(zip(names, _tensors(d, "input")))
    want = dict(zip([o.name for o in model.graph.output], _tensors(d, "output")))
    shapes = {k: v.shape for k, v in feeds.items()}
    with CuvilModel.load(model, input_shapes=shapes).optimize(targets=[Target()]) as cm:
        return cm.predict(feeds), want


def check_case(case: str) -> None:
    got, want = run_case(case)
    for name, ref in want.items():
        if ref.dtype == object:  # strings: exactly, shape included
            np.testing.assert_array_equal(got[name], ref, err_msg=f"{case} {name}", strict=True)
        else:
            np.testing.assert_allclose(got[name], ref, rtol=RTOL, atol=ATOL, err_msg=f"{case} {name}")


@pytest.mark.conformance
@pytest.mark.parametrize("case", passing_cases())
def test_listed_case_passes(case: str) -> None:
    check_case(case)


def test_passing_list_is_known_and_sorted() -> None:
    listed = passing_cases()
    assert listed == sorted(set(listed)) and set(listed) <= set(all_cases())


def test_every_unlisted_case_is_a_known_gap() -> None:
    """A case that fails for a reason outside ``KNOWN_GAPS`` is a bug to fix or a gap to name."""
    assert [c for c in all_cases() if c not in set(passing_cases()) and known_gap(c) is None] == []


def probe(cases: list[str]) -> int:
    passed = 0
    for case in cases:
        try:
            check_case(case)
        except Exception as exc:  # report every failure kind with its reason
            reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
            gap = known_gap(case)
            print(f"FAIL {case}: " + (f"known gap: {gap} ({reason})" if gap else reason))
        else:
            passed += 1
            print(f"PASS {case}")
    print(f"{passed}/{len(cases)} passed")
    return passed


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe", action="store_true", help="run cases and print pass/fail with reasons")
    ap.add_argument("cases", nargs="*", help="suite/case names (default: every case)")
    args = ap.parse_args()
    if args.probe:
        probe(args.cases or all_cases())
