"""The int8 kernel tests' shared check: onnxruntime's own ``quantize_static`` output (per-channel int8
weights, QDQ or QOperator) compiled by us runs on the expected kernels and matches onnxruntime within one
step of each output's quantizer, on inputs unseen in calibration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session
from runtime_wasm.variants import probe_host


def check_ort_quantized(tmp_path: Path, proto: onnx.ModelProto, shapes: dict[str, list[int]], fmt: str,
                        reduce_range: bool, act: str, tier: str) -> set[str]:
    """Quantize ``proto`` with onnxruntime, compile it for ``tier`` on this host's family, compare three
    unseen inputs; returns the kernels its ``qconv`` nodes ran, for the caller to assert."""
    oq = pytest.importorskip("onnxruntime.quantization")
    src, dst = tmp_path / "f32.onnx", tmp_path / "q.onnx"
    onnx.save(proto, src)

    def feeds(seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}

    class Reader(oq.CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter([feeds(i) for i in range(8)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    oq.quantize_static(str(src), str(dst), Reader(), quant_format=getattr(oq.QuantFormat, fmt),
                       per_channel=True, activation_type=getattr(oq.QuantType, act),
                       reduce_range=reduce_range)
    sess = ort_session(dst)
    qmodel = onnx.load(dst)
    inits = {i.name: numpy_helper.to_array(i) for i in qmodel.graph.initializer}
    outputs = {o.name for o in qmodel.graph.output}
    # each output's quantizer: the scale of the DequantizeLinear that produces it
    step = {n.output[0]: float(inits[n.input[1]]) for n in qmodel.graph.node
            if n.op_type == "DequantizeLinear" and n.output[0] in outputs}
    with CuvilModel.load(dst) as m:
        m.optimize(targets=[Target(tier, probe_host().family)])
        assert m.compiled is not None
        ops = {n.name: n.op for n in m.compiled.graph.nodes}
        kernels = {k for n, k in m.compiled.program.kernels_used.items() if ops[n] == "qconv"}
        for seed in (100, 101, 102):
            x = feeds(seed)
            ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, x)))
            got = m.predict(x)
            for name in ref:
                assert np.abs(got[name] - ref[name]).max() <= step[name] * 1.001, (name, step[name])
    return kernels
