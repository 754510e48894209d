"""Sparse constant tensors (TFLite's ``SparsityParameters``: per-dimension DENSE or CSR metadata, in a
traversal order, with optional blocking) made dense at read time, as LiteRT's DEQUANTIZE of a sparse
weight does. MediaPipe ships pruned models this way (``pose_detection``, ``face_detection_full_range_
sparse``). The walk is vectorised level by level: each path through the metadata tree is a row."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...errors import ModelFormatError
from ...ir.limits import charge

DENSE = 0


def _index_vector(kind: int, table: Any) -> np.ndarray:
    import tflite

    if table is None or kind not in (1, 2, 3):
        raise ModelFormatError(f"sparse index vector of unknown type {kind}")
    vec = {1: tflite.Int32Vector, 2: tflite.Uint16Vector, 3: tflite.Uint8Vector}[kind]()
    vec.Init(table.Bytes, table.Pos)
    return np.zeros(0, np.int64) if vec.ValuesIsNone() else vec.ValuesAsNumpy().astype(np.int64)


def densify(values: np.ndarray, shape: tuple[int, ...], sparsity: Any, name: str) -> np.ndarray:
    """The dense [shape] array whose non-zeros ``values`` lists in traversal order."""
    n = len(shape)
    order = [int(x) for x in sparsity.TraversalOrderAsNumpy()] if not sparsity.TraversalOrderIsNone() \
        else list(range(n))
    block_map = [] if sparsity.BlockMapIsNone() else [int(x) for x in sparsity.BlockMapAsNumpy()]
    if sorted(order) != list(range(n + len(block_map))) or sparsity.DimMetadataLength() != len(order) or \
            any(not 0 <= d < n for d in block_map) or any(d < 1 for d in shape):
        raise ModelFormatError(f"tensor {name!r}: inconsistent sparsity parameters")
    # the walk holds an int64 coordinate per level and path (at most one path per dense element)
    charge(math.prod(shape) * (values.itemsize + 8 * (len(order) + 1)), f"sparse tensor {name!r}")
    pos = np.zeros(1, np.int64)  # per path: its position at this level (a segment index for CSR)
    coords: list[np.ndarray] = []  # per level: each path's index along the dimension order[level]
    sizes = []
    for level in range(len(order)):
        dm = sparsity.DimMetadata(level)
        if dm.Format() == DENSE:
            size, d = int(dm.DenseSize()), order[level]
            if not 1 <= size <= shape[d if d < n else block_map[d - n]]:
                raise ModelFormatError(f"tensor {name!r}: dense size {size} for a dim of {shape}")
            idx = np.tile(np.arange(size, dtype=np.int64), len(pos))
            coords = [np.repeat(c, size) for c in coords] + [idx]
            pos = np.repeat(pos, size) * size + idx
        else:
            seg = _index_vector(dm.ArraySegmentsType(), dm.ArraySegments())
            ind = _index_vector(dm.ArrayIndicesType(), dm.ArrayIndices())
            if pos.size and (pos.max() + 1 >= seg.size or seg[-1] > ind.size or np.any(np.diff(seg) < 0)):
                raise ModelFormatError(f"tensor {name!r}: sparse segments out of range")
            starts, counts = seg[pos], seg[pos + 1] - seg[pos]
            new = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
            coords = [np.repeat(c, counts) for c in coords] + [ind[new]]
            pos, size = new, None
        sizes.append(size)
    if len(pos) != values.size:
        raise ModelFormatError(f"tensor {name!r}: {values.size} sparse values for {len(pos)} positions")
    at = {d: coords[level] for level, d in enumerate(order)}
    full = []
    for d in range(n):
        c = at[d]
        if d in block_map:
            k = n + block_map.index(d)
            block = sizes[order.index(k)]
            if block is None:
                raise ModelFormatError(f"tensor {name!r}: a sparse block dimension must be dense")
            c = c * block + at[k]
        if c.size and (c.min() < 0 or c.max() >= shape[d]):
            raise ModelFormatError(f"tensor {name!r}: sparse index out of range for shape {shape}")
        full.append(c)
    dense = np.zeros(shape, values.dtype)
    dense[tuple(full)] = values
    return dense
