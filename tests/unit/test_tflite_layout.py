"""The layout algebra the TFLite importer relies on, checked against numpy transposes."""

from __future__ import annotations

import itertools

import numpy as np

from cuvil_edge.frontend.tflite.layout import NCHW, compose, dropped, inverse, is_reshape


def test_compose_and_inverse_agree_with_numpy() -> None:
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    for a, b in itertools.product(itertools.permutations(range(4)), repeat=2):
        assert np.array_equal(x.transpose(a).transpose(b), x.transpose(compose(a, b)))
        assert np.array_equal(x.transpose(a).transpose(inverse(a)), x)


def test_dropped_is_the_layout_of_what_a_reduction_leaves() -> None:
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)  # NHWC
    ir = x.transpose(NCHW)
    for axes in ([1, 2], [3], [0, 3], [1]):
        want = x.sum(axis=tuple(axes))
        got = ir.sum(axis=tuple(NCHW.index(a) for a in axes))
        assert np.array_equal(got, want.transpose(dropped(NCHW, axes)))


def test_is_reshape_only_when_no_element_moves() -> None:
    assert is_reshape((1, 1, 1, 8), (0, 3, 1, 2))  # NHWC [1,1,1,C] -> NCHW: same memory order
    assert not is_reshape((1, 2, 2, 8), (0, 3, 1, 2))
    x = np.arange(8).reshape(1, 1, 1, 8)
    assert np.array_equal(x.transpose(NCHW).reshape(-1), x.reshape(-1))
