"""Every setting ``agent.toml`` (or an ``ota.config`` dataclass built in code) gets wrong is a
``ConfigError``: typed in the update path's hierarchy, still a ``ValueError`` for older callers, and its
message names the setting (or the file) that was refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuvil_agent.config import load_agent_config, serving_policy
from ota.errors import ConfigError, OtaError

BASE = '[agent]\ndevice_id = "d"\nfleet = "f"\nstate_dir = "/tmp/none"\n'


@pytest.mark.parametrize("toml, names", [
    ("[ota]\nchunk_bytes = 0\n", "chunk_bytes"),
    ("[ota]\nselftest_rtol = -1.0\n", "selftest_rtol"),
    ("[limits]\nwindow_chunks = 0\n", "window_chunks"),
    ("[limits]\nmax_retries = -1\n", "TransferLimits.max_retries"),
    ("[download]\nread_timeout_s = 0\n", "read_timeout_s"),
    ("[broker]\nprotocol = 3\n", "protocol"),
    ("[serve]\nmax_items = 0\n", "max_items"),
    ("[http]\nport = 70000\n", "port"),
    ("[http]\nmax_body_bytes = 0\n", "max_body_bytes"),
    ("[telemetry]\nmax_events = 0\n", "max_events"),
    ("[admission]\nmax_pending = 0\n", "max_pending"),
    ("[[models]]\nname = \"a\"\n[[models]]\nname = \"a\"\n", "duplicate"),
    ("[[models]]\nname = \"a/b\"\n", "model name"),
    ("models = [7]\n", "models[0]"),
    ("[serve]\nmax_items = \"many\"\n", "serve.max_items"),
    ("[serve]\nno_such = 1\n", "no_such"),
    ("[nonsense]\n", "unknown sections"),
], ids=lambda v: v.split("\n")[0] if "\n" in v else None)
def test_each_refused_setting_is_a_config_error_naming_it(tmp_path: Path, toml: str, names: str):
    path = tmp_path / "agent.toml"
    path.write_text(BASE + toml if not toml.startswith("models =") else toml + BASE)
    with pytest.raises(ConfigError, match=names.replace("[", r"\[").replace(".", r"\.")) as caught:
        load_agent_config(path)
    assert isinstance(caught.value, OtaError) and isinstance(caught.value, ValueError)


def test_a_missing_agent_field_names_the_file(tmp_path: Path):
    (tmp_path / "agent.toml").write_text('[agent]\ndevice_id = "d"\n')
    with pytest.raises(ConfigError, match="agent.toml.*fleet"):
        load_agent_config(tmp_path / "agent.toml")


@pytest.mark.parametrize("content", [os.urandom(256) + b"\xff\xfe", b"x = [\n"], ids=["binary", "not-toml"])
def test_a_file_that_is_not_toml_is_a_config_error_naming_it(tmp_path: Path, content: bytes):
    (tmp_path / "junk.bin").write_bytes(content)
    with pytest.raises(ConfigError, match=r"junk\.bin: not a TOML file"):
        load_agent_config(tmp_path / "junk.bin")


def test_an_unknown_profile_is_a_config_error(tmp_path: Path):
    (tmp_path / "agent.toml").write_text(BASE + 'profile = "no-such-board"\n')
    with pytest.raises(ConfigError, match="agent.profile 'no-such-board'"):
        serving_policy(load_agent_config(tmp_path / "agent.toml"))
