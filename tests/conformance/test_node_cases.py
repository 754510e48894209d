"""Every node case the onnx wheel generates (``node_cases.py``), built and run in CI: the passing list only
grows, and no case ends in a compiler error or an exception outside ``CuvilError`` (a case we cannot run
is refused at import, naming op, node and dtype or attribute)."""

from __future__ import annotations

import os

import pytest

from tests.conformance.node_cases import cases, passing, sweep

pytestmark = pytest.mark.conformance


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[str, str, float]]:
    return sweep(sorted(cases()), jobs=min(4, os.cpu_count() or 1))


def test_every_listed_case_still_passes(results) -> None:
    lost = {n: results[n][:2] for n in passing() if results[n][0] != "pass"}
    assert not lost, lost


def test_no_case_reaches_the_compiler_or_escapes_the_errors(results) -> None:
    bugs = {n: v[:2] for n, v in results.items() if v[0] in ("compiler", "crash")}
    assert not bugs, bugs


def test_every_refusal_names_the_node(results) -> None:
    unnamed = {n: v[1] for n, v in results.items() if v[0] == "refused"
               and "at node" not in v[1] and "opset" not in v[1]}
    assert not unnamed, unnamed
