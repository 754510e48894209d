"""Options the CLI's command modules share (``app``, ``ota``, ``fleet``): each declared and parsed
here, below all of them, so none imports another for them and every command spells them the same."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..codegen.toolchain import ALL_TARGETS, Target
from ..errors import InputError, ShapeError, TargetError
from ..quant import PRECISIONS


def add_input_shape(p: argparse.ArgumentParser) -> None:
    """``--input-shape`` and ``--bind`` (repeatable), read by ``load_options``."""
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=V0,V1,...|@FILE.npy",
                   help="fix an input's value at build time (an axis, shape or pads the model takes as an "
                        "input); it leaves the compiled model's inputs")


def load_options(args: argparse.Namespace) -> dict[str, Any]:
    """``CuvilModel.load``'s keyword arguments from ``--input-shape`` and ``--bind``."""
    binds = parse_binds(getattr(args, "bind", []))
    return {"input_shapes": parse_shapes(args.input_shape), **({"bind": binds} if binds else {})}


def parse_binds(items: Sequence[str]) -> dict[str, np.ndarray]:
    """``--bind NAME=V0,V1,...`` (numbers, shaped as the input declares) or ``--bind NAME=@FILE.npy``."""
    binds: dict[str, np.ndarray] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name or not text:
            raise InputError(f"--bind wants NAME=V0,V1,... or NAME=@FILE.npy, got {item!r}")
        if text.startswith("@"):
            try:
                binds[name] = np.load(text[1:], allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise InputError(f"--bind {name}: cannot read {text[1:]!r}: {exc}") from None
            continue
        try:
            binds[name] = np.array([int(v) if v.strip().lstrip("+-").isdigit() else float(v)
                                    for v in text.split(",")])
        except (ValueError, OverflowError):
            raise InputError(f"--bind {item!r}: values must be numbers (int64 or float)") from None
    return binds


def add_precision(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--precision``: one of the builds' ``PRECISIONS``, fp32 by default."""
    p.add_argument("--precision", default="fp32", choices=PRECISIONS, help=help)


def add_calib(p: argparse.ArgumentParser, note: str = "") -> None:
    """``--calib``: the calibration data of the quantized builds (``note``: what this command also takes)."""
    p.add_argument("--calib", help="calibration data for --precision int8/mixed: .npz (by input name), or a "
                   f"directory of .npy/.npz{note}")


def add_targets(p: argparse.ArgumentParser, note: str = "") -> None:
    """``--targets``, read by ``parse_targets`` (``note``: how this command narrows or overrides it)."""
    p.add_argument("--targets", help=f"{note}host (default), all, or a list such as simd128-x86,relaxed-x86")


def add_passphrase_env(p: argparse.ArgumentParser) -> None:
    """``--passphrase-env``: the passphrase comes from the environment, never from argv."""
    p.add_argument("--passphrase-env", metavar="VAR", help="environment variable holding the key passphrase")


def add_key_args(p: argparse.ArgumentParser) -> None:
    """``--sign-key``/``--keyring``/``--passphrase-env``: the release keys a command signs with."""
    p.add_argument("--sign-key", action="append", metavar="KEY_FILE", help="release key file (repeatable)")
    p.add_argument("--keyring", help="sign with every delegated release key of this keyring")
    add_passphrase_env(p)


def bounded(kind: type[int] | type[float], low: float, high: float | None = None) -> Callable[[str], float]:
    """An argparse ``type``: a ``kind`` from ``low`` to ``high`` (inclusive), so that a count of 0 or a port
    past 65535 is a usage error, not a table of nans, an empty median or a traceback where it is used."""

    def parse(text: str) -> float:
        value = kind(text)  # a ValueError: argparse's "invalid int value"
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"want {low}..{high}, got {text}" if high is not None
                                             else f"want at least {low}, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


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
