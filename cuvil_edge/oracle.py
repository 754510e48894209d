"""onnxruntime as the oracle (tests, demo) and the native peer (benchmarks): one place to configure it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import onnx

from runtime_wasm.spec import STORED_DTYPES, STORED_RANGES, TensorSpec, storage_dtype

#: Ops whose presence makes a graph quantized: onnxruntime's optimizer fuses them into integer kernels
QUANTIZED_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
    "MatMulInteger", "ConvInteger",
    # com.microsoft, written by onnxruntime's quantization tools
    "QGemm", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
    "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSoftmax", "QAttention", "MatMulNBits",
    "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "DynamicQuantizeLSTM",
})


def _op_types(graph: onnx.GraphProto) -> Iterator[str]:
    for node in graph.node:
        yield node.op_type
        for attr in node.attribute:  # If / Loop / Scan bodies
            for g in [attr.g] if attr.HasField("g") else attr.graphs:
                yield from _op_types(g)


def is_quantized(model: onnx.ModelProto) -> bool:
    """Whether any node (subgraphs included) is a quantize, dequantize or integer-arithmetic op."""
    return not QUANTIZED_OPS.isdisjoint(_op_types(model.graph))


def session_options(model: onnx.ModelProto, threads: int = 1, *, peer: bool = False):
    """The options an onnxruntime session gets. As the oracle (``peer=False``) a quantized graph runs
    with graph optimizations off: the QDQ graph simulated in float, exactly as the model states it.
    Optimized, onnxruntime fuses QDQ patterns into its u8s8 integer kernels, which on x86 without VNNI
    (AVX2 ``pmaddubsw``) saturate the 16-bit pair sums and answer whole steps away from the model;
    those kernels are a benchmark peer (``peer=True``), never a reference."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if not peer and is_quantized(model):
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return opts


def _session(model: onnx.ModelProto | str | Path, threads: int, peer: bool):
    import onnxruntime as ort

    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    # a path keeps its directory, where a model's external data lives
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, session_options(proto, threads, peer=peer),
                                providers=["CPUExecutionProvider"])


def ort_session(model: onnx.ModelProto | str | Path, threads: int = 1):
    """onnxruntime as the oracle: a CPU session, single-threaded unless told otherwise (how we compare),
    a quantized graph simulated in float (``session_options``). Tests build every onnxruntime session
    here (tests/unit/test_oracle.py holds them to it)."""
    return _session(model, threads, peer=False)


def ort_peer(model: onnx.ModelProto | str | Path, threads: int = 1):
    """onnxruntime as the benchmark peer: every graph optimization on, its fused int8 kernels included."""
    return _session(model, threads, peer=True)


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


def _stored_feed(t: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    """A stored-type input's storage array: int4/int2 values over their whole range, the float types'
    standard normal draws rounded to the type (magnitudes for float8_e8m0, which has no sign)."""
    import ml_dtypes

    store = storage_dtype(t.dtype)
    if t.dtype in STORED_RANGES:
        lo, hi = STORED_RANGES[t.dtype]
        return rng.integers(lo, hi, t.shape, endpoint=True).astype(store)
    x = rng.standard_normal(t.shape).astype(np.float32)
    x = np.abs(x) if t.dtype == "float8_e8m0fnu" else x
    return x.astype(getattr(ml_dtypes, t.dtype)).view(store)


def random_feeds(specs: Iterable[TensorSpec], seed: int | np.random.Generator = 0) -> dict[str, np.ndarray]:
    """Seeded feeds for a compiled model's inputs, each from its real range: standard normal floats,
    random booleans, 8- and 16-bit integers over the whole dtype (bytes of an image, quantized values),
    wider integers (ids, indices) over ``[0, index_bound)`` or ``[0, DEFAULT_INDEX_BOUND)``. ``seed`` may
    be a ``Generator`` to draw several feeds from one seeded stream."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in specs:
        if t.dtype in STORED_DTYPES:  # as linear memory holds them: values, or the float types' bit patterns
            out[t.name] = _stored_feed(t, rng)
            continue
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
