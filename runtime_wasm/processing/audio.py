"""Audio operations in numpy, with Hugging Face ``audio_utils`` semantics: WAV decoding and resampling
checks, padding, mel filters, log-mel and MFCC frames, and Kaldi filter banks
(``compute-fbank-feats``; ``torchaudio.compliance.kaldi.fbank``, dither off)."""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ProcessingError
from .schema import KALDI_FLOOR, MEL_FLOOR


# -- numpy audio operations (Hugging Face ``audio_utils`` semantics) ------------------------------------
def read_wav(path: str | os.PathLike[str], sampling_rate: int) -> np.ndarray:
    """A .wav file as float samples (``decode_wav``)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ProcessingError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return decode_wav(data, sampling_rate, os.fspath(path))


#: WAVE format tags: integer PCM, IEEE float, and the extensible header naming one of them in its GUID
_WAVE_PCM, _WAVE_FLOAT, _WAVE_EXTENSIBLE = 1, 3, 0xFFFE
_CHUNK = struct.Struct("<4sI")


def _wav_chunks(data: bytes, what: str) -> dict[bytes, bytes]:
    """The chunks of a RIFF/WAVE file by id (the first of each)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ProcessingError(f"{what}: not a WAV file (no RIFF/WAVE header)")
    chunks: dict[bytes, bytes] = {}
    pos = 12
    while pos + _CHUNK.size <= len(data):
        cid, size = _CHUNK.unpack_from(data, pos)
        pos += _CHUNK.size
        if pos + size > len(data):
            raise ProcessingError(f"{what}: truncated WAV file: chunk {cid!r} needs {size} bytes, "
                                  f"{len(data) - pos} follow")
        chunks.setdefault(cid, data[pos:pos + size])
        pos += size + (size & 1)  # chunks are word-aligned
    return chunks


def decode_wav(data: bytes, sampling_rate: int, what: str = "audio") -> np.ndarray:
    """WAV bytes as float samples in [-1, 1], channels averaged to mono: integer PCM of 8 (unsigned),
    16, 24 or 32 bits (divided by 2**(bits-1)) or IEEE float of 32 or 64 bits (as stored), plain or
    ``WAVE_FORMAT_EXTENSIBLE``. Audio at another rate than the model's is refused, not resampled: the
    rate is the model's input contract, and a resampler's filter would change the features.

    A RIFF reader of its own, not the stdlib ``wave`` module: ``wave`` reads integer PCM only."""
    chunks = _wav_chunks(data, what)
    if b"fmt " not in chunks or b"data" not in chunks:
        raise ProcessingError(f"{what}: WAV file without a {'fmt' if b'fmt ' not in chunks else 'data'} "
                              "chunk")
    fmt = chunks[b"fmt "]
    if len(fmt) < 16:
        raise ProcessingError(f"{what}: WAV fmt chunk of {len(fmt)} bytes, at least 16 expected")
    tag, channels, rate, _, block, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag == _WAVE_EXTENSIBLE and len(fmt) >= 26:
        (tag,) = struct.unpack_from("<H", fmt, 24)  # the sub-format GUID starts with the format tag
    kinds = {(_WAVE_PCM, 8): "u1", (_WAVE_PCM, 16): "<i2", (_WAVE_PCM, 24): "i3", (_WAVE_PCM, 32): "<i4",
             (_WAVE_FLOAT, 32): "<f4", (_WAVE_FLOAT, 64): "<f8"}
    kind = kinds.get((tag, bits))
    if kind is None:
        raise ProcessingError(f"{what}: WAV format {tag} with {bits}-bit samples is not supported (integer "
                              "PCM of 8, 16, 24 or 32 bits, or float of 32 or 64 bits)")
    if channels < 1 or block != channels * bits // 8:
        raise ProcessingError(f"{what}: WAV header is inconsistent ({channels} channels, {block}-byte "
                              f"frames of {bits}-bit samples)")
    if rate != sampling_rate:
        raise ProcessingError(f"{what}: {rate} Hz audio, the model takes {sampling_rate} Hz "
                              "(resample it first)")
    raw = chunks[b"data"]
    raw = raw[:len(raw) - len(raw) % block]  # a partial last frame (a cut-off file) is dropped
    if not raw:
        raise ProcessingError(f"{what}: WAV file without samples")
    if kind == "u1":
        x = np.frombuffer(raw, np.uint8).astype(np.float64) - 128.0
    elif kind == "i3":  # little-endian 24-bit: sign-extend through the top byte of an int32
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        x = ((b[:, 0] << 8 | b[:, 1] << 16 | b[:, 2] << 24) >> 8).astype(np.float64)
    else:
        x = np.frombuffer(raw, kind).astype(np.float64)
    if tag == _WAVE_PCM:
        x /= float(1 << (bits - 1))
    return x.reshape(-1, channels).mean(axis=1)


