"""The exporter sweep (``exporter_sweep.py``) in CI: tiny random-weight Hugging Face architectures through
torch's dynamo and TorchScript exporters, built and run against onnxruntime. The passing cells only grow,
no cell crashes, and every refusal names the op and node."""

from __future__ import annotations

import os

import pytest

from tests.conformance.exporter_sweep import ARCHITECTURES, passing, sweep

pytestmark = pytest.mark.conformance


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[str, str]]:
    cells = sweep(list(ARCHITECTURES), jobs=min(2, os.cpu_count() or 1))
    return {f"{arch} {exporter}": (outcome, detail) for arch, exporter, outcome, detail in cells}


def test_every_listed_cell_still_passes(results) -> None:
    lost = {cell: results[cell] for cell in passing() if results[cell][0] != "pass"}
    assert not lost, lost


def test_no_cell_crashes_and_every_refusal_names_the_node(results) -> None:
    crashed = {cell: v for cell, v in results.items() if v[0] == "crash"}
    assert not crashed, crashed
    unnamed = {cell: v[1] for cell, v in results.items() if v[0] == "refused" and "at node" not in v[1]}
    assert not unnamed, unnamed
