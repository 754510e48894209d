"""Multi-model devices without a model: the core division rule, the admission controller's ceilings, the
``[[models]]`` config (and that a config without it is the single-model one) and the model-line topic."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cuvil_agent.config import AdmissionSettings, ModelConfig, load_agent_config, model_policies
from ota.errors import FormatError
from ota.protocol import Command, Topics
from runtime_wasm import DeviceAdmission, Overloaded, RuntimePolicy, divide_threads

ROOT = Path(__file__).resolve().parents[2]
BASE = '[agent]\ndevice_id = "d"\nfleet = "f"\nstate_dir = "/tmp/none"\n'


@pytest.mark.parametrize("wanted, cores, threads", [
    ([(10, 0), (1, 0)], 4, [3, 1]),  # the high priority takes all but one core per lower model
    ([(10, 2), (1, 0)], 4, [2, 2]),  # asks for 2: the rest goes to the next
    ([(1, 0), (10, 1), (5, 0)], 8, [1, 1, 6]),  # by priority, returned in the given order
    ([(1, 0), (1, 0), (1, 0)], 2, [1, 1, 1]),  # more models than cores: at least one each
    ([(3, 16)], 4, [4]),  # never more than the budget
])
def test_cores_are_divided_by_priority_with_at_least_one_each(wanted, cores, threads):
    assert divide_threads(wanted, cores) == threads


def test_lower_priority_is_refused_first_and_slots_come_back():
    device = DeviceAdmission(max_pending=4, reserve=2)
    high, mid, low = device.gate(10), device.gate(5), device.gate(1)
    assert [device.ceiling(p) for p in (10, 5, 1)] == [4, 2, 1]  # 4 - 2 per level above, at least 1
    low.enter()
    with pytest.raises(Overloaded, match="priority 1"):
        low.enter()
    mid.enter()
    with pytest.raises(Overloaded, match="priority 5"):
        mid.enter()
    high.enter()
    high.enter()
    assert device.pending == 4
    with pytest.raises(Overloaded):
        high.enter()  # the whole budget is full: even the top is refused
    assert dict(device.shed) == {1: 1, 5: 1, 10: 1}
    for gate in (low, mid, high, high):
        gate.leave()
    assert device.pending == 0
    low.enter()  # an idle device serves every priority again
    assert device.pending == 1


def test_models_tables_load_typed_with_their_policies_and_threads(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text(BASE + '[admission]\nmax_pending = 8\ncores = 4\n'
                    '[[models]]\nname = "census"\npriority = 1\n[models.policy]\nmax_batch_size = 4\n'
                    '[[models]]\nname = "alert"\npriority = 10\nsocket = "/run/alert.sock"\n'
                    '[policy]\np95_budget_ms = 20.0\ndeadline_ms = 100.0\n')
    cfg = load_agent_config(path)
    assert cfg.models == (ModelConfig("census", 1, RuntimePolicy(max_batch_size=4)),
                          ModelConfig("alert", 10, None, "/run/alert.sock"))
    assert cfg.admission == AdmissionSettings(max_pending=8, cores=4)
    census, alert = model_policies(cfg)
    assert (census.max_batch_size, census.threads) == (4, 1)
    assert (alert.p95_budget_ms, alert.threads) == (20.0, 3)  # the agent's [policy] for a line without one


def test_a_config_without_models_is_the_single_model_device(tmp_path):
    (tmp_path / "a.toml").write_text(BASE)
    assert load_agent_config(tmp_path / "a.toml").models == ()
    text = (ROOT / "packaging" / "agent.example.toml").read_text()
    # the example's commented [[models]] block, turned on, is a valid two-model device
    block = text[text.index("# [admission]"):]
    (tmp_path / "b.toml").write_text(BASE + re.sub(r"^# ?", "", block, flags=re.M))
    assert [(m.name, m.priority) for m in load_agent_config(tmp_path / "b.toml").models] == [
        ("alert", 10), ("census", 1)]


@pytest.mark.parametrize("models, error", [
    ('[[models]]\nname = "a"\n[[models]]\nname = "a"\n', "duplicate"),
    ('[[models]]\nname = "a/b"\n', "model name"),
    ('[[models]]\npriority = 1\n', "name"),
    ('[[models]]\nname = "a"\nthreads = 2\n', "unknown setting"),
    ('[[models]]\nname = "a"\n[models.policy]\nthreads = "all"\n', "threads"),
])
def test_bad_models_tables_are_errors(tmp_path, models, error):
    (tmp_path / "a.toml").write_text(BASE + models)
    with pytest.raises(ValueError, match=error):
        load_agent_config(tmp_path / "a.toml")


def test_the_single_socket_is_not_ambiguous_with_several_models(tmp_path):
    (tmp_path / "a.toml").write_text(BASE.replace('fleet = "f"', 'fleet = "f"\nsocket = "/run/x.sock"')
                                     + '[[models]]\nname = "a"\n')
    with pytest.raises(ValueError, match="each its socket"):
        load_agent_config(tmp_path / "a.toml")


def test_model_lines_have_their_own_release_topic_and_commands_name_them():
    topics = Topics("cuvil", "eu")
    assert topics.model_release("alert") == "cuvil/eu/release/alert"
    assert "topic read cuvil/eu/release/+" in topics.device_acl("cam", "cam")
    with pytest.raises(ValueError):
        topics.model_release("a/#")
    base = {"type": "cuvil-command", "format": 1, "fleet": "eu", "device": "cam", "action": "rollback",
            "nonce": "0" * 32, "issued": "2026-01-01T00:00:00Z", "expires": "2026-01-01T00:01:00Z"}
    assert Command.from_dict({**base, "model": "alert"}).model == "alert"
    assert Command.from_dict(base).model == ""  # an older publisher's command
    with pytest.raises(FormatError):
        Command.from_dict({**base, "model": "+"})
