"""Shared test helpers: the onnxruntime reference and the "same numbers as ORT" check.

The nets live in ``cuvil_edge.testing.zoo`` and the onnxruntime helpers in ``cuvil_edge.oracle``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import pytest

from cuvil_edge.oracle import ort_session, random_inputs

#: elementwise tolerance against onnxruntime (both fp32; only summation order differs)
RTOL = ATOL = 1e-4


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


@pytest.fixture
def host_cli(capsys):
    """Run ``cuvil-edge ARGS...`` in process; asserts exit 0 and returns what it printed."""
    from cuvil_edge.cli import main

    def run(*argv: str) -> str:
        assert main(list(argv)) == 0
        return capsys.readouterr().out

    return run
