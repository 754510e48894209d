"""A model directory's ``model.json`` as the device runtime reads it (``ModelSpec.from_json``) and what it
does next with a spec before any module runs: pick a variant for the host, size each tensor and lay it
out as a view of the arena (``WasmModel``'s views, here over a plain buffer), check inputs against the
signature and shape the outputs for the caller.

Input: the ``model.json`` bytes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..engine import Target
from ..mutators import json_mutator

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("runtime_wasm.spec", "runtime_wasm.schema", "runtime_wasm.variants")
#: arenas up to this size are laid out (a spec may declare any int64 size; the views are what matter)
ARENA_LIMIT = 1 << 20


def setup() -> Callable[[bytes], None]:
    import numpy as np

    from runtime_wasm.errors import NoUsableVariant
    from runtime_wasm.instance import check_inputs
    from runtime_wasm.spec import ModelSpec, caller_outputs, storage_dtype
    from runtime_wasm.variants import HostProbes, select_variant

    host = HostProbes("x86", relaxed_simd=True)

    def one(data: bytes) -> None:
        spec = ModelSpec.from_json(data)
        for deterministic in (False, True):
            with contextlib.suppress(NoUsableVariant):
                select_variant(spec.variants, host, deterministic=deterministic)
        sizes = [t.nbytes for t in (*spec.inputs, *spec.outputs, *spec.states)]
        if spec.arena_size > ARENA_LIMIT or max(sizes, default=0) > ARENA_LIMIT:
            return
        arena = np.zeros(spec.arena_size, np.uint8)

        def view(t):  # type: ignore[no-untyped-def]  # as the instance views linear memory
            return arena[t.offset:t.offset + t.nbytes].view(storage_dtype(t.dtype)).reshape(t.shape)

        check_inputs(spec.inputs, [view(t).copy() for t in spec.inputs])
        caller_outputs(spec.outputs, {t.name: view(t) for t in spec.outputs})
        for s in spec.states:
            view(s)

    return one


def target() -> Target:
    from runtime_wasm.errors import NoUsableVariant, SpecError

    return Target("model_json", "device", setup, (SpecError, NoUsableVariant), INSTRUMENT, json_mutator)


def seeds() -> list[bytes]:
    """Specs as ``ModelSpec.to_json`` writes them: the ``http_api`` harness's model, a stateful, a
    threaded one with a weights tree, and one with a string input and a string output with its length."""
    import hashlib
    import json
    import tempfile
    from pathlib import Path

    from runtime_wasm.spec import LENGTH_SUFFIX, ModelSpec, StateSpec, TensorSpec, VariantSpec

    from .http_api import model_dir

    with tempfile.TemporaryDirectory(prefix="fuzz-model-json-") as tmp:
        text = (model_dir(Path(tmp) / "m") / "model.json").read_text()
    base = ModelSpec.from_json(text)
    arm = VariantSpec("f32-wasmsimd-arm", "simd128", "arm", "arm.wasm", "0" * 64, 10)
    stateful = ModelSpec("s", base.inputs, base.outputs, weights_size=8, arena_size=64, variants=(arm,),
                         states=(StateSpec("h", "float32", (2,), 56, 0),))
    threaded = ModelSpec("t", base.inputs, base.outputs, 0, 64, base.variants, hashlib.sha256().hexdigest(),
                         threads=4, weights_tree_sha256=hashlib.sha256(b"tree").hexdigest(),
                         weights_tree_chunk=1 << 16, extra={"nodes": [{"op": "Add"}], "profiles": []})
    words = (TensorSpec("words", "S8", (2, 3), 32), TensorSpec("words" + LENGTH_SUFFIX, "int64", (), 80))
    strings = ModelSpec("str", (TensorSpec("text", "S16", (2,), 0),), words, 0, 96, base.variants)
    return [text.encode(), *(s.to_json().encode() for s in (stateful, threaded, strings)),
            json.dumps({**json.loads(text), "newer_field": {"kept": True}}).encode()]
