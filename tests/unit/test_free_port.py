"""The test broker's port stays outside the range the kernel gives outgoing connections, so a broker
that is stopped and started again on its port cannot find it taken by a client's local end."""

from __future__ import annotations

import socket

from cuvil_edge.testing.broker import _ephemeral_range, free_port


def test_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low, high = _ephemeral_range()
    assert 1024 < low <= high
    for _ in range(20):
        port = free_port()
        assert 10000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_returned() -> None:
    held = []
    try:
        for _ in range(30):
            s = socket.socket()
            port = free_port()
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)
        assert len({s.getsockname()[1] for s in held}) == len(held)
    finally:
        for s in held:
            s.close()
