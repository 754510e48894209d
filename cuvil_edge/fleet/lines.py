"""Release lines as a device's status reports them: the one function that says what a status means for
one line. A module of its own because both the publisher and the fleet store need it, and the publisher
imports the store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: device fields every line's view of a status keeps
_DEVICE_FIELDS = ("device", "hardware_id", "profile", "time")


def line_status(status: Mapping[str, Any], model: str) -> dict[str, Any] | None:
    """What a device's status says about one release line; None when the device does not follow it.

    A multi-model device's status is about the line that reported last (``model``) and carries every
    line's state, release and last bundle/error under ``models``; a single-model device (no ``models``)
    follows only the fleet's line (``model`` empty)."""
    lines = status.get("models")
    if not isinstance(lines, Mapping):
        return dict(status) if not model else None
    if not model or not isinstance(lines.get(model), Mapping):
        return None
    if status.get("model") == model:
        return dict(status)
    return {**{k: status[k] for k in _DEVICE_FIELDS if k in status}, **lines[model]}
