"""The fixtures several test folders use (``matches_ort``, ``host_cli``, ``broker``, and for the fleet
store ``postgres``, ``store_url``, ``fleet_world``). The helpers behind
them live in ``tests.support`` (``tests/support/ort_check.py``: ``make_model``, ``check_with_ort``,
``assert_matches_ort``), which test modules import by name: no test module imports this conftest.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvil_edge.testing.broker import LocalBroker
from cuvil_edge.testing.postgres import LocalPostgres
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


_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """One PostgreSQL server for the session (a database per test); a start failure fails the tests."""
    with LocalPostgres() as pg:
        yield pg


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty fleet store's URL on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleet.db'}"  # relative to the cwd: tmp_path is absolute, so ////
    return request.getfixturevalue("postgres").create_database(f"fleet_{next(_databases)}")


@pytest.fixture(scope="module")
def fleet_world(tmp_path_factory: pytest.TempPathFactory):
    """A fleet's keys, root and a tiny signed release (``tests.support.fleet.FleetWorld``), per module."""
    from tests.support.fleet import FleetWorld

    return FleetWorld(tmp_path_factory.mktemp("fleet"))
