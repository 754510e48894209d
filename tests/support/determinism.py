"""Outputs as bits, and a model directory's module run under a deterministic engine with chosen CPU features
off (``run_under``): what determinism mode's tests compare across variants and hosts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import wasmtime

from runtime_wasm import EngineConfig, WasmModel
from runtime_wasm.loader import read_model_dir


def as_bits(outputs: dict[str, np.ndarray]) -> dict[str, bytes]:
    return {k: np.ascontiguousarray(v).tobytes() for k, v in outputs.items()}


def run_under(model_dir: Path, variant: str, disabled: tuple[str, ...], feeds) -> list[dict[str, bytes]]:
    """The module of ``variant`` compiled by a deterministic engine with ``disabled`` CPU features off."""
    spec, chosen, wasm, weights = read_model_dir(model_dir, variant)
    cfg = EngineConfig(chosen.tier, deterministic=True).build()
    for flag in disabled:
        cfg.cranelift_flag_set(flag, "false")
    engine = wasmtime.Engine(cfg)
    with WasmModel(engine, wasmtime.Module(engine, wasm), spec, weights) as model:
        return [as_bits(model.predict(f)) for f in feeds]