def fit_length(x: np.ndarray, n: int, padding_value: float) -> np.ndarray:
    """The first ``n`` samples, padded at the end with ``padding_value`` (Hugging Face's right padding
    and truncation)."""
    return np.concatenate([x[:n], np.full(max(0, n - len(x)), float(padding_value))])


def _hz_to_mel(f: np.ndarray, scale: str) -> np.ndarray:
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    f = np.asarray(f, np.float64)  # slaney: linear to 1 kHz, logarithmic above
    log_part = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) * 27.0 / np.log(6.4)
    return np.where(f < 1000.0, 3.0 * f / 200.0, log_part)


def _mel_to_hz(m: np.ndarray, scale: str) -> np.ndarray:
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    return np.where(m < 15.0, 200.0 * m / 3.0, 1000.0 * np.exp(np.log(6.4) * (m - 15.0) / 27.0))


def mel_filters(n_freqs: int, n_mels: int, f_min: float, f_max: float, sampling_rate: int, scale: str,
                norm: str | None) -> np.ndarray:
    """[n_freqs, n_mels] triangular filters evenly spaced on the mel scale (``mel_filter_bank``)."""
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.float64(f_min), scale), _hz_to_mel(np.float64(f_max), scale),
                                   n_mels + 2), scale)
    fft_freqs = np.linspace(0, sampling_rate // 2, n_freqs)
    slopes = edges[None, :] - fft_freqs[:, None]
    widths = np.diff(edges)
    filters = np.maximum(0.0, np.minimum(-slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]))
    if norm == "slaney":  # equal area per filter
        filters *= 2.0 / (edges[2:] - edges[:-2])
    return filters


def _window(kind: str, length: int, n_fft: int) -> np.ndarray:
    """A periodic window of ``length`` centred in ``n_fft`` samples."""
    w = (np.hanning if kind == "hann" else np.hamming)(length + 1)[:-1]
    out = np.zeros(n_fft)
    start = (n_fft - length) // 2
    out[start:start + length] = w
    return out


