"""Audio windows and their wire form, without a model: where a clip's windows start for each kind of
features (the window a model sees is its clip in samples), and windows become exactly the tensors the
audio signature announces, one row per window with the clip it came from."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cuvil_agent import oip
from cuvil_agent.payloads import result_record, result_tensors, signature
from runtime_wasm.errors import ProcessingError
from runtime_wasm.processing import AudioWindow, Classification, ProcessingConfig, Processor

LABELS = ("speech", "silence")
FBANK = {"features": "fbank", "n_fft": 512, "win_length": 400, "hop_length": 160, "num_mel_bins": 40,
         "window": "povey", "preemphasis": 0.97, "remove_dc_offset": True, "sample_scale": 1.0,
         "feature_mean": 0.0, "feature_std": 1.0, "cmvn": False, "f_min": 20.0, "f_max": 8000.0,
         "frames_axis": -2}


def processor(audio: dict[str, Any], shape: tuple[int, ...]) -> Processor:
    config = ProcessingConfig.from_dict({
        "format": 1, "task": "audio-classification", "output": "y", "labels": list(LABELS),
        "audio": {"input": "x", "sampling_rate": 16000, "normalize": False, "padding_value": 0.0, **audio}})
    return Processor(config, {}, {"x": (shape, "float32")})


def test_the_window_is_the_clip_the_model_sees_in_samples():
    assert processor({"features": "waveform"}, (1, 16000)).clip_samples == 16000
    assert processor(FBANK, (1, 98, 40)).clip_samples == 97 * 160 + 400  # whole frames: Kaldi snips edges


@pytest.mark.parametrize("n, hop_s, starts", [
    (16000, 0.5, [0]),  # exactly one window: no hop needed
    (8000, 0.5, [0]),  # shorter: one window, padded
    (24000, 0.5, [0, 8000]),  # the second window reaches the end exactly
    (24001, 0.5, [0, 8000, 16000]),  # one sample more: a third, short window
    (40000, 2.0, [0, 32000]),  # a hop longer than the window skips samples; none starts past the end
    (30000, None, [0]),  # no hop: the clip's start only, the rest cut
])
def test_windows_step_by_the_hop_until_one_reaches_the_clips_end(n, hop_s, starts):
    assert list(processor({"features": "waveform"}, (1, 16000)).window_starts(n, hop_s)) == starts


@pytest.mark.parametrize("hop_s", [0, -1.0, 1e-5, float("inf"), "0.5", True])
def test_a_hop_that_is_no_positive_number_of_samples_is_refused(hop_s):
    with pytest.raises(ProcessingError, match="hop between windows"):
        processor({"features": "waveform"}, (1, 16000)).window_starts(20000, hop_s)


def window(start: float, end: float, i: int) -> AudioWindow:
    scores = np.eye(2, dtype=np.float32)[i] * 0.6 + 0.2
    return AudioWindow(start, end, Classification(LABELS[i], float(scores[i]), i, scores, LABELS))


def test_windows_are_the_tensors_the_audio_signature_announces():
    results = [[window(0.0, 1.0, 0), window(0.5, 1.5, 1)], [window(0.0, 0.3, 1)]]
    sig = signature(processor({"features": "waveform"}, (1, 16000)))
    tensors = result_tensors(results)
    assert [t.name for t in sig.inputs] == ["audio"] and [t.name for t in sig.outputs] == list(tensors)
    for spec in sig.outputs:
        a = tensors[spec.name]
        assert oip.datatype(a.dtype) == oip.datatype(spec.dtype) and a.ndim == len(spec.shape)
        assert all(s in (-1, d) for s, d in zip(spec.shape, a.shape))
    assert tensors["window_item"].tolist() == [0, 0, 1] and tensors["label"].tolist() == [
        b"speech", b"silence", b"silence"]
    np.testing.assert_allclose(tensors["window_start"], [0.0, 0.5, 0.0])
    np.testing.assert_allclose(tensors["window_end"], [1.0, 1.5, 0.3])
    record = result_record(results[0])
    assert [(w["start"], w["end"], w["label"]) for w in record["windows"]] == [(0.0, 1.0, "speech"),
                                                                               (0.5, 1.5, "silence")]
