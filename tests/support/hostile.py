"""Hostile feeds (+-Inf, denormals, huge values, NaNs sprinkled into float inputs) for the determinism
tests here and on the emulated arm64 host."""

from __future__ import annotations

import numpy as np

from cuvil_edge.oracle import random_feeds


def hostile_inputs(spec, seed: int) -> list[dict[str, np.ndarray]]:
    """Random feeds; the same with +-Inf, denormals and huge values sprinkled into float inputs (outputs
    stay partly finite, so real numbers are compared); and the same again with NaNs too."""
    plain = random_feeds(spec.inputs, np.random.default_rng(seed))
    nonfinite = np.array([np.inf, -np.inf, 1e-42, -1e-45, 3e38, -3e38], np.float32)
    with_nan = np.concatenate([nonfinite, np.array([np.nan, -np.nan], np.float32)])
    feeds = [plain]
    for special in (nonfinite, with_nan):
        rng = np.random.default_rng(seed + 1)
        hostile = {}
        for name, a in plain.items():
            if a.dtype == np.float32:
                a = a.copy()
                flat = a.reshape(-1)
                where = rng.choice(flat.size, size=max(1, flat.size // 16), replace=False)
                flat[where] = rng.choice(special, size=where.size)
            hostile[name] = a
        feeds.append(hostile)
    return feeds
