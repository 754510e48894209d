"""Resize's antialias (the linear/cubic filter stretched by 1/scale when downsampling, K taps per axis)
and linear tf_crop_and_resize (a box sampled, the extrapolation value written past the input): small
graphs compiled, run in wasmtime and compared with onnxruntime (and the ONNX reference for axes)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import UnsupportedOperator
from tests.support.ort_check import check_with_ort, make_model

N = helper.make_node
check = partial(check_with_ort, opset=19, rtol=1e-5, atol=1e-5)
#: coordinate modes where onnxruntime and the ONNX reference agree on antialias (align_corners: they
#: differ on a non-integer output size, and we follow onnxruntime, as without antialias)
COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "asymmetric")


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def resize(inits: dict[str, np.ndarray], **attrs) -> object:
    """A Resize node reading the given roi / scales / sizes initializers."""
    ins = ["x", *(k if k in inits else "" for k in ("roi", "scales", "sizes"))]
    return N("Resize", ins, ["y"], **attrs)


#: (x shape, scales or sizes, extra attrs): down by fractional and large factors, one axis up and the
#: other down, by sizes, exclude_outside and another cubic coefficient, and a 2-D input (onnxruntime
#: runs cubic on 2-D and 4-D only)
DOWNS = [
    ((1, 2, 9, 11), {"scales": [1, 1, 0.6, 0.35]}, {}),
    ((1, 2, 9, 11), {"scales": [1, 1, 1.5, 0.45]}, {}),
    ((1, 1, 16, 13), {"scales": [1, 1, 0.2, 0.8]}, {"exclude_outside": 1}),
    ((1, 2, 9, 11), {"sizes": [1, 2, 4, 3]}, {"cubic_coeff_a": -0.5}),
    ((10, 7), {"scales": [0.5, 0.7]}, {"exclude_outside": 1}),
]


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("i", range(len(DOWNS)))
def test_antialias_downsample(mode: str, coord: str, i: int) -> None:
    shape, params, attrs = DOWNS[i]
    if mode == "linear":
        attrs = {k: v for k, v in attrs.items() if k != "cubic_coeff_a"}
    inits = {k: np.array(v, np.float32 if k == "scales" else np.int64) for k, v in params.items()}
    node = resize(inits, mode=mode, antialias=1, coordinate_transformation_mode=coord, **attrs)
    assert check([node], {"x": rand(*shape)}, ["y"], inits=inits).kernels == {"f32-resize-antialias-4"}


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_upsample_is_the_plain_filter(mode: str) -> None:
    """Nothing is downsampled: the filter keeps its width, so the plain kernels run."""
    inits = {"scales": np.array([1, 1, 1.5, 2], np.float32)}
    used = check([resize(inits, mode=mode, antialias=1)], {"x": rand(1, 2, 5, 6)}, ["y"], inits=inits).kernels
    assert used == {"f32-resize-bilinear-4" if mode == "linear" else "f32-resize-bicubic-4"}


def test_antialias_with_axes_matches_the_onnx_reference() -> None:
    """Opset-18 ``axes`` in reversed order, sizes below the input: against the spec's evaluator."""
    x = rand(1, 3, 12, 10, seed=3)
    inits = {"sizes": np.array([4, 5], np.int64)}
    node = resize(inits, mode="cubic", antialias=1, axes=[3, 2])
    ref = ReferenceEvaluator(make_model([node], {"x": x}, ["y"], inits, 19)).run(None, {"x": x})[0]
    with CuvilModel.load(make_model([node], {"x": x}, {"y": ref}, inits, 19)).optimize(
            targets=[Target()]) as cm:
        got = cm.predict({"x": x})["y"]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


CROPS = [  # roi (starts then ends, as fractions of the input), extrapolation_value, sizes, axes
    ([0, 0, 0.2, 0.1, 1, 1, 0.8, 0.9], 0.0, [1, 2, 6, 9], None),
    ([0, 0, -0.3, 0.4, 1, 1, 1.2, 1.5], 0.0, [1, 2, 8, 5], None),
    ([0, 0, -0.3, 0.4, 1, 1, 1.2, 1.5], 2.5, [1, 2, 1, 5], None),
    ([0.4, -0.3, 1.5, 1.2], -1.0, [5, 8], [3, 2]),
]


@pytest.mark.parametrize("i", range(len(CROPS)))
def test_linear_tf_crop_and_resize(i: int) -> None:
    """The box inside and past the input: past it every output is the extrapolation value, 0 included."""
    roi, value, sizes, axes = CROPS[i]
    inits = {"roi": np.array(roi, np.float32), "sizes": np.array(sizes, np.int64)}
    node = resize(inits, mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                  extrapolation_value=value, **({} if axes is None else {"axes": axes}))
    checked = check([node], {"x": rand(1, 2, 5, 7) + 10}, ["y"], inits=inits)
    assert checked.kernels == {"f32-resize-bilinear-4"}
    assert (np.count_nonzero(checked.got[0]["y"] == value) > 0) == (i > 0)


def test_antialias_tf_crop_and_resize() -> None:
    """A box shrunk with the stretched filter, extrapolated past the input."""
    inits = {"roi": np.array([0, 0, -0.2, 0.1, 1, 1, 1.1, 0.9], np.float32),
             "sizes": np.array([1, 2, 4, 3], np.int64)}
    node = resize(inits, mode="linear", antialias=1, coordinate_transformation_mode="tf_crop_and_resize",
                  extrapolation_value=3.0)
    assert check([node], {"x": rand(1, 2, 11, 13)}, ["y"], inits=inits).kernels == {"f32-resize-antialias-4"}


@pytest.mark.parametrize("attrs", [{"antialias": 1},
                                   {"coordinate_transformation_mode": "tf_crop_and_resize"}])
def test_nearest_antialias_and_crop_are_refused(attrs: dict) -> None:
    """The spec defines antialias for linear and cubic only (its reference raises on nearest); a nearest
    crop is not implemented."""
    x = rand(1, 1, 4, 4)
    inits = {"roi": np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32),
             "scales": np.array([1, 1, 0.5, 0.5], np.float32)}
    node = N("Resize", ["x", "roi", "scales"], ["y"], name="r", mode="nearest", **attrs)
    with pytest.raises(UnsupportedOperator, match="'Resize' at node 'r'.*mode='nearest'"):
        CuvilModel.load(make_model([node], {"x": x}, {"y": x[..., ::2, ::2]}, inits, 19))
