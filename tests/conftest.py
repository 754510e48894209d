"""Shared test helpers: the onnxruntime reference and the "same numbers as ORT" check.

This file sits in ``tests/`` without an ``__init__.py``, so pytest puts ``tests/`` on ``sys.path``
and test modules anywhere below can ``import models``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import onnx
import pytest

#: elementwise tolerance against onnxruntime (both fp32; only summation order differs)
RTOL = ATOL = 1e-4


def pytest_configure(config: pytest.Config) -> None:
    for line in ("conformance: compares compiled models with shipped reference outputs (slow)",
                 "integration: compiles whole nets and runs them in wasmtime"):
        config.addinivalue_line("markers", line)


def ort_session(model: onnx.ModelProto):
    """One-thread onnxruntime session: the reference, and the peer the benchmarks compare against."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def graph_inputs(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Real inputs (not initializers listed as inputs, as old exporters do): name -> (shape, dtype)."""
    inits = {t.name for t in model.graph.initializer}
    return {i.name: (tuple(d.dim_value or 1 for d in i.type.tensor_type.shape.dim),
                     onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
            for i in model.graph.input if i.name not in inits}


def random_inputs(model: onnx.ModelProto, n: int, seed: int) -> Iterator[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    specs = graph_inputs(model)
    for _ in range(n):
        yield {k: rng.standard_normal(shape).astype(dtype) for k, (shape, dtype) in specs.items()}


def assert_outputs_close(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
                         rtol: float = RTOL, atol: float = ATOL, what: str = "") -> None:
    assert set(got) == set(want), f"{what}: outputs {sorted(got)} != expected {sorted(want)}"
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=rtol, atol=atol, err_msg=f"{what} output {name!r}")


def assert_matches_ort(model_proto: onnx.ModelProto, cuvil_model, n_inputs: int = 3, seed: int = 0,
                       rtol: float = RTOL, atol: float = ATOL) -> None:
    """``cuvil_model`` (a CuvilModel or a runtime WasmModel: anything with ``predict``) gives ORT's
    outputs on ``n_inputs`` seeded standard-normal inputs."""
    sess = ort_session(model_proto)
    names = [o.name for o in sess.get_outputs()]
    for i, feeds in enumerate(random_inputs(model_proto, n_inputs, seed)):
        want = dict(zip(names, sess.run(names, feeds)))
        assert_outputs_close(cuvil_model.predict(feeds), want, rtol, atol, what=f"input #{i} (seed {seed})")



@pytest.fixture
def matches_ort():
    """``assert_matches_ort`` for tests: a fixture, so test modules need not import this conftest."""
    return assert_matches_ort
