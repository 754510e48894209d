"""The onnxruntime reference and the "same numbers as ORT" check. Op tests build a small graph with
``make_model`` and compile and compare it with ``check_with_ort``; whole nets already compiled are
compared on random inputs with ``assert_matches_ort`` (also the ``matches_ort`` fixture). The nets live in
``cuvil_edge.testing.zoo`` and the onnxruntime helpers in ``cuvil_edge.oracle``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session, random_inputs

#: elementwise tolerance against onnxruntime (both fp32; only summation order differs)
RTOL = ATOL = 1e-4


def assert_outputs_close(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
                         rtol: float = RTOL, atol: float = ATOL, what: str = "") -> None:
    """Every reference output, with its dtype and shape: floats within ``rtol``/``atol`` (compared in
    float64, so float16 tolerances hold exactly), integers, booleans and strings equal. A scan output that
    a loop cut short is compared up to its ``:length``, and must be zero past it."""
    lengths = {k for k in got if k.endswith(":length")}
    assert set(got) - lengths == set(want), f"{what}: outputs {sorted(got)} != expected {sorted(want)}"
    for name, ref in want.items():
        ours, where = got[name], f"{what} output {name!r}"
        if f"{name}:length" in got:
            n = int(got[f"{name}:length"])
            assert not ours[n:].any(), f"{where}: rows past the trips run must be zero"
            ours = ours[:n]
        assert (ours.dtype, ours.shape) == (ref.dtype, ref.shape), \
            f"{where}: {ours.dtype}{list(ours.shape)} != expected {ref.dtype}{list(ref.shape)}"
        if ref.dtype.kind != "f":
            np.testing.assert_array_equal(ours, ref, err_msg=where)
            continue
        with np.errstate(invalid="ignore"):  # signalling NaNs widen quietly
            np.testing.assert_allclose(ours.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=where)


def ort_outputs(model_proto: onnx.ModelProto, feeds: Iterable[Mapping[str, np.ndarray]]
                ) -> list[dict[str, np.ndarray]]:
    """onnxruntime's outputs by name, one dict per feed (one session for all)."""
    sess = ort_session(model_proto)
    names = [o.name for o in sess.get_outputs()]
    return [dict(zip(names, sess.run(names, dict(feed)))) for feed in feeds]


def assert_matches_ort(model_proto: onnx.ModelProto, cuvil_model, n_inputs: int = 3, seed: int = 0,
                       rtol: float = RTOL, atol: float = ATOL) -> None:
    """``cuvil_model`` (a CuvilModel or a runtime WasmModel: anything with ``predict``) gives ORT's
    outputs on ``n_inputs`` seeded standard-normal inputs."""
    feeds = list(random_inputs(model_proto, n_inputs, seed))
    for i, (feed, want) in enumerate(zip(feeds, ort_outputs(model_proto, feeds))):
        assert_outputs_close(cuvil_model.predict(feed), want, rtol, atol, what=f"input #{i} (seed {seed})")


def _value_info(name: str, example: np.ndarray | None) -> onnx.ValueInfoProto:
    if example is None:
        return helper.make_empty_tensor_value_info(name)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(example.dtype), example.shape)


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, np.ndarray],
               outputs: Mapping[str, np.ndarray | None] | Iterable[str],
               inits: Mapping[str, Any] | None = None, opset: int = 17) -> onnx.ModelProto:
    """A one-graph model in IR 8 (which every onnxruntime we support reads), its inputs and outputs typed
    like their example arrays. Outputs left open (None, or given by name only) are typed by
    ``check_with_ort`` from onnxruntime's results, so a test need not work out their shapes."""
    outs = outputs.items() if isinstance(outputs, Mapping) else ((o, None) for o in outputs)
    graph = helper.make_graph(list(nodes), "t", [_value_info(k, v) for k, v in inputs.items()],
                              [_value_info(k, v) for k, v in outs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@dataclass(frozen=True)
class OrtChecked:
    """What ``check_with_ort`` compared, for a test's further checks: our outputs and onnxruntime's, one
    dict per feed, and the compiled model (its wasm instance closed; ``graph`` and ``compiled`` stay
    readable)."""

    model: CuvilModel
    got: list[dict[str, np.ndarray]]
    want: list[dict[str, np.ndarray]]

    @property
    def kernels(self) -> set[str]:
        """The kernels the model's nodes ran."""
        return set(self.model.compiled.program.kernels_used.values())


def check_with_ort(model: onnx.ModelProto | Sequence[onnx.NodeProto],
                   feeds: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]],
                   outputs: Iterable[str] = (), *, inits: Mapping[str, Any] | None = None, opset: int = 17,
                   rtol: float = RTOL, atol: float = ATOL, threads: int | None = None,
                   **load: Any) -> OrtChecked:
    """Compile ``model`` for the default ``Target()`` (``load``: options of ``CuvilModel.load``; ``threads``:
    the instance's, else its default), run it in wasmtime on each feed and compare every output with
    onnxruntime's (``assert_outputs_close``). ``model`` may be nodes, built by ``make_model`` with
    ``inputs`` typed like the (first) feed, ``outputs`` left open, ``inits`` and ``opset``; outputs left
    open are typed from onnxruntime's results before compiling, as an exporter would write them."""
    feeds = [feeds] if isinstance(feeds, Mapping) else list(feeds)
    if not isinstance(model, onnx.ModelProto):
        model = make_model(model, feeds[0], outputs, inits, opset)
    want = ort_outputs(model, feeds)
    if any(not o.HasField("type") for o in model.graph.output):
        typed = onnx.ModelProto()
        typed.CopyFrom(model)
        for o in typed.graph.output:
            if not o.HasField("type"):
                o.CopyFrom(_value_info(o.name, want[0][o.name]))
        model = typed
    with CuvilModel.load(model, **load).optimize(targets=[Target()]) as cm:
        if threads is not None:
            cm.threads = threads
        got = [cm.predict(feed) for feed in feeds]
    for i, (ours, ref) in enumerate(zip(got, want)):
        assert_outputs_close(ours, ref, rtol, atol, what=f"input #{i}")
    return OrtChecked(cm, got, want)
