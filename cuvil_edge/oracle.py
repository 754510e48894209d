"""onnxruntime as the oracle (tests, demo) and the native peer (benchmarks): one place to configure it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import onnx

from runtime_wasm.spec import TensorSpec


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


#: ``[0, DEFAULT_INDEX_BOUND)`` for wide integer inputs whose spec names no ``index_bound`` (ids, counts)
DEFAULT_INDEX_BOUND = 10


def random_feeds(specs: Iterable[TensorSpec], seed: int | np.random.Generator = 0) -> dict[str, np.ndarray]:
    """Seeded feeds for a compiled model's inputs, each from its real range: standard normal floats,
    random booleans, 8- and 16-bit integers over the whole dtype (bytes of an image, quantized values),
    wider integers (ids, indices) over ``[0, index_bound)`` or ``[0, DEFAULT_INDEX_BOUND)``. ``seed`` may
    be a ``Generator`` to draw several feeds from one seeded stream."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in specs:
        dt = np.dtype(t.dtype)
        if dt.kind == "f":
            out[t.name] = rng.standard_normal(t.shape).astype(dt)
        elif dt.kind == "b":
            out[t.name] = rng.random(t.shape) < 0.5
        elif dt.itemsize <= 2:
            info = np.iinfo(dt)
            out[t.name] = rng.integers(info.min, info.max, t.shape, dt, endpoint=True)
        else:
            out[t.name] = rng.integers(0, t.index_bound or DEFAULT_INDEX_BOUND, t.shape).astype(dt)
    return out
