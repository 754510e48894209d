"""``from_pretrained`` for audio classification (keyword spotting): Hugging Face-layout directories built
here (seeded conv nets, ``config.json`` with id2label, a feature extractor's ``preprocessor_config.json``)
for the three kinds of input audio models take: raw normalised waveforms (Wav2Vec2), Whisper log-mel
frames and MFCC frames. ``predict`` on waveforms and .wav files is compared with onnxruntime fed by a
feature extraction written here, independently of ``runtime_wasm.processing`` (per-frame loops, scalar
mel formulas, an explicit DCT sum)."""

from __future__ import annotations

import json
import math
import wave
from pathlib import Path

import numpy as np
import onnx
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import InputError, PretrainedError
from cuvil_edge.oracle import ort_session
from cuvil_edge.zoo import NetBuilder, audio
from runtime_wasm.errors import ProcessingError
from runtime_wasm.processing import ProcessingConfig, Processor

pytestmark = pytest.mark.integration
KEYWORDS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", "silence", "unknown"]
ID2LABEL = {str(i): k for i, k in enumerate(KEYWORDS)}


def hf_dir(path: Path, model: onnx.ModelProto, preprocessor: dict, architecture: str) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"architectures": [architecture], "id2label": ID2LABEL}))
    (path / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    onnx.save(model, str(path / "model.onnx"))
    return path


def feature_net(shape: list[int], features_first: bool) -> onnx.ModelProto:
    """A seeded conv classifier over [1, feats, frames] (Conv1d) or [1, 1, frames, feats] (Conv2d)."""
    b = NetBuilder("kws", seed=3)
    if features_first:
        y = b.conv_bn(b.conv_bn("x", shape[1], 24, (3,)), 24, 24, (3,), dilation=2)
    else:
        y = b.conv_bn(b.conv_bn("x", 1, 8, 3, stride=2), 8, 24, 3, stride=2)
    return b.build([("x", shape)], b.head(y, 24, len(KEYWORDS)), [shape[0], len(KEYWORDS)])


def clips(rate: int, seconds: list[float], seed: int = 0) -> list[np.ndarray]:
    """Tones with noise, shorter and longer than the model's clip (padded / cut)."""
    rng = np.random.default_rng(seed)
    out = []
    for k, s in enumerate(seconds):
        t = np.arange(int(rate * s)) / rate
        out.append(0.3 * np.sin(2 * np.pi * (300 + 500 * k) * t) + 0.05 * rng.standard_normal(t.size))
    return out


def write_wav(path: Path, x: np.ndarray, rate: int) -> np.ndarray:
    """16-bit mono PCM; returns the samples as the file holds them."""
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return pcm / 32768.0


# -- the reference feature extraction --------------------------------------------------------------
def ref_fit(x: np.ndarray, n: int) -> np.ndarray:
    y = np.zeros(n)
    y[:min(n, len(x))] = x[:n]
    return y


def ref_mel_points(lo: float, hi: float, n: int, scale: str) -> list[float]:
    def to_mel(f: float) -> float:
        if scale == "htk":
            return 2595 * math.log10(1 + f / 700)
        return 3 * f / 200 if f < 1000 else 15 + math.log(f / 1000) / (math.log(6.4) / 27)

    def to_hz(m: float) -> float:
        if scale == "htk":
            return 700 * (10 ** (m / 2595) - 1)
        return 200 * m / 3 if m < 15 else 1000 * math.exp((m - 15) * math.log(6.4) / 27)

    a, b = to_mel(lo), to_mel(hi)
    return [to_hz(a + (b - a) * i / (n + 1)) for i in range(n + 2)]


def ref_filterbank(n_fft: int, rate: int, n_mels: int, lo: float, hi: float, scale: str, slaney: bool
                   ) -> np.ndarray:
    pts = ref_mel_points(lo, hi, n_mels, scale)
    freqs = np.linspace(0, rate // 2, n_fft // 2 + 1)
    fb = np.zeros((n_fft // 2 + 1, n_mels))
    for m in range(n_mels):
        left, mid, right = pts[m], pts[m + 1], pts[m + 2]
        for k, f in enumerate(freqs):
            if left < f < right:
                fb[k, m] = (f - left) / (mid - left) if f <= mid else (right - f) / (right - mid)
        if slaney:
            fb[:, m] *= 2 / (right - left)
    return fb


def ref_log_mel(x: np.ndarray, rate: int, n_fft: int, win: int, hop: int, n_mels: int, lo: float, hi: float,
                scale: str, slaney: bool, window: str) -> np.ndarray:
    """[frames, mels] natural-log-free mel power (the caller takes the log): centred frames, reflect pad."""
    periodic = np.hanning(win + 1)[:-1] if window == "hann" else np.hamming(win + 1)[:-1]
    w = np.zeros(n_fft)
    w[(n_fft - win) // 2:(n_fft - win) // 2 + win] = periodic
    padded = np.pad(x, n_fft // 2, mode="reflect")
    fb = ref_filterbank(n_fft, rate, n_mels, lo, hi, scale, slaney)
    rows = []
    for start in range(0, len(padded) - n_fft + 1, hop):
        spectrum = np.fft.rfft(padded[start:start + n_fft] * w)
        rows.append((spectrum.real ** 2 + spectrum.imag ** 2) @ fb)
    return np.maximum(np.array(rows), 1e-10)


def ref_dct(log_mel: np.ndarray, n: int) -> np.ndarray:
    m = log_mel.shape[1]
    out = np.zeros((log_mel.shape[0], n))
    for k in range(n):
        scale = math.sqrt(1 / m) if k == 0 else math.sqrt(2 / m)
        out[:, k] = scale * sum(log_mel[:, j] * math.cos(math.pi * k * (2 * j + 1) / (2 * m))
                                for j in range(m))
    return out


def check_against_onnxruntime(path: Path, results: list, inputs: list[np.ndarray]) -> None:
    sess = ort_session(str(path / "model.onnx"))
    name = sess.get_inputs()[0].name
    batch = sess.get_inputs()[0].shape[0]
    for x, result in zip(inputs, results):
        logits = sess.run(None, {name: np.stack([x] * batch).astype(np.float32)})[0][0]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        assert result.label == KEYWORDS[int(np.argmax(logits))]
        np.testing.assert_allclose(result.scores, p, atol=1e-4)
        assert result.score == pytest.approx(float(p.max()), abs=1e-4)


# -- the three kinds of audio model ------------------------------------------------------------------
def test_waveform_keyword_spotter_normalises_pads_and_cuts_like_wav2vec2(tmp_path: Path) -> None:
    rate, length = 8000, 4000
    path = hf_dir(tmp_path / "kws-wave", audio(batch=2, length=length), {
        "feature_extractor_type": "Wav2Vec2FeatureExtractor", "feature_size": 1, "sampling_rate": rate,
        "padding_value": 0.0, "do_normalize": True, "return_attention_mask": False},
        "Wav2Vec2ForSequenceClassification")
    waves = clips(rate, [0.3, 0.5, 0.8])
    wav_samples = write_wav(tmp_path / "clip.wav", waves[2], rate)
    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    assert model.processing.task == "audio-classification"
    assert model.processing.audio["features"] == "waveform"
    got = model.predict(waves)  # batch 2: a full chunk, then one clip padded
    from_file = model.predict(tmp_path / "clip.wav")

    def reference(x: np.ndarray) -> np.ndarray:
        return ref_fit((x - x.mean()) / np.sqrt(x.var() + 1e-7), length).reshape(1, length)

    check_against_onnxruntime(path, got, [reference(x) for x in waves])
    check_against_onnxruntime(path, [from_file], [reference(wav_samples)])
    assert len({r.label for r in got}) > 1 or len({round(r.score, 3) for r in got}) > 1  # the clips differ


def test_whisper_log_mel_frames_match_a_reference_extraction(tmp_path: Path) -> None:
    rate, frames = 16000, 100
    path = hf_dir(tmp_path / "kws-whisper", feature_net([1, 1, frames, 80], features_first=False), {
        "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 80, "sampling_rate": rate,
        "hop_length": 160, "n_fft": 400, "chunk_length": 30, "nb_max_frames": 3000, "padding_value": 0.0},
        "WhisperForAudioClassification")
    waves = clips(rate, [0.6, 1.4], seed=1)
    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    assert model.processing.audio["frames_axis"] == -2  # [1, 1, frames, mels]: mels last
    got = model.predict(waves)

    def reference(x: np.ndarray) -> np.ndarray:
        mel = np.log10(ref_log_mel(ref_fit(x, frames * 160), rate, 400, 400, 160, 80, 0.0, 8000.0, "slaney",
                                   True, "hann"))[:frames]
        return ((np.maximum(mel, mel.max() - 8.0) + 4.0) / 4.0).reshape(1, frames, 80)

    check_against_onnxruntime(path, got, [reference(x) for x in waves])
    # the bundle's processing.json gives the device the same features
    saved = model.save(tmp_path / "built")
    device = Processor.from_dir(saved)
    np.testing.assert_array_equal(device.preprocess_audio(waves[0]),
                                  model.processor.preprocess_audio(waves[0]))


def test_mfcc_keyword_spotter_with_its_own_frame_settings(tmp_path: Path) -> None:
    rate, frames = 16000, 49
    path = hf_dir(tmp_path / "kws-mfcc", feature_net([1, 13, frames], features_first=True), {
        "feature_extractor_type": "MFCCFeatureExtractor", "sampling_rate": rate, "n_fft": 512,
        "win_length": 400, "hop_length": 320, "num_mel_bins": 40, "num_mfcc": 13, "mel_scale": "htk",
        "f_min": 20.0, "f_max": 7600.0, "window": "hamming", "log_mel": "log", "padding_value": 0.0},
        "KeywordSpotterForAudioClassification")
    waves = clips(rate, [0.5, 1.0, 2.0], seed=2)
    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    assert model.processing.audio["features"] == "mfcc" and model.processing.audio["frames_axis"] == -1
    assert "13 MFCCs" in model.processing.summary()
    got = model.predict(waves)

    def reference(x: np.ndarray) -> np.ndarray:
        mel = np.log(ref_log_mel(ref_fit(x, frames * 320), rate, 512, 400, 320, 40, 20.0, 7600.0, "htk",
                                 False, "hamming"))[:frames]
        return ref_dct(mel, 13).T

    check_against_onnxruntime(path, got, [reference(x) for x in waves])


# -- what is refused ----------------------------------------------------------------------------------
def test_a_wav_at_another_rate_and_kaldi_fbank_extractors_are_typed_errors(tmp_path: Path) -> None:
    path = hf_dir(tmp_path / "kws", audio(batch=1, length=800), {
        "feature_extractor_type": "Wav2Vec2FeatureExtractor", "sampling_rate": 8000, "do_normalize": False},
        "Wav2Vec2ForSequenceClassification")
    write_wav(tmp_path / "fast.wav", clips(16000, [0.1])[0], 16000)
    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    with pytest.raises(InputError, match="16000 Hz audio, the model takes 8000 Hz"):
        model.predict(tmp_path / "fast.wav")
    with pytest.raises(InputError, match="1-D"):
        model.predict(np.zeros((2, 100)))
    ast = hf_dir(tmp_path / "ast", feature_net([1, 1, 100, 128], features_first=False), {
        "feature_extractor_type": "ASTFeatureExtractor", "sampling_rate": 16000, "num_mel_bins": 128},
        "ASTForAudioClassification")
    with pytest.raises(PretrainedError, match="ASTFeatureExtractor.*Kaldi"):
        CuvilModel.from_pretrained(ast)


def test_a_processing_config_a_device_cannot_follow_is_refused() -> None:
    good = {"input": "x", "sampling_rate": 16000, "features": "log-mel", "normalize": False,
            "padding_value": 0.0, "n_fft": 400, "win_length": 400, "hop_length": 160, "num_mel_bins": 40,
            "mel_scale": "htk", "mel_norm": None, "window": "hann", "log": "ln", "frames_axis": -2,
            "center": True, "f_min": 0.0, "f_max": 8000.0}
    base = {"format": 1, "task": "audio-classification", "output": "y", "labels": []}
    assert ProcessingConfig.from_dict({**base, "audio": good}).audio == good
    for bad, match in (({"win_length": 512}, "win_length"), ({"f_max": 9000.0}, "f_max"),
                       ({"mel_scale": "kaldi"}, "mel_scale"), ({"features": "fbank"}, "features"),
                       ({"hop_length": 0}, "hop_length")):
        with pytest.raises(ProcessingError, match=match):
            ProcessingConfig.from_dict({**base, "audio": {**good, **bad}})
