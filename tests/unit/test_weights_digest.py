"""The weights' tree hash (runtime_wasm.digest): it binds the same bytes as the flat sha256, its spec
fields round-trip and are checked, and its hashing threads end on every path."""

from __future__ import annotations

import hashlib
import json
import struct
import threading

import numpy as np
import pytest

from runtime_wasm import SpecError
from runtime_wasm.digest import PIECE, TREE_CHUNK_MIN, TREE_TAG, check_tree, weights_tree_sha256
from runtime_wasm.spec import ModelSpec, TensorSpec

CHUNK = TREE_CHUNK_MIN
DATA = np.random.default_rng(0).integers(0, 256, 3 * CHUNK + 123, dtype=np.uint8).tobytes()


def by_hand(data: bytes, chunk: int) -> str:
    """The documented construction, written out: tag, chunk, size, each chunk's digest."""
    h = hashlib.sha256(TREE_TAG + struct.pack("<QQ", chunk, len(data)))
    for i in range(0, len(data), chunk):
        h.update(hashlib.sha256(data[i:i + chunk]).digest())
    return h.hexdigest()


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("size", [0, 1, CHUNK, 3 * CHUNK + 123])
def test_the_root_is_the_documented_construction(size, threads):
    assert weights_tree_sha256(DATA[:size], CHUNK, threads) == by_hand(DATA[:size], CHUNK)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_chunks_of_many_pieces_filled_on_several_threads(threads):
    """Chunks larger than a piece are filled and hashed piece by piece, each thread taking whole chunks:
    the view ends up holding the source and the root is the documented one."""
    chunk = 4 * PIECE
    src = np.random.default_rng(1).integers(0, 256, 3 * chunk + PIECE + 7, dtype=np.uint8)
    dst = np.zeros_like(src)
    seen: list[int] = []

    def fill(piece: np.ndarray, start: int) -> None:
        seen.append(start)
        np.copyto(piece, src[start:start + piece.nbytes])

    check_tree(by_hand(src.tobytes(), chunk), chunk, dst, threads, fill)
    np.testing.assert_array_equal(dst, src)
    assert sorted(seen) == list(range(0, src.nbytes, PIECE))


def test_any_change_to_the_bytes_changes_the_root():
    root = weights_tree_sha256(DATA, CHUNK)
    flipped = bytearray(DATA)
    flipped[2 * CHUNK + 7] ^= 1
    swapped = DATA[CHUNK:2 * CHUNK] + DATA[:CHUNK] + DATA[2 * CHUNK:]
    changed = {weights_tree_sha256(bytes(flipped), CHUNK), weights_tree_sha256(swapped, CHUNK),
               weights_tree_sha256(DATA[:-1], CHUNK), weights_tree_sha256(DATA + b"\0", CHUNK),
               weights_tree_sha256(DATA, 2 * CHUNK)}
    assert root not in changed and len(changed) == 5
    # a root commits to chunk and size: the same digest list under another header is another root
    assert root != hashlib.sha256(b"".join(hashlib.sha256(DATA[i:i + CHUNK]).digest()
                                           for i in range(0, len(DATA), CHUNK))).hexdigest()


def test_a_mismatch_is_refused_and_the_threads_end():
    view = np.frombuffer(DATA, np.uint8)
    with pytest.raises(SpecError, match="tree sha256"):
        check_tree("0" * 64, CHUNK, view, 4)

    def fill(piece: np.ndarray, start: int) -> None:  # a read that fails part way
        if start >= 2 * CHUNK:
            raise RuntimeError("read failed")
        piece[:] = view[start:start + piece.nbytes]

    with pytest.raises(RuntimeError, match="read failed"):
        check_tree(weights_tree_sha256(DATA, CHUNK), CHUNK, np.zeros_like(view), 4, fill)
    assert not [t for t in threading.enumerate() if t.name.startswith("cuvil-weights-sha256")]


def spec(**kw) -> ModelSpec:
    x = TensorSpec("x", "float32", (1,), 0)
    return ModelSpec("m", (x,), (x,), len(DATA), 4, weights_sha256=hashlib.sha256(DATA).hexdigest(), **kw)


def test_spec_fields_round_trip_and_are_absent_without_a_tree():
    tree = spec(weights_tree_sha256=weights_tree_sha256(DATA, CHUNK), weights_tree_chunk=CHUNK)
    assert ModelSpec.from_json(tree.to_json()) == tree
    plain = spec()
    assert "weights_tree" not in plain.to_json()
    assert ModelSpec.from_json(plain.to_json()) == plain


@pytest.mark.parametrize("fields, match", [
    ({"weights_tree_sha256": "ab" * 32, "weights_tree_chunk": 0}, "power of two"),
    ({"weights_tree_sha256": "ab" * 32, "weights_tree_chunk": CHUNK + 1}, "power of two"),
    ({"weights_tree_sha256": "ab" * 32, "weights_tree_chunk": CHUNK // 2}, "power of two"),
    ({"weights_tree_sha256": "AB" * 32, "weights_tree_chunk": CHUNK}, "not a sha256"),
    ({"weights_tree_chunk": CHUNK}, "not a sha256"),
])
def test_a_malformed_tree_field_is_a_spec_error(fields, match):
    d = json.loads(spec().to_json())
    d.update(fields)
    with pytest.raises(SpecError, match=match):
        ModelSpec.from_json(json.dumps(d))
