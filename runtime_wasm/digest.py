"""Digests of a model's weights, computed while they are read into linear memory.

Every spec carries the flat ``weights_sha256``: one sequential pass, ~1.4 GB/s on one core, which was the
floor of a large model's load (180 MB encoder: ~0.13 s of 0.16). Specs built since also carry a tree hash,
``weights_tree_sha256``: the sha256 of a domain tag, the chunk size, the total size and every chunk's own
sha256 in order. It binds exactly the same bytes (a changed, moved, added or dropped chunk changes the
root), and its chunks hash on every core at once. A runtime checks the tree when the spec has one, else
the flat hash; runtimes that predate the tree ignore it and check the flat hash.
"""

from __future__ import annotations

import hashlib
import queue
import struct
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from .errors import SpecError

#: what the root hashes first: a root can never be mistaken for the digest of any other structure
TREE_TAG = b"cuvil-weights-tree/1\0"
#: the chunk size the compiler writes (also the loader's read step, so no chunk spans two reads)
TREE_CHUNK = 4 << 20
#: chunk sizes a spec may name: small chunks mean many digests, large ones too little parallelism
TREE_CHUNK_MIN, TREE_CHUNK_MAX = 64 << 10, 64 << 20
#: most hashing threads: beyond this the reads, not the hash, bound the load
MAX_HASH_THREADS = 4


def tree_root(chunk: int, size: int, digests: Iterable[bytes]) -> str:
    h = hashlib.sha256(TREE_TAG)
    h.update(struct.pack("<QQ", chunk, size))
    for d in digests:
        h.update(d)
    return h.hexdigest()


def check_tree_chunk(chunk: int) -> None:
    if not isinstance(chunk, int) or not TREE_CHUNK_MIN <= chunk <= TREE_CHUNK_MAX or chunk & (chunk - 1):
        raise SpecError(f"weights_tree_chunk must be a power of two in {TREE_CHUNK_MIN}..{TREE_CHUNK_MAX}, "
                        f"got {chunk!r}")


class FlatDigest:
    """The flat sha256 of the chunks given, in order, on a thread of its own while the next ones are read
    in (hashlib drops the GIL, so hash and reads overlap)."""

    def __init__(self, expected: str, step: int) -> None:
        self.expected, self.step = expected, step
        self._sha = hashlib.sha256()
        self._chunks: queue.SimpleQueue[np.ndarray | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, daemon=True, name="cuvil-weights-sha256")
        self._thread.start()

    def _work(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            self._sha.update(chunk)

    def update(self, chunk: np.ndarray) -> None:
        self._chunks.put(chunk)

    def check(self) -> None:
        self.close()
        if self._sha.hexdigest() != self.expected:
            raise SpecError("weights do not match their recorded sha256")

    def close(self) -> None:
        if self._thread.is_alive():
            self._chunks.put(None)
            self._thread.join()

    def __enter__(self) -> FlatDigest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TreeDigest:
    """The tree root of the chunks given, each hashed as soon as it is given on a small pool of threads;
    every chunk but the last must be ``step`` bytes."""

    def __init__(self, expected: str, step: int, size: int, threads: int) -> None:
        check_tree_chunk(step)
        self.expected, self.step, self._size = expected, step, size
        self._pool = ThreadPoolExecutor(max(1, min(threads, MAX_HASH_THREADS)),
                                        thread_name_prefix="cuvil-weights-sha256")
        self._digests: list[Future[bytes]] = []

    def update(self, chunk: np.ndarray) -> None:
        self._digests.append(self._pool.submit(_sha256, chunk))

    def hexdigest(self) -> str:
        digests = [f.result() for f in self._digests]
        self.close()
        return tree_root(self.step, self._size, digests)

    def check(self) -> None:
        if self.hexdigest() != self.expected:
            raise SpecError("weights do not match their recorded tree sha256")

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> TreeDigest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sha256(chunk: np.ndarray) -> bytes:
    return hashlib.sha256(chunk).digest()


def weights_tree_sha256(weights: bytes | np.ndarray, chunk: int = TREE_CHUNK, threads: int = 1) -> str:
    """The tree root of weights held in memory (what the compiler records)."""
    view = np.frombuffer(weights, np.uint8) if not isinstance(weights, np.ndarray) else weights.view(np.uint8)
    view = view.reshape(-1)
    with TreeDigest("", chunk, view.nbytes, threads) as tree:
        for start in range(0, view.nbytes, chunk):
            tree.update(view[start:start + chunk])
        return tree.hexdigest()
