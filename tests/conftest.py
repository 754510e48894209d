"""The fixtures several test folders use (``matches_ort``, ``host_cli``, ``broker``). The helpers behind
them live in ``tests.support`` (``tests/support/ort_check.py``: ``make_model``, ``check_with_ort``,
``assert_matches_ort``), which test modules import by name: no test module imports this conftest.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cuvil_edge.testing.broker import LocalBroker
from tests.support.ort_check import assert_matches_ort


@pytest.fixture
def matches_ort():
    """``assert_matches_ort`` (``tests.support.ort_check``) as a fixture."""
    return assert_matches_ort


@pytest.fixture
def host_cli(capsys):
    """Run ``cuvil-edge ARGS...`` in process; asserts exit 0 and returns what it printed."""
    from cuvil_edge.cli import main

    def run(*argv: str) -> str:
        assert main(list(argv)) == 0
        return capsys.readouterr().out

    return run


@pytest.fixture
def broker(tmp_path) -> Iterator[LocalBroker]:
    """A fresh broker on 127.0.0.1 for one test (Mosquitto when installed, else amqtt), stopped after it."""
    with LocalBroker(tmp_path / "broker") as b:
        yield b
