"""The Open Inference Protocol's request layer (``cuvil_agent.oip``), as a remote client reaches it before any
model runs: an inference request body (JSON, or JSON and binary tensors) checked against a model's
signatures, and a response body as the client reads a (possibly hostile) server's reply.

Input: the body; a NUL byte splits it into the JSON header and the binary part, and its position is the
``Inference-Header-Content-Length`` (no NUL: a plain JSON body)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..engine import Target
from ..mutators import json_mutator

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("cuvil_agent.oip", "ota.parse")

#: one model's two ways in: tensors (every kind of datatype check) and a processed BYTES text input
SIGNATURE_INPUTS = (("x", "float32", (2, 4), None), ("ids", "int64", (2,), 10), ("mask", "bool", (3,), None),
                    ("u", "uint8", (4,), None))


def setup() -> Callable[[bytes], None]:
    from cuvil_agent import oip
    from ota.errors import BadInferenceRequest
    from runtime_wasm.spec import TensorSpec

    tensors = oip.Signature(tuple(TensorSpec(n, d, s, 0, b) for n, d, s, b in SIGNATURE_INPUTS),
                            (TensorSpec("y", "float32", (2, 4), 0), TensorSpec("best", "int64", (2,), 0)))
    texts = oip.Signature((TensorSpec("text", "object", (-1,), 0),),
                          (TensorSpec("label", "object", (-1,), 0),))
    limits = oip.BytesLimits(max_elements=8, max_element_bytes=1024)

    def one(data: bytes) -> None:
        head, sep, tail = data.partition(b"\0")
        body, header = (head + tail, str(len(head))) if sep else (data, None)
        with contextlib.suppress(BadInferenceRequest):
            oip.parse_infer_request(body, header, [tensors, texts], limits)
        oip.decode_outputs(body, header)  # the same bytes as a server's reply, read by the client

    return one


def target() -> Target:
    from ota.errors import BadInferenceRequest

    return Target("oip_request", "device", setup, (BadInferenceRequest,),
                  INSTRUMENT, json_mutator)
