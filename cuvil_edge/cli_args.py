"""Option values the CLI's command modules share (``cli``, ``cli_ota``), parsed below all of them so none
imports another for them."""

from __future__ import annotations

from collections.abc import Sequence

from .codegen.toolchain import ALL_TARGETS, Target
from .errors import ShapeError, TargetError


def parse_shapes(items: Sequence[str]) -> dict[str, list[int]]:
    """``--input-shape NAME=D0,D1,...`` (repeatable) as {input name: dims}."""
    shapes: dict[str, list[int]] = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        if not sep or not name:
            raise ShapeError(f"--input-shape wants NAME=D0,D1,..., got {item!r}")
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise ShapeError(f"--input-shape {item!r}: dimensions must be integers") from None
    return shapes


def parse_targets(text: str | None) -> str | list[Target] | None:
    """``--targets``: None, ``host``, ``all`` (passed on as they are) or a comma list of target names."""
    if text in (None, "host", "all"):
        return text
    chosen = []
    for part in text.split(","):
        match = [t for t in ALL_TARGETS if t.name == part or f"{t.tier}-{t.family}" == part]
        if not match:
            names = ", ".join(f"{t.tier}-{t.family}" for t in ALL_TARGETS)
            raise TargetError(f"unknown target {part!r}; use host, all or a list of: {names}")
        chosen += match
    return chosen
