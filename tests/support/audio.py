"""The audio models' references outside our compiler: Wav2Vec2's feature extraction written out in numpy,
onnxruntime's probabilities on a keyword spotter's exported graph, and RIFF/WAV bytes of any format tag
(PCM, IEEE float, extensible), for the ``from_pretrained`` audio tests and the HTTP audio inputs."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from cuvil_edge.oracle import ort_session
from tests.support.pretrained import KEYWORDS, WAVE_CLIP


def ref_fit(x: np.ndarray, n: int) -> np.ndarray:
    y = np.zeros(n)
    y[:min(n, len(x))] = x[:n]
    return y


def ref_wav2vec2(x: np.ndarray) -> np.ndarray:
    """``wave_dir``'s input as Wav2Vec2FeatureExtractor makes it: the clip cut to the window, normalised
    over its samples, then padded."""
    x = x[:WAVE_CLIP]
    return ref_fit((x - x.mean()) / np.sqrt(x.var() + 1e-7), WAVE_CLIP).reshape(1, WAVE_CLIP)


def ort_probabilities(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's class probabilities for each one-clip input (repeated to the model's batch)."""
    sess = ort_session(str(path / "model.onnx"))
    name = sess.get_inputs()[0].name
    batch = sess.get_inputs()[0].shape[0]
    out = []
    for x in inputs:
        logits = sess.run(None, {name: np.stack([x] * batch).astype(np.float32)})[0][0]
        p = np.exp(logits - logits.max())
        out.append(p / p.sum())
    return out


def check_against_onnxruntime(path: Path, results: list, inputs: list[np.ndarray]) -> None:
    for p, result in zip(ort_probabilities(path, inputs), results, strict=True):
        assert result.label == KEYWORDS[int(np.argmax(p))]
        np.testing.assert_allclose(result.scores, p, atol=1e-4)
        assert result.score == pytest.approx(float(p.max()), abs=1e-4)


def riff(fmt_tag: int, channels: int, rate: int, bits: int, data: bytes, extensible: bool = False,
         extra_chunk: bool = False) -> bytes:
    """A WAV file written out chunk by chunk (the stdlib writes integer PCM only)."""
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else fmt_tag, channels, rate, rate * block, block, bits)
    if extensible:  # cbSize, valid bits, channel mask, then the sub-format GUID (its first 2 bytes: the tag)
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", fmt_tag) + bytes(14)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    if extra_chunk:  # an odd-sized chunk before the data: skipped, with its pad byte
        chunks += b"LIST" + struct.pack("<I", 3) + b"abc\0"
    chunks += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks
