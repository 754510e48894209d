"""A release's ``golden.json`` as the install self-test reads it from the slot
(``ota.golden.release_vectors``: the payload that carries golden vectors too large for the signed header),
each vector decoded into its input and output tensors (``decode_vector``). Its sha256 is under the
signature, so a hostile file is a key holder's mistake rather than a remote attacker's: still a typed
``FormatError`` (the self-test's ``SelfTestFailed``), never another exception, a hang or an allocation
past a bound of its size.

Input: the file's bytes."""

from __future__ import annotations

from collections.abc import Callable

from ..engine import Target
from ..mutators import json_mutator
from .mqtt_messages import scratch

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("ota.golden", "ota.crypto", "runtime_wasm.schema")


def setup() -> Callable[[bytes], None]:
    from ota.golden import GOLDEN_FILE, decode_vector, release_vectors

    slot = scratch("fuzz-golden-")

    def one(data: bytes) -> None:
        (slot / GOLDEN_FILE).write_bytes(data)
        for vector in release_vectors(slot, ()):
            decode_vector(vector)

    return one


def target() -> Target:
    from ota.errors import FormatError

    return Target("golden_json", "device", setup, (FormatError,), INSTRUMENT, json_mutator)


def seeds() -> list[bytes]:
    """``golden.json`` as ``make_manifest`` writes it (canonical JSON of the vector list): the ``http_api``
    harness's model's two default vectors, and vectors of every dtype family a model may take or give."""
    import numpy as np

    from cuvil_edge.signing import golden_vectors
    from ota.crypto import canonical_bytes
    from ota.golden import encode_vector

    from .http_api import model_dir

    model = model_dir(scratch("fuzz-golden-seed-") / "model")
    typed = {f"t{i}": a for i, a in enumerate([
        np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, -2], np.int64), np.array([True, False]),
        np.arange(4, dtype=np.uint8), np.array([0.5], np.float16), np.zeros((0, 3), np.float32),
        np.float64(2.0)])}
    return [canonical_bytes(golden_vectors(model)), canonical_bytes([encode_vector(typed, typed)]),
            canonical_bytes([])]
