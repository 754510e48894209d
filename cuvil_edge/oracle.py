"""onnxruntime as the oracle (tests, demo) and the native peer (benchmarks): one place to configure it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx


def ort_session(model: onnx.ModelProto | str, threads: int = 1):
    """An onnxruntime CPU session, single-threaded unless told otherwise (how we compare)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    src = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])


def graph_inputs(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Real inputs (not initializers listed as inputs, as old exporters do): name -> (shape, dtype)."""
    inits = {t.name for t in model.graph.initializer}
    return {i.name: (tuple(d.dim_value or 1 for d in i.type.tensor_type.shape.dim),
                     onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
            for i in model.graph.input if i.name not in inits}


def random_inputs(model: onnx.ModelProto, n: int, seed: int) -> Iterator[dict[str, np.ndarray]]:
    """``n`` seeded standard-normal feeds for the model's inputs."""
    rng = np.random.default_rng(seed)
    specs = graph_inputs(model)
    for _ in range(n):
        yield {k: rng.standard_normal(shape).astype(dtype) for k, (shape, dtype) in specs.items()}


def random_feeds(specs, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded feeds for a compiled model's inputs (``TensorSpec``s): standard normal floats, small
    non-negative integers for id-like inputs, random booleans."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in specs:
        dt = np.dtype(t.dtype)
        if dt.kind == "f":
            out[t.name] = rng.standard_normal(t.shape).astype(dt)
        elif dt.kind == "b":
            out[t.name] = rng.random(t.shape) < 0.5
        else:
            out[t.name] = rng.integers(0, 10, t.shape).astype(dt)
    return out