def dct_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_in, n_out] orthonormal DCT-II: MFCCs are ``log_mel @ dct_matrix``."""
    k, n = np.arange(n_out)[None, :], np.arange(n_in)[:, None]
    m = np.cos(np.pi / n_in * (n + 0.5) * k) * np.sqrt(2.0 / n_in)
    m[:, 0] /= np.sqrt(2.0)
    return m


def audio_features(x: np.ndarray, au: Mapping[str, Any]) -> np.ndarray:
    """[frames, features] log-mel energies (or MFCCs) of a waveform: power spectrum of windowed frames
    (reflect-padded by n_fft/2 at both ends when ``center``), mel filters, floored log."""
    n_fft, hop = au["n_fft"], au["hop_length"]
    if au["center"]:
        x = np.pad(x, n_fft // 2, mode="reflect")
    n = 1 + (len(x) - n_fft) // hop
    frames = x[np.arange(n_fft)[None, :] + hop * np.arange(n)[:, None]]
    power = np.abs(np.fft.rfft(frames * _window(au["window"], au["win_length"], n_fft), n_fft)) ** 2
    mel = power @ mel_filters(n_fft // 2 + 1, au["num_mel_bins"], au["f_min"], au["f_max"],
                              au["sampling_rate"], au["mel_scale"], au.get("mel_norm"))
    mel = np.maximum(mel, MEL_FLOOR)
    if au["log"] == "ln":
        out = np.log(mel)
    else:
        out = np.log10(mel)
        if au["log"] == "whisper":  # over the clip the model sees: the extra centred frame is dropped first
            out = out[:n - 1] if au["center"] else out
            out = (np.maximum(out, out.max() - 8.0) + 4.0) / 4.0
    if au["features"] == "mfcc":
        out = out @ dct_matrix(au["num_mel_bins"], au["num_mfcc"])
    return out


# -- Kaldi filter banks (``compute-fbank-feats``; ``torchaudio.compliance.kaldi.fbank``, dither off) ------
def kaldi_window(kind: str, length: int) -> np.ndarray:
    """Kaldi's symmetric frame windows: hanning, hamming, povey (hanning ** 0.85), rectangular."""
    if kind == "rectangular":
        return np.ones(length)
    c = np.cos(2.0 * np.pi * np.arange(length) / (length - 1))
    if kind == "hamming":
        return 0.54 - 0.46 * c
    hann = 0.5 - 0.5 * c
    return hann ** 0.85 if kind == "povey" else hann


def _kaldi_mel(f: np.ndarray | float) -> np.ndarray:
    return 1127.0 * np.log(1.0 + np.asarray(f, np.float64) / 700.0)


def kaldi_mel_banks(n_fft: int, n_mels: int, f_min: float, f_max: float, sampling_rate: int) -> np.ndarray:
    """[n_fft // 2, n_mels] Kaldi filters: triangles evenly spaced and linear on the mel scale
    (1127 ln(1 + f/700)), over the FFT bins below Nyquist (Kaldi leaves that bin out)."""
    lo, hi = _kaldi_mel(f_min), _kaldi_mel(f_max)
    delta = (hi - lo) / (n_mels + 1)
    left = lo + delta * np.arange(n_mels)
    mel = _kaldi_mel(np.arange(n_fft // 2) * sampling_rate / n_fft)[:, None]
    return np.maximum(0.0, np.minimum((mel - left) / delta, (left + 2 * delta - mel) / delta))


def kaldi_fbank(x: np.ndarray, au: Mapping[str, Any]) -> np.ndarray:
    """[frames, mels] log filter-bank energies of a waveform as Kaldi computes them: whole frames of
    ``win_length`` every ``hop_length`` (snip-edges: none without a whole frame), samples scaled by
    ``sample_scale`` (Speech2Text: 16-bit integer range), DC offset removed per frame, pre-emphasis
    (x[i] - k x[i-1], the first sample against itself), the window, the power spectrum of ``n_fft``
    points, the mel filters, the log floored at float32's epsilon."""
    win, hop = au["win_length"], au["hop_length"]
    n = 1 + (len(x) - win) // hop if len(x) >= win else 0
    frames = x[np.arange(win)[None, :] + hop * np.arange(n)[:, None]] * au["sample_scale"]
    if au["remove_dc_offset"]:
        frames = frames - frames.mean(axis=1, keepdims=True)
    frames = frames - au["preemphasis"] * np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    power = np.abs(np.fft.rfft(frames * kaldi_window(au["window"], win), au["n_fft"])) ** 2
    banks = kaldi_mel_banks(au["n_fft"], au["num_mel_bins"], au["f_min"], au["f_max"], au["sampling_rate"])
    return np.log(np.maximum(power[:, :au["n_fft"] // 2] @ banks, KALDI_FLOOR))
