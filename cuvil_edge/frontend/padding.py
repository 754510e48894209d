"""Padding conventions the model formats share, turned into the IR's explicit pads."""

from __future__ import annotations

from collections.abc import Sequence


def same_pads(spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int], odd_at_end: bool = True) -> list[int]:
    """Explicit [begins..., ends...] that give ``ceil(size / stride)`` outputs per spatial dim ("SAME"),
    an odd total split with the extra unit at the end (ONNX ``SAME_UPPER``, TFLite ``SAME``) or, with
    ``odd_at_end=False``, at the start (ONNX ``SAME_LOWER``)."""
    begins, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begins.append(small if odd_at_end else big)
        ends.append(big if odd_at_end else small)
    return begins + ends
