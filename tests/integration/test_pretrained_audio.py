"""``from_pretrained`` for audio classification (keyword spotting): Hugging Face-layout directories built
here (seeded conv nets, ``config.json`` with id2label, a feature extractor's ``preprocessor_config.json``)
for the four kinds of input audio models take: raw normalised waveforms (Wav2Vec2), Whisper log-mel
frames, MFCC frames and Kaldi filter banks (AST, Speech2Text). ``predict`` on waveforms and .wav files is
compared with onnxruntime fed by a feature extraction written here, independently of
``runtime_wasm.processing`` (per-frame loops, scalar mel formulas, an explicit DCT sum, Kaldi's
compute-fbank-feats sample by sample: torchaudio is not installed here, and torch may not be). Also: long
clips cut into windows with a hop, WAV files of every sample format and malformed ones, and static int8
calibrated on waveforms."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import InputError, PretrainedError
from cuvil_edge.testing.zoo import audio
from runtime_wasm.errors import ProcessingError
from runtime_wasm.processing import ProcessingConfig, Processor, decode_wav, kaldi_fbank, read_wav
from tests.support.audio import check_against_onnxruntime, ort_probabilities, ref_fit, ref_wav2vec2, riff
from tests.support.pretrained import WAVE_CLIP, WAVE_RATE, audio_dir, clips, feature_net, wave_dir, write_wav

pytestmark = pytest.mark.integration


# -- the reference feature extraction --------------------------------------------------------------


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


def ref_kaldi_fbank(x: np.ndarray, rate: int, n_mels: int, window: str, scale: float) -> np.ndarray:
    """[frames, mels] Kaldi's compute-fbank-feats from its definition (feature-window.cc,
    mel-computations.cc), a frame and a sample at a time, dither off: 25 ms frames every 10 ms, whole
    frames only; samples times ``scale``; the frame's mean removed; pre-emphasis 0.97 (the first sample
    against itself); the symmetric window; |FFT|^2 zero-padded to a power of two; triangles linear on the
    mel scale 1127 ln(1 + f/700) from 20 Hz to Nyquist over the bins below Nyquist; ln, floored at
    float32's epsilon."""
    win, shift = int(rate * 0.025), int(rate * 0.010)
    padded = 1
    while padded < win:
        padded *= 2

    def weight(i: int) -> float:
        a = 2 * math.pi * i / (win - 1)
        hann = 0.5 - 0.5 * math.cos(a)
        return {"hanning": hann, "povey": hann ** 0.85, "hamming": 0.54 - 0.46 * math.cos(a),
                "rectangular": 1.0}[window]

    def mel(f: float) -> float:
        return 1127 * math.log(1 + f / 700)

    lo, hi = mel(20.0), mel(rate / 2)
    delta = (hi - lo) / (n_mels + 1)
    banks = np.zeros((n_mels, padded // 2))
    for m in range(n_mels):
        left, center, right = lo + m * delta, lo + (m + 1) * delta, lo + (m + 2) * delta
        for k in range(padded // 2):
            f = mel(k * rate / padded)
            if left < f < right:
                banks[m, k] = (f - left) / (center - left) if f <= center else (right - f) / (right - center)
    rows = []
    for start in range(0, len(x) - win + 1, shift):
        frame = [float(v) * scale for v in x[start:start + win]]
        mean = sum(frame) / win
        frame = [v - mean for v in frame]
        frame = [frame[i] - 0.97 * frame[max(i - 1, 0)] for i in range(win)]
        spectrum = np.fft.rfft([v * weight(i) for i, v in enumerate(frame)] + [0.0] * (padded - win))
        power = spectrum.real ** 2 + spectrum.imag ** 2
        rows.append([math.log(max(float(banks[m] @ power[:padded // 2]), 1.1920928955078125e-07))
                     for m in range(n_mels)])
    return np.array(rows).reshape(-1, n_mels)


@pytest.fixture(scope="module")
def wave_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CuvilModel]:
    path = wave_dir(tmp_path_factory.mktemp("kws") / "kws-wave")
    return path, CuvilModel.from_pretrained(path).optimize(targets=[Target()])


# -- the four kinds of audio model -------------------------------------------------------------------
def test_waveform_keyword_spotter_normalises_pads_and_cuts_like_wav2vec2(wave_model, tmp_path: Path) -> None:
    path, model = wave_model
    waves = clips(WAVE_RATE, [0.3, 0.5, 0.8])
    wav_samples = write_wav(tmp_path / "clip.wav", waves[2], WAVE_RATE)
    assert model.processing.task == "audio-classification"
    assert model.processing.audio["features"] == "waveform"
    got = model.predict(waves)  # batch 2: a full chunk, then one clip padded
    from_file = model.predict(tmp_path / "clip.wav")
    check_against_onnxruntime(path, got, [ref_wav2vec2(x) for x in waves])
    check_against_onnxruntime(path, [from_file], [ref_wav2vec2(wav_samples)])
    assert model.predict((tmp_path / "clip.wav").read_bytes()).scores.tolist() == from_file.scores.tolist()
    assert len({r.label for r in got}) > 1 or len({round(r.score, 3) for r in got}) > 1  # the clips differ


def test_whisper_log_mel_frames_match_a_reference_extraction(tmp_path: Path) -> None:
    rate, frames = 16000, 100
    path = audio_dir(tmp_path / "kws-whisper", feature_net([1, 1, frames, 80], features_first=False), {
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
    path = audio_dir(tmp_path / "kws-mfcc", feature_net([1, 13, frames], features_first=True), {
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


def test_ast_kaldi_filter_banks_match_compute_fbank_feats_written_out(tmp_path: Path) -> None:
    rate, frames, mels = 16000, 98, 128  # 98 whole 25 ms frames every 10 ms: one second
    mean, std = -4.2677393, 4.5689974
    path = audio_dir(tmp_path / "ast", feature_net([1, 1, frames, mels], features_first=False), {
        "feature_extractor_type": "ASTFeatureExtractor", "feature_size": 1, "max_length": frames,
        "num_mel_bins": mels, "sampling_rate": rate, "mean": mean, "std": std, "do_normalize": True,
        "padding_value": 0.0, "return_attention_mask": False}, "ASTForAudioClassification")
    waves = clips(rate, [0.45, 1.0, 1.6], seed=4)
    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    au = model.processing.audio
    assert (au["features"], au["window"], au["win_length"], au["hop_length"], au["n_fft"]) == (
        "fbank", "hanning", 400, 160, 512)
    assert "Kaldi mels" in model.processing.summary()

    def reference(x: np.ndarray) -> np.ndarray:  # AST: zero rows pad the frames, then (x - mean) / (2 std)
        fb = ref_kaldi_fbank(x, rate, mels, "hanning", 1.0)[:frames]
        fb = np.concatenate([fb, np.zeros((frames - len(fb), mels))])
        return ((fb - mean) / (2 * std)).reshape(1, frames, mels)

    refs = [reference(x) for x in waves]
    for x, ref in zip(waves, refs):
        np.testing.assert_allclose(model.processor.preprocess_audio(x), ref.astype(np.float32), atol=2e-5)
    check_against_onnxruntime(path, model.predict(waves), refs)
    # a 1.6 s clip in windows of the model's 15,920 samples every half second: 3 windows, the last short
    windows = model.predict(waves[2], hop_s=0.5)
    assert [(w.start, w.end) for w in windows] == [(0.0, 0.995), (0.5, 1.495), (1.0, 1.6)]
    check_against_onnxruntime(path, [w.result for w in windows],
                              [reference(waves[2][s:s + 15920]) for s in (0, 8000, 16000)])


@pytest.mark.parametrize("window", ["povey", "hanning", "hamming", "rectangular"])
@pytest.mark.parametrize("rate, scale", [(16000, 1.0), (8000, 32768.0)])
def test_kaldi_filter_banks_of_every_window_follow_the_definition(window: str, rate: int, scale: float
                                                                  ) -> None:
    """The features themselves (before any normalisation a model adds), 1.5 s of tones and noise."""
    x = clips(rate, [1.5], seed=10)[0]
    au = {"win_length": int(rate * 0.025), "hop_length": int(rate * 0.010),
          "n_fft": 512 if rate == 16000 else 256, "num_mel_bins": 23, "window": window, "preemphasis": 0.97,
          "remove_dc_offset": True,
          "sample_scale": scale, "f_min": 20.0, "f_max": rate / 2, "sampling_rate": rate}
    got = kaldi_fbank(x, au)
    assert got.shape == (148, 23)  # 1 + (1.5 s - 25 ms) // 10 ms whole frames
    np.testing.assert_allclose(got, ref_kaldi_fbank(x, rate, 23, window, scale), rtol=1e-9, atol=1e-9)


def test_speech2text_povey_filter_banks_with_utterance_cmvn(tmp_path: Path) -> None:
    rate, frames, mels = 16000, 98, 40
    path = audio_dir(tmp_path / "s2t", feature_net([1, mels, frames], features_first=True), {
        "feature_extractor_type": "Speech2TextFeatureExtractor", "feature_size": mels, "num_mel_bins": mels,
        "sampling_rate": rate, "do_ceptral_normalize": True, "normalize_means": True, "normalize_vars": True,
        "padding_value": 0.0}, "Speech2TextForAudioClassification")
    waves = clips(rate, [0.6, 1.3], seed=5)
    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    au = model.processing.audio
    assert (au["window"], au["sample_scale"], au["cmvn"], au["frames_axis"]) == ("povey", 32768.0, True, -1)

    def reference(x: np.ndarray) -> np.ndarray:  # CMVN over the clip's own frames, then zero rows
        fb = ref_kaldi_fbank(x, rate, mels, "povey", 32768.0)[:frames]
        fb = (fb - fb.mean(axis=0)) / fb.std(axis=0)
        return np.concatenate([fb, np.zeros((frames - len(fb), mels))]).T

    check_against_onnxruntime(path, model.predict(waves), [reference(x) for x in waves])


# -- long clips in windows --------------------------------------------------------------------------------
def test_a_long_clip_cut_into_windows_with_a_hop_gives_each_windows_class(wave_model) -> None:
    path, model = wave_model
    long, short = clips(WAVE_RATE, [1.7, 0.3], seed=6)  # 13,600 and 2,400 samples; the window is 4,000
    got = model.predict([long, short], hop_s=0.25)
    starts = [0, 2000, 4000, 6000, 8000, 10000]  # until a window reaches the end: 10,000 + 4,000 > 13,600
    assert [(w.start, w.end) for w in got[0]] == [(s / WAVE_RATE, min(s + WAVE_CLIP, 13600) / WAVE_RATE)
                                                  for s in starts]
    assert [(w.start, w.end) for w in got[1]] == [(0.0, 0.3)]  # shorter than the window: one, padded
    check_against_onnxruntime(path, [w.result for w in got[0]],
                              [ref_wav2vec2(long[s:s + WAVE_CLIP]) for s in starts])
    check_against_onnxruntime(path, [got[1][0].result], [ref_wav2vec2(short)])
    assert len({w.result.label for w in got[0]}) > 1 or len({round(w.result.score, 3) for w in got[0]}) > 1
    assert model.predict(long, hop_s=2.0)[0].result.scores.tolist() == model.predict(long).scores.tolist()
    for bad in (0.0, 1e-6, float("nan"), "0.5"):
        with pytest.raises(InputError, match="hop between windows"):
            model.predict(long, hop_s=bad)


# -- WAV files ----------------------------------------------------------------------------------------------


def test_wav_files_of_each_sample_format_decode_to_the_same_samples(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    x = np.clip(rng.standard_normal(1000) * 0.3, -0.99, 0.99)
    stereo = np.stack([x, -0.5 * x], axis=1)  # averaged: 0.25 x
    i16 = np.round(x * 32767).astype("<i2")
    i32 = np.round(x * 2147483647).astype("<i4")
    i24 = np.round(x * 8388607).astype(np.int64)
    cases = {
        "pcm16": (riff(1, 1, 8000, 16, i16.tobytes()), i16 / 32768.0),
        "pcm16-extensible-list": (riff(1, 1, 8000, 16, i16.tobytes(), True, True), i16 / 32768.0),
        "pcm24": (riff(1, 1, 8000, 24, b"".join(int(v).to_bytes(3, "little", signed=True) for v in i24)),
                  i24 / 8388608.0),
        "pcm32": (riff(1, 1, 8000, 32, i32.tobytes()), i32 / 2147483648.0),
        "float32": (riff(3, 1, 8000, 32, x.astype("<f4").tobytes()), x.astype(np.float32)),
        "float32-stereo": (riff(3, 2, 8000, 32, stereo.astype("<f4").tobytes()),
                           stereo.astype(np.float32).mean(axis=1)),
        "pcm8": (riff(1, 1, 8000, 8, (np.round(x * 127) + 128).astype(np.uint8).tobytes()),
                 np.round(x * 127) / 128.0),
    }
    for name, (data, want) in cases.items():
        np.testing.assert_allclose(decode_wav(data, 8000, name), want, atol=1e-12, err_msg=name)
    write_wav(tmp_path / "stdlib.wav", x, 8000)  # and a file the stdlib wave module wrote
    np.testing.assert_allclose(read_wav(tmp_path / "stdlib.wav", 8000), i16 / 32768.0, atol=1e-12)


@pytest.mark.parametrize("case, match", [
    ("not-riff", "not a WAV file"), ("truncated", "truncated WAV file"), ("no-data", "without a data chunk"),
    ("adpcm", "format 2 with 4-bit samples is not supported"), ("no-samples", "without samples"),
    ("bad-block", "header is inconsistent"), ("nan", "NaN or infinite"),
    ("rate", "44100 Hz audio, the model takes 8000 Hz")])
def test_malformed_wav_files_are_typed_errors_naming_the_problem(wave_model, case: str, match: str) -> None:
    model = wave_model[1]
    good = riff(1, 1, 8000, 16, bytes(200))
    data = {"not-riff": b"ID3\x04" + good[4:], "truncated": good[:-50],
            "no-data": good[:good.index(b"data")], "adpcm": riff(2, 1, 8000, 4, bytes(100)),
            "no-samples": riff(1, 1, 8000, 16, b""),
            "nan": riff(3, 1, 8000, 32, np.full(10, np.nan, "<f4").tobytes()),
            "bad-block": good[:32] + struct.pack("<H", 3) + good[34:],
            "rate": riff(1, 1, 44100, 16, bytes(200))}[case]
    with pytest.raises(InputError, match=match):
        model.predict(data)


# -- int8 calibrated on waveforms -----------------------------------------------------------------------
def test_int8_calibrates_on_waveforms_through_the_same_preprocessing(tmp_path: Path) -> None:
    path = wave_dir(tmp_path / "kws-wave")
    waves = clips(WAVE_RATE, [0.4, 0.5, 0.7, 0.9, 0.6, 1.1], seed=8)
    fp32 = ort_probabilities(path, [ref_wav2vec2(x) for x in waves])
    from_waves = CuvilModel.from_pretrained(path).optimize(precision="int8", targets=[Target()],
                                                            calibration=waves)
    feeds = from_waves.processor.feeds(waves)  # what the calibration must have been computed from
    from_feeds = CuvilModel.from_pretrained(path).optimize(precision="int8", targets=[Target()],
                                                            calibration=feeds)
    assert from_waves.spec.extra["quantization"]["precision"] == "int8"
    got, want = from_waves.predict(waves), from_feeds.predict(waves)
    for g, w, p in zip(got, want, fp32):
        np.testing.assert_array_equal(g.scores, w.scores)
        np.testing.assert_allclose(g.scores, p, atol=0.15)


# -- what is refused ----------------------------------------------------------------------------------
def test_a_wav_at_another_rate_and_stacked_fbank_extractors_are_typed_errors(tmp_path: Path) -> None:
    path = audio_dir(tmp_path / "kws", audio(batch=1, length=800), {
        "feature_extractor_type": "Wav2Vec2FeatureExtractor", "sampling_rate": 8000, "do_normalize": False},
        "Wav2Vec2ForSequenceClassification")
    write_wav(tmp_path / "fast.wav", clips(16000, [0.1])[0], 16000)
    model = CuvilModel.from_pretrained(path).optimize(targets=[Target()])
    with pytest.raises(InputError, match="16000 Hz audio, the model takes 8000 Hz"):
        model.predict(tmp_path / "fast.wav")
    with pytest.raises(InputError, match="1-D"):
        model.predict(np.zeros((2, 100)))
    seamless = audio_dir(tmp_path / "seamless", feature_net([1, 1, 100, 160], features_first=False), {
        "feature_extractor_type": "SeamlessM4TFeatureExtractor", "sampling_rate": 16000,
        "num_mel_bins": 80, "stride": 2}, "SeamlessM4TForAudioClassification")
    with pytest.raises(PretrainedError, match="SeamlessM4TFeatureExtractor.*stacked Kaldi"):
        CuvilModel.from_pretrained(seamless)


def test_a_processing_config_a_device_cannot_follow_is_refused() -> None:
    good = {"input": "x", "sampling_rate": 16000, "features": "log-mel", "normalize": False,
            "padding_value": 0.0, "n_fft": 400, "win_length": 400, "hop_length": 160, "num_mel_bins": 40,
            "mel_scale": "htk", "mel_norm": None, "window": "hann", "log": "ln", "frames_axis": -2,
            "center": True, "f_min": 0.0, "f_max": 8000.0}
    base = {"format": 1, "task": "audio-classification", "output": "y", "labels": []}
    assert ProcessingConfig.from_dict({**base, "audio": good}).audio == good
    for bad, match in (({"win_length": 512}, "win_length"), ({"f_max": 9000.0}, "f_max"),
                       ({"mel_scale": "kaldi"}, "mel_scale"), ({"features": "cqt"}, "features"),
                       ({"hop_length": 0}, "hop_length")):
        with pytest.raises(ProcessingError, match=match):
            ProcessingConfig.from_dict({**base, "audio": {**good, **bad}})
