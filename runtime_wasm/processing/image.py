"""Image operations in numpy, as the processing config asks for them: decoding (.npy, binary Netpbm,
or any format with Pillow), Pillow's resampling filters (antialiased when shrinking), center crops."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ProcessingError
from .schema import RESAMPLE


# -- numpy image operations (Pillow's resampling filters, antialiased when shrinking) --------------------
def _bicubic(x: np.ndarray) -> np.ndarray:
    a, x = -0.5, np.abs(x)
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, ((x - 5) * x + 8) * x * a - 4 * a, 0.0))


_FILTERS: dict[str, tuple[float, Callable[[np.ndarray], np.ndarray]]] = {
    "nearest": (0.5, lambda x: ((x >= -0.5) & (x < 0.5)).astype(np.float64)),
    "bilinear": (1.0, lambda x: np.maximum(0.0, 1.0 - np.abs(x))),
    "bicubic": (2.0, _bicubic),
}


#: how far below halfway a resized sample still rounds up: far above float64 summation error (~1e-13 of
#: 255), far below the distance from halfway of a sample that is not one (weights are short fractions)
TIE_SLACK = 1e-7


def resize_weights(n_in: int, n_out: int, resample: str) -> np.ndarray:
    """[n_out, n_in] interpolation matrix: each output sample's filter over the input, widened by the scale
    when shrinking (an antialiasing low-pass) and normalised to sum to one."""
    support, kernel = _FILTERS[resample]
    scale = n_in / n_out
    stretch = max(scale, 1.0)
    centers = (np.arange(n_out) + 0.5) * scale
    x = (np.arange(n_in)[None, :] + 0.5 - centers[:, None]) / stretch
    w = np.where(np.abs(x) <= support, kernel(x), 0.0)
    return w / w.sum(axis=1, keepdims=True)


def resize(image: np.ndarray, height: int, width: int, resample: str = "bilinear") -> np.ndarray:
    """HWC uint8 -> HWC uint8 of ``height`` x ``width``, rounded half up (as Pillow's fixed-point sums
    round) and clipped. Halfway samples are common (a 48 -> 40 shrink gives dozens per image) and a float
    sum lands an ulp either side of one depending on its order (numpy's einsum paths change between
    releases): ``TIE_SLACK`` puts every one of them above, so the result does not depend on that order."""
    if resample not in _FILTERS:
        raise ProcessingError(f"unknown resample {resample!r}; known: {RESAMPLE}")
    x = image.astype(np.float64)
    if image.shape[0] != height:
        x = np.einsum("oh,hwc->owc", resize_weights(image.shape[0], height, resample), x)
    if image.shape[1] != width:
        x = np.einsum("pw,owc->opc", resize_weights(image.shape[1], width, resample), x)
    return np.clip(np.floor(x + (0.5 + TIE_SLACK)), 0, 255).astype(np.uint8)


def center_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    h, w = image.shape[:2]
    if h < height or w < width:
        raise ProcessingError(f"image of {h}x{w} is smaller than the {height}x{width} crop")
    top, left = (h - height) // 2, (w - width) // 2
    return image[top:top + height, left:left + width]


def target_size(hw: tuple[int, int], size: Mapping[str, int]) -> tuple[int, int]:
    """``{height, width}`` as is; ``{shortest_edge: s}``: the short side becomes s, the aspect is kept."""
    if "shortest_edge" not in size:
        return size["height"], size["width"]
    s = size["shortest_edge"]
    h, w = hw
    return (s, int(s * w / h)) if h <= w else (int(s * h / w), s)


def rgb(image: Any) -> np.ndarray:
    x = np.asarray(image)
    if x.dtype != np.uint8:
        raise ProcessingError(f"images are uint8 HWC arrays, got {x.dtype}")
    if x.ndim == 2:
        x = x[:, :, None]
    if x.ndim != 3 or x.shape[2] not in (1, 3, 4) or 0 in x.shape:
        raise ProcessingError(f"images are HWC arrays with 1, 3 or 4 channels, got shape {x.shape}")
    return np.repeat(x, 3, axis=2) if x.shape[2] == 1 else x[:, :, :3]


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """An image file as HWC uint8: .npy and binary PPM/PGM with numpy alone, anything else with Pillow."""
    p = Path(path)
    return decode_image(p.read_bytes(), str(p))


def decode_image(data: bytes, what: str = "image") -> np.ndarray:
    """Encoded image bytes (a request's, or a file's) as an array: .npy (never pickles) and binary PPM/PGM
    with numpy alone, anything else with Pillow; ``ProcessingError`` naming ``what`` when unreadable."""
    if data[:6] == b"\x93NUMPY":
        try:
            return np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:  # truncated, or an object array (pickled)
            raise ProcessingError(f"{what}: unreadable .npy data: {exc}") from None
    if data[:2] in (b"P5", b"P6"):
        return _netpbm(data, what)
    try:
        from PIL import Image as PILImage
    except ImportError:
        raise ProcessingError(f"{what}: only .npy and binary .ppm/.pgm images can be read without Pillow "
                              "(pip install pillow)") from None
    try:
        with PILImage.open(io.BytesIO(data)) as im:
            return np.asarray(im.convert("RGB"))
    except (OSError, ValueError, PILImage.DecompressionBombError) as exc:  # UnidentifiedImageError: OSError
        raise ProcessingError(f"{what}: not a readable image: {exc}") from None


def _netpbm(data: bytes, what: str) -> np.ndarray:
    fields: list[bytes] = []
    pos = 2
    while len(fields) < 3:
        m = re.compile(rb"\s*(#[^\n]*\n\s*)*(\d+)").match(data, pos)
        if m is None:
            raise ProcessingError(f"{what}: malformed PPM/PGM header")
        fields.append(m.group(2))
        pos = m.end()
    w, h, maxval = (int(f) for f in fields)
    channels = 3 if data[:2] == b"P6" else 1
    pixels = data[pos + 1:pos + 1 + w * h * channels]
    if maxval != 255 or len(pixels) != w * h * channels:
        raise ProcessingError(f"{what}: only complete 8-bit PPM/PGM images are read")
    return np.frombuffer(pixels, np.uint8).reshape(h, w, channels)
