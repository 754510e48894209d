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
import itertools
import queue
import struct
import threading
from collections.abc import Callable, Iterable

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


#: a piece read (or copied) and hashed at a time inside a chunk: small enough to be hashed while still in the
#: core's own cache after it was written
PIECE = 256 << 10

#: fills a piece of the destination (a view) from wherever the bytes come, given the piece's offset
Fill = Callable[[np.ndarray, int], None]


def chunk_digests(view: np.ndarray, chunk: int, threads: int, fill: Fill | None = None) -> list[bytes]:
    """Every chunk's sha256 of ``view`` (filled first by ``fill`` when given), on ``threads`` threads, the
    caller one of them. Each takes the next chunk from a shared counter, then fills and hashes it piece by
    piece: reads and hashes run on every core at once, no thread waits for a chunk another must read, and
    each piece is hashed from cache. The first error stops every thread and is raised here."""
    count = -(-view.nbytes // chunk)
    digests = [b""] * count
    order = itertools.count()  # next() on it is atomic under the GIL
    errors: list[BaseException] = []

    def work() -> None:
        try:
            while not errors and (i := next(order)) < count:
                sha = hashlib.sha256()
                end = min((i + 1) * chunk, view.nbytes)
                for start in range(i * chunk, end, PIECE):
                    piece = view[start:min(start + PIECE, end)]
                    if fill is not None:
                        fill(piece, start)
                    sha.update(piece)
                digests[i] = sha.digest()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
            errors.append(exc)

    helpers = [threading.Thread(target=work, daemon=True, name=f"cuvil-weights-sha256-{k}")
               for k in range(min(threads, MAX_HASH_THREADS, count) - 1)]
    try:
        for t in helpers:
            t.start()
        work()
    except BaseException as exc:  # a thread that would not start, an interrupt: the helpers stop too
        errors.append(exc)
        raise
    finally:  # however the caller leaves, no helper still writes into the view after it returns
        for t in helpers:
            if t.ident is not None:
                t.join()
    if errors:
        raise errors[0]
    return digests


def check_tree(expected: str, chunk: int, view: np.ndarray, threads: int, fill: Fill | None = None) -> None:
    """Fill ``view`` (when ``fill`` is given) and check its tree root against ``expected``."""
    check_tree_chunk(chunk)
    if tree_root(chunk, view.nbytes, chunk_digests(view, chunk, threads, fill)) != expected:
        raise SpecError("weights do not match their recorded tree sha256")


def weights_tree_sha256(weights: bytes | np.ndarray, chunk: int = TREE_CHUNK, threads: int = 1) -> str:
    """The tree root of weights held in memory (what the compiler records)."""
    view = np.frombuffer(weights, np.uint8) if not isinstance(weights, np.ndarray) else weights.view(np.uint8)
    return tree_root(chunk, view.nbytes, chunk_digests(view.reshape(-1), chunk, threads))
