"""What an import may materialise: every tensor's declared size, and the bytes of the constants the
importer creates itself (folded nodes, ConstantOfShape, Range, Tile of weights, ...) beyond what the file
holds. Both are checked before anything is allocated, so a few-KB model that declares a huge dimension
gets a ``ShapeError`` naming the node and the size instead of driving the host into gigabytes of memory.

The budget grows with the model file (a quantized model's weights are dequantized and re-laid at build
time: several times their size), so ResNet-50, YOLOv8n and BERT-size models import as before.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from ..errors import ShapeError

#: elements one tensor may have (1 GiB of float32); a wasm32 instance holds 4 GiB in all
MAX_ELEMENTS = 1 << 28
#: dimensions one tensor may have (numpy's own limit; the device's model.json takes 32)
MAX_RANK = 64
#: values one node may output, items one sequence may hold (each is a value of its own in the IR)
MAX_OUTPUTS = 1 << 14
#: bytes of constants an import may create from any model, however small its file: the ONNX model zoo's
#: "light" models make their weights with ConstantOfShape (VGG-19: 548 MB from a few KB)
BASE_BUDGET = 1 << 30
#: and per byte of the model file
BUDGET_PER_FILE_BYTE = 8


@dataclass
class _Budget:
    left: int


_budget: ContextVar[_Budget | None] = ContextVar("cuvil_import_budget", default=None)


def check_shape(shape: Sequence[int], what: str = "a tensor") -> int:
    """The element count of ``shape``, or ``ShapeError`` when it is past ``MAX_ELEMENTS`` or has more than
    ``MAX_RANK`` dimensions, or empty with its other dimensions past the limit (an empty shape of 300,000
    dimensions, or of (0, 2**40, 2**40), has no elements, and numpy makes no array of it either)."""
    if len(shape) > MAX_RANK:
        raise ShapeError(f"{what} has {len(shape)} dimensions, over the limit of {MAX_RANK}")
    n = math.prod(int(d) for d in shape)
    if n > MAX_ELEMENTS or math.prod(int(d) for d in shape if d) > MAX_ELEMENTS:  # empty: no array past it
        raise ShapeError(f"{what} of shape {tuple(shape)} has {n} elements, over the limit of {MAX_ELEMENTS}")
    return n


def check_count(n: int, what: str) -> int:
    """``n`` values one node makes (a split, a sequence), or ``ShapeError`` past ``MAX_OUTPUTS``."""
    if n > MAX_OUTPUTS:
        raise ShapeError(f"{what}: {n} outputs, over the limit of {MAX_OUTPUTS}")
    return n


@contextlib.contextmanager
def import_budget(file_bytes: int) -> Iterator[None]:
    """Within it, ``charge`` counts against the budget of one import of a ``file_bytes`` model (nested
    imports, a subgraph's, share the outer one)."""
    if _budget.get() is not None:
        yield
        return
    token = _budget.set(_Budget(BASE_BUDGET + BUDGET_PER_FILE_BYTE * max(0, int(file_bytes))))
    try:
        yield
    finally:
        _budget.reset(token)


def charge(nbytes: int, what: str) -> None:
    """Count ``nbytes`` about to be materialised for ``what`` (a node's name) against the import's
    budget, before they are allocated; outside an import only ``check_shape`` applies."""
    budget = _budget.get()
    if budget is None:
        return
    if nbytes > budget.left:
        raise ShapeError(f"{what}: materialising {nbytes} more bytes of constants exceeds the import's "
                         f"budget ({budget.left} bytes left; see cuvil_edge.ir.limits)")
    budget.left -= nbytes
