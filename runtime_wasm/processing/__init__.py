"""Pre- and post-processing that travels in a bundle: texts, images or waveforms in, labels, spans or
embeddings out.

The host (``cuvil_edge.pretrained``) translates a Hugging Face directory's configs into one normalized
``processing.json`` next to the model's spec; a device reads only that, with numpy and, for text models,
the optional ``tokenizers`` wheel (``pip install 'cuvil-edge[text]'``). The compiled model has a fixed
batch and sequence length, so items run in chunks of the batch (the last one padded), texts are
truncated to the sequence length and waveforms padded or cut to the model's clip, or cut into windows of
it with a hop (``run_windows``).

By concern: ``schema`` (``processing.json``, result types), ``processor`` (``Processor``), ``image``
and ``audio`` (the numpy operations).
"""

from __future__ import annotations

from ..errors import ProcessingError
from .audio import (
    audio_features,
    dct_matrix,
    decode_wav,
    fit_length,
    kaldi_fbank,
    kaldi_mel_banks,
    kaldi_window,
    mel_filters,
    read_wav,
)
from .image import (
    TIE_SLACK,
    center_crop,
    decode_image,
    read_image,
    resize,
    resize_weights,
    rgb,
    target_size,
)
from .processor import (
    Processor,
)
from .schema import (
    AUDIO_FEATURES,
    AUDIO_LOGS,
    IMAGE_LAYOUTS,
    KALDI_FLOOR,
    KALDI_WINDOWS,
    MEL_FLOOR,
    MEL_SCALES,
    PROCESSING_FILE,
    PROCESSING_FORMAT,
    RESAMPLE,
    TASKS,
    TEXT_ROLES,
    WINDOWS,
    Audio,
    AudioWindow,
    Classification,
    Image,
    InputShapes,
    Predict,
    ProcessingConfig,
    Result,
    Span,
    label_of,
    processing_files,
)

__all__ = [
    "AUDIO_FEATURES",
    "AUDIO_LOGS",
    "Audio",
    "AudioWindow",
    "Classification",
    "IMAGE_LAYOUTS",
    "Image",
    "InputShapes",
    "KALDI_FLOOR",
    "KALDI_WINDOWS",
    "MEL_FLOOR",
    "MEL_SCALES",
    "PROCESSING_FILE",
    "PROCESSING_FORMAT",
    "Predict",
    "ProcessingConfig",
    "ProcessingError",
    "Processor",
    "RESAMPLE",
    "Result",
    "Span",
    "TASKS",
    "TEXT_ROLES",
    "TIE_SLACK",
    "WINDOWS",
    "audio_features",
    "center_crop",
    "dct_matrix",
    "decode_image",
    "decode_wav",
    "fit_length",
    "kaldi_fbank",
    "kaldi_mel_banks",
    "kaldi_window",
    "label_of",
    "mel_filters",
    "processing_files",
    "read_image",
    "read_wav",
    "resize",
    "resize_weights",
    "rgb",
    "target_size",
]
