"""The onnx package's shipped backend cases (``pytorch-converted``, ``pytorch-operator``, ``simple``) and
the ones listed as passing (``tests/conformance/suites_passing.txt``): for the suite conformance test and
the kernel table's coverage check."""

from __future__ import annotations

from pathlib import Path

import onnx

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
PASSING_FILE = Path(__file__).parents[1] / "conformance" / "suites_passing.txt"


def passing_cases() -> list[str]:
    lines = (ln.strip() for ln in PASSING_FILE.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]
