"""RuntimePolicy validation and loading, the should_wait batching rule, latency estimates, thermal sensor."""

from __future__ import annotations

import pytest

from runtime_wasm import PolicyError, RuntimePolicy, read_cpu_temp_c, should_wait
from runtime_wasm.scheduler import LatencyModel, batch_wait_ms


def test_defaults_are_valid_and_dict_loading_is_typed():
    assert RuntimePolicy().degrade_action == "throttle"
    p = RuntimePolicy.from_dict({"p95_budget_ms": 20, "deadline_ms": 50.5, "max_batch_size": 8,
                                 "degrade_action": "shed", "memory_cap_bytes": 1 << 24})
    assert p.p95_budget_ms == 20.0 and isinstance(p.p95_budget_ms, float) and p.max_batch_size == 8


@pytest.mark.parametrize(("table", "match"), [
    ({"p95_budget_ms": -1}, "non-negative"),
    ({"deadline_ms": 0}, "positive"),
    ({"p95_budget_ms": 200, "deadline_ms": 100}, "at least"),
    ({"duty_cycle_cap": 1.5}, "fractions"),
    ({"degrade_action": "explode"}, "degrade_action"),
    ({"max_batch_size": 2.5}, "expected int"),
    ({"max_batch_size": True}, "expected int"),
    ({"p95_budget_ms": "fast"}, "expected float"),
    ({"latency_budget": 10}, "unknown setting"),
])
def test_bad_settings_are_errors(table, match):
    with pytest.raises(PolicyError, match=match):
        RuntimePolicy.from_dict(table)


def test_policy_is_a_value_error_and_loads_from_the_agents_toml(tmp_path):
    assert issubclass(PolicyError, ValueError)
    cfg = tmp_path / "agent.toml"
    cfg.write_text('[agent]\ndevice_id = "d1"\n\n[policy]\np95_budget_ms = 30\nmax_input_age_ms = 500\n'
                   'max_cpu_temp_c = 85.0\ndegrade_action = "cheaper_variant"\n')
    p = RuntimePolicy.from_toml(cfg)
    assert (p.p95_budget_ms, p.max_input_age_ms, p.degrade_action) == (30.0, 500.0, "cheaper_variant")
    (tmp_path / "none.toml").write_text("[agent]\n")
    assert RuntimePolicy.from_toml(tmp_path / "none.toml") == RuntimePolicy()


EST = {2: 10.0, 3: 14.0, 4: 18.0, 5: 22.0}.__getitem__  # expected ms per batch size


@pytest.mark.parametrize(("ages", "budget", "window", "max_batch", "wait"), [
    ([], 50, 30, 4, False),  # nothing queued
    ([1.0], 50, 30, 4, True),  # budget 49 ms left > 10 ms for a batch of 2
    ([45.0], 50, 100, 4, False),  # only 5 ms left: a batch of 2 would blow the budget
    ([35.0, 5.0], 50, 100, 4, True),  # 15 ms left > 14 ms for 3
    ([37.0, 5.0], 50, 100, 4, False),  # 13 ms left < 14 ms for 3
    ([5.0, 1.0], 50, 5, 4, False),  # batching window closed
    ([1.0, 1.0, 1.0, 1.0], 500, 100, 4, False),  # batch full
    ([1.0], 50, 0, 4, False),  # no window: never waits
    ([1.0], 50, 30, 1, False),  # batching off
])
def test_should_wait_is_a_function_of_ages_budget_and_estimates(ages, budget, window, max_batch, wait):
    assert should_wait(ages, budget, EST, max_batch, window) is wait


def test_batch_wait_is_bounded_by_budget_slack_and_window():
    assert batch_wait_ms([10.0], 50, EST, 4, 100) == 30.0  # 40 left - 10 expected
    assert batch_wait_ms([10.0], 50, EST, 4, 15) == 5.0  # the window closes first


def test_latency_model_ewma_and_extrapolation():
    m = LatencyModel()
    assert m.expected_ms(3) == 0.0
    m.observe(1, 2.0)
    assert m.expected_ms(4) == 8.0  # per-request cost of the nearest measured size
    m.observe(1, 4.0)
    assert m.expected_ms(1) == pytest.approx(2.4)
    m.observe(4, 6.0)
    assert m.expected_ms(4) == 6.0 and m.expected_ms(8) == 12.0


def test_cpu_temperature_is_the_hottest_readable_zone(tmp_path):
    assert read_cpu_temp_c(tmp_path) is None
    for i, text in enumerate(["45000\n", "71500\n", "garbage\n"]):
        (tmp_path / f"thermal_zone{i}").mkdir()
        (tmp_path / f"thermal_zone{i}" / "temp").write_text(text)
    assert read_cpu_temp_c(tmp_path) == 71.5


def test_agent_config_embeds_a_policy_table(tmp_path):
    from cuvil_agent.config import load_agent_config

    cfg = tmp_path / "agent.toml"
    base = '[agent]\ndevice_id = "d1"\nfleet = "f"\nstate_dir = "s"\n'
    cfg.write_text(base)
    assert load_agent_config(cfg).policy is None
    cfg.write_text(base + "[policy]\ndeadline_ms = 250\nmax_batch_size = 4\n")
    assert load_agent_config(cfg).policy == RuntimePolicy(deadline_ms=250.0, max_batch_size=4)
    cfg.write_text(base + "[policy]\ndeadline_ms = -1\n")
    with pytest.raises(ValueError, match="deadline_ms"):
        load_agent_config(cfg)


def test_the_agent_serves_under_its_profiles_policy_and_threads():
    """No ``[policy]``: the device profile's default policy; a thread count left to the device (0) is the
    profile's ``threads`` (its cores less one, which the agent and the app keep), else every core of this
    process but one; an explicit count wins; an unknown profile is a configuration error."""
    from dataclasses import replace

    from cuvil_agent.config import AgentConfig, serving_policy
    from device_profiles import load_profile
    from runtime_wasm.instance import available_cores

    base = AgentConfig(device_id="d", fleet="f", state_dir="/nonexistent")
    assert serving_policy(base) == RuntimePolicy(threads=max(1, available_cores() - 1))
    pi4 = load_profile("raspberry-pi-4")
    on_pi = serving_policy(replace(base, profile="raspberry-pi-4"))
    assert on_pi == replace(pi4.policy, threads=pi4.threads) and on_pi.threads == 3 == pi4.cores.total - 1
    assert on_pi.memory_cap_bytes == pi4.policy.memory_cap_bytes
    own = replace(base, profile="jetson-orin-nano", policy=RuntimePolicy(deadline_ms=500.0))
    assert serving_policy(own) == RuntimePolicy(deadline_ms=500.0, threads=5)
    assert serving_policy(replace(own, policy=RuntimePolicy(threads=2))).threads == 2
    with pytest.raises(ValueError, match="no-such-board"):
        serving_policy(replace(base, profile="no-such-board"))
