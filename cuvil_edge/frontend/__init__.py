"""Model frontends: each turns a file format into the IR (``onnx``, ``tflite``); ``source_format`` is
the one place that tells them apart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: the TFLite flatbuffer's file identifier, at bytes 4..8
TFLITE_MAGIC = b"TFL3"


def source_format(source: str | os.PathLike[str] | bytes | Any) -> str:
    """``"tflite"`` or ``"onnx"``: by the bytes' identifier, else a file's ``.tflite`` suffix or its
    first bytes; anything else (a ModelProto included) goes to the ONNX frontend, which names what is
    wrong with it."""
    if isinstance(source, (bytes, bytearray)):
        head = bytes(source[:8])
    elif isinstance(source, (str, os.PathLike)):
        path = Path(os.fspath(source))
        if path.suffix.lower() == ".tflite":
            return "tflite"
        try:
            with path.open("rb") as f:
                head = f.read(8)
        except OSError:
            return "onnx"
    else:
        return "onnx"
    return "tflite" if head[4:8] == TFLITE_MAGIC else "onnx"
