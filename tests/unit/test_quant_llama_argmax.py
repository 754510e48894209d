"""int8-dynamic with calibration data holds ``accuracy_budget`` (quant/__init__.py): on the exporter sweep's
random-weight Llama, whose logits' top two sit 2e-4 of the largest apart in one row, int8 everywhere
changes that row's argmax; measured on other seeded sequences, the budget keeps the layer that hurts most
in float and every row's argmax matches onnxruntime fp32."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import QuantizationError
from cuvil_edge.oracle import ort_session

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def llama():
    """(ONNX model, the sweep's seeded feeds as numpy)."""
    from cuvil_edge.frontend.torch_export import export_once
    from tests.conformance.exporter_sweep import _model

    warnings.simplefilter("ignore")
    module, feeds, outputs = _model("llama")
    proto = export_once(module, tuple(feeds.values()), "torchscript", list(feeds), outputs)
    return proto, {k: v.numpy() for k, v in feeds.items()}


def _argmaxes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, a.shape[-1]).argmax(-1)


def _calibration(feeds: dict[str, np.ndarray], count: int) -> list[dict[str, np.ndarray]]:
    """Other token sequences (seeded), the sweep's mask."""
    rng = np.random.default_rng(11)
    return [{**feeds, "input_ids": rng.integers(3, 128, feeds["input_ids"].shape).astype(np.int64)}
            for _ in range(count)]


def test_int8_dynamic_under_a_budget_keeps_every_argmax(llama) -> None:
    proto, feeds = llama
    want = ort_session(proto).run(None, feeds)[0]
    plain = CuvilModel.load(proto).optimize("int8-dynamic", targets=[Target()]).predict(feeds)["logits"]
    assert not np.array_equal(_argmaxes(plain), _argmaxes(want))  # what the budget is for
    m = CuvilModel.load(proto).optimize("int8-dynamic", targets=[Target()], accuracy_budget=0.0,
                                        calibration=_calibration(feeds, 16))
    got = m.predict(feeds)["logits"]
    np.testing.assert_array_equal(_argmaxes(got), _argmaxes(want))
    rec = m.quantization.record
    assert rec["accuracy_budget"] == 0.0 and rec["accuracy_vs_fp32"]["top1_agreement"] == 1.0
    choices = {layer["name"]: layer["choice"] for layer in rec["layers"]}
    kept = [n for n, c in choices.items() if c != "int8"]
    assert kept and "lm_head" in kept[0] and len(kept) < len(choices) // 2  # most layers stay int8
    assert all("int8" in layer["sensitivity"] for layer in rec["layers"])  # the one-layer table
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() < np.abs(plain - want).max() <= 0.05 * scale


def test_without_calibration_int8_dynamic_measures_nothing(llama) -> None:
    proto, feeds = llama
    rec = CuvilModel.load(proto).optimize("int8-dynamic", targets=[Target()]).quantization.record
    assert "accuracy_budget" not in rec and all(not layer["sensitivity"] for layer in rec["layers"])
    assert {layer["choice"] for layer in rec["layers"]} == {"int8"}


def test_calibration_that_does_not_fit_the_inputs_is_refused(llama) -> None:
    proto, feeds = llama
    with pytest.raises(QuantizationError, match="lacks inputs"):
        CuvilModel.load(proto).optimize("int8-dynamic", targets=[Target()],
                                        calibration=[{"input_ids": feeds["input_ids"]}])
