"""NHWC -> NCHW at import: every TFLite tensor is held as an IR value plus the permutation that lays it
out (``ir = np.transpose(tflite, perm)``). Spatial ops ask for NCHW, layout-agnostic ops (elementwise,
concat, pad, slice, reduce, softmax) keep what they get with their axes remapped, and only ops that
depend on element order (reshape, fully connected, matmul) ask for the TFLite order back; a change
that only moves size-1 dims is a reshape, so flatten-after-global-pool needs no transpose."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import ShapeError
from ...ir.graph import Value

Perm = tuple[int, ...]
#: NHWC tensor -> NCHW value
NCHW: Perm = (0, 3, 1, 2)


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def inverse(perm: Sequence[int]) -> Perm:
    if sorted(perm) != list(range(len(perm))):
        raise ShapeError(f"{list(perm)} is not a permutation")
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def compose(first: Sequence[int], then: Sequence[int]) -> Perm:
    """``x.transpose(first).transpose(then) == x.transpose(compose(first, then))``."""
    if len(first) != len(then):
        raise ShapeError(f"layouts {tuple(first)} and {tuple(then)} are of different ranks")
    return tuple(first[t] for t in then)


def dropped(perm: Sequence[int], axes: Sequence[int]) -> Perm:
    """The layout left when the TFLite ``axes`` are removed (squeeze, reduce without keepdims)."""
    gone = set(axes)
    kept = [p for p in perm if p not in gone]
    rank = sorted(kept)
    return tuple(rank.index(p) for p in kept)


def is_reshape(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Whether transposing ``shape`` by ``perm`` keeps every element in place (only size-1 dims move)."""
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


@dataclass(frozen=True)
class Laid:
    """A TFLite tensor as held in the IR: ``value == np.transpose(tensor, perm)``. A flatten ([N, ...] ->
    [N, K]) of a re-laid tensor keeps the IR element order instead (``flat_of``: the tensor flattened):
    a FULLY_CONNECTED reading it permutes its weight columns (``flat_order``), anything else gets the
    TFLite order back first."""

    value: Value
    perm: Perm
    flat_of: Laid | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's TFLite (unpermuted) shape."""
        s = self.value.type.shape
        return tuple(s[i] for i in inverse(self.perm))

    def ir_axis(self, axis: int) -> int:
        """Where TFLite axis ``axis`` (negative counts from the end) lives in the IR value."""
        rank = len(self.perm)
        if not -rank <= axis < rank:
            raise ShapeError(f"axis {axis} is outside a rank-{rank} tensor")
        return self.perm.index(axis % rank)


def keeps_order_flat(src: Laid, shape: Sequence[int]) -> bool:
    """Whether reshaping ``src`` to ``shape`` is a flatten worth keeping in IR order: to [N, K] from a
    batch-first layout whose TFLite order would take a real transpose."""
    return (len(shape) == 2 and len(src.perm) >= 3 and src.perm[0] == 0 and shape[0] == src.shape[0]
            and not is_reshape(src.value.type.shape, inverse(src.perm)))


def flat_order(src: Laid) -> np.ndarray:
    """For a flatten kept in IR order: the TFLite position (within a row) of each IR element."""
    index = np.arange(int(np.prod(src.shape[1:]))).reshape(src.shape[1:])
    return index.transpose([p - 1 for p in src.perm[1:]]).reshape(-1)
