"""Calibration: sample data in, activation ranges out (observers min-max, percentile, MSE).

Samples come from an ``.npz`` file (arrays by input name, leading axis = samples), a directory of
``.npy`` (single-input models) or ``.npz`` files (sorted by name), or any Python iterable of dicts /
arrays. Layer inputs are read by compiling the fp32 graph once more with those values as extra
outputs and running it in wasmtime, so calibration sees exactly what the float model computes.
Everything is deterministic: files sorted, samples in order, observers subsample with a fixed stride.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import QuantizationError
from ..ir.graph import Graph, TensorType, Value

Sample = dict[str, np.ndarray]
Progress = Callable[[str], None]
OBSERVERS = ("minmax", "percentile", "mse")
KEEP = 1 << 20  # values per tensor kept for the percentile and MSE observers
#: what calibration data is, for the messages of errors about it (the CLI's ``--calib`` and the API's)
CALIBRATION_HINT = ("give --calib FILE (an .npz of sample inputs by input name, leading axis = samples) "
                    "or a directory of .npy/.npz files")


@dataclass(frozen=True)
class ActRange:
    lo: float
    hi: float


def load_samples(source: Any, inputs: Sequence[Value], limit: int | None = None) -> list[Sample]:
    """Normalise any supported calibration source into a list of {input name: array} samples."""
    names = [v.name for v in inputs]
    types = {v.name: v.type for v in inputs}
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz"))
            items: Iterable[Any] = (_read(p) for p in files)
        else:
            items = [_read(path)]
        samples = [s for item in items for s in _split(item, names, types)]
    else:
        samples = [s for item in source for s in _split(item, names, types)]
    if not samples:
        raise QuantizationError(f"calibration data holds no samples; {CALIBRATION_HINT}")
    return samples[:limit]


def _read(path: Path) -> Any:
    """The arrays in one file; a file numpy cannot read is a ``QuantizationError`` (a missing one stays an
    ``OSError``: the CLI reports those as unreadable files)."""
    try:
        if path.suffix == ".npz":
            with np.load(path) as z:
                return {k: z[k] for k in z.files}
        return np.load(path)
    except (ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise QuantizationError(f"calibration file {path} is not .npy/.npz data ({exc}); "
                                f"{CALIBRATION_HINT}") from None


def _split(item: Any, names: list[str], types: Mapping[str, TensorType]) -> list[Sample]:
    """One item (dict, array or list in input order) -> samples with each input's exact shape and dtype
    (token ids stay int64)."""
    if isinstance(item, np.ndarray) or not isinstance(item, (Mapping, list, tuple)):
        item = [item]
    if not isinstance(item, Mapping):
        item = dict(zip(names, item))
    missing = [n for n in names if n not in item]
    if missing:
        raise QuantizationError(f"calibration sample lacks inputs {missing} (it has {sorted(item)}); "
                                f"name its arrays after the model's inputs {names}")
    try:
        stacks = {n: np.asarray(item[n], types[n].dtype).reshape(-1, *types[n].shape) for n in names}
    except (TypeError, ValueError) as exc:
        shapes = {n: list(types[n].shape) for n in names}
        raise QuantizationError(f"calibration data does not fit the inputs {shapes} (samples stacked on a "
                                f"leading axis): {exc}") from None
    count = min(len(a) for a in stacks.values())
    return [{n: a[i] for n, a in stacks.items()} for i in range(count)]


class Observer:
    """Collects one tensor's values; ``range()`` gives the clipping range its method picks."""

    def __init__(self, method: str = "minmax") -> None:
        if method not in OBSERVERS:
            raise QuantizationError(f"unknown observer {method!r}; use one of {', '.join(OBSERVERS)}")
        self.method = method
        self.lo, self.hi = np.inf, -np.inf
        self._kept: list[np.ndarray] = []
        self._count = 0

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float32).reshape(-1)
        self.lo, self.hi = min(self.lo, float(x.min())), max(self.hi, float(x.max()))
        if self.method != "minmax" and self._count < KEEP:
            stride = max(1, x.size // max(1, KEEP // 64))
            self._kept.append(x[::stride])
            self._count += self._kept[-1].size

    def range(self) -> ActRange:
        if self.method == "minmax" or not self._kept:
            return ActRange(self.lo, self.hi)
        v = np.concatenate(self._kept)
        if self.method == "percentile":
            return ActRange(float(np.percentile(v, 0.01)), float(np.percentile(v, 99.99)))
        return _mse_range(v, self.lo, self.hi)


def _mse_range(v: np.ndarray, lo: float, hi: float) -> ActRange:
    """Shrink [lo, hi] (fractions 0.3..1) to the range whose 7-bit quantization error is lowest."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    best, best_err = ActRange(lo, hi), np.inf
    for f in np.linspace(0.3, 1.0, 36):
        a, b = lo * f, hi * f
        scale = (b - a) / 127 if b > a else 1.0
        zp = np.rint(-a / scale)
        q = np.clip(np.rint(v / scale) + zp, 0, 127)
        err = float(np.mean(((q - zp) * scale - v) ** 2))
        if err < best_err:
            best, best_err = ActRange(a, b), err
    return best


def probe_values(graph: Graph, values: Sequence[Value], samples: Sequence[Sample],
                 progress: Progress | None = None) -> Iterable[dict[str, np.ndarray]]:
    """Run the float graph with ``values`` as extra outputs; yields {value name: array} per sample."""
    from .runner import Runner

    probe = graph.clone()
    inputs = {id(v) for v in graph.inputs}
    extra = [v for v in dict.fromkeys(values) if id(v) not in inputs]
    probe.outputs = list(probe.outputs) + extra
    probe.meta["output_names"] = None
    with Runner(probe) as run:
        for i, s in enumerate(samples, 1):
            out = run(s)
            row = {v.name: out[v.name] for v in extra}
            row.update({v.name: s[v.name] for v in values if id(v) in inputs})
            if progress is not None and (i == len(samples) or i % max(1, len(samples) // 10) == 0):
                progress(f"calibrate [{i}/{len(samples)}]")
            yield row


def calibrate(graph: Graph, values: Sequence[Value], samples: Sequence[Sample], method: str = "minmax",
              progress: Progress | None = None) -> dict[str, ActRange]:
    """Activation range of each value over the samples, by ``method``."""
    obs = {v.name: Observer(method) for v in values}
    for row in probe_values(graph, values, samples, progress):
        for name, arr in row.items():
            obs[name].update(arr)
    return {name: o.range() for name, o in obs.items()}
