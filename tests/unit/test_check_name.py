"""Names that become MQTT topic levels (fleet, device, model line, prefix) are checked in one place,
``ota.config.check_name``; a bad one is a typed error of the update path's hierarchy."""

from __future__ import annotations

import pytest

from ota.config import check_name
from ota.errors import BadName, OtaError
from ota.protocol import Topics


@pytest.mark.parametrize("name", ["a/b", "+", "#", "", "x" * 65, "caf\u00e9", "cam\n", 7])
def test_a_name_that_is_not_one_topic_level_is_a_bad_name(name):
    with pytest.raises(BadName, match="one MQTT topic level") as caught:
        check_name(name, "device id")  # type: ignore[arg-type]
    assert isinstance(caught.value, OtaError) and "device id" in str(caught.value)


def test_topics_refuse_a_wildcard_fleet_and_device():
    with pytest.raises(BadName, match="fleet '#'"):
        Topics("cuvil", "#")
    with pytest.raises(BadName, match="device id 'a/b'"):
        Topics("cuvil", "f").status("a/b")
    assert check_name("cam-01.lab_2", "device id") == "cam-01.lab_2"


def test_a_chunk_topic_names_one_sha256_and_an_ascii_index():
    """``^...$`` with ``match`` took a trailing newline, and ``isdigit`` a superscript digit that ``int``
    then refused (a ValueError from a topic anyone may publish on)."""
    topics, sha = Topics("cuvil", "eu"), "ab" * 32
    assert topics.parse_chunk(topics.chunk(sha, 7)) == (sha, 7)
    for bad in (f"{sha}/\u00b2", f"{sha}\n/7", f"{sha.upper()}/7", f"{sha}/7\n", f"{sha[:-1]}/7"):
        assert topics.parse_chunk(f"cuvil/eu/bundle/{bad}") is None, bad
