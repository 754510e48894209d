"""The TFLite builtins real models use beyond the CNN core: each model of ``tests.support.tflite_builtins``
(written with the flatbuffer builder, no TensorFlow) is compiled, run in wasmtime and compared with LiteRT's
interpreter on the same inputs; inputs and outputs answer to their signature key and their tensor name; a
variant outside the kernels' dtype table is refused at import; the builtin count the docs state is the one
``coverage`` computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from cuvil_edge import CuvilModel
from cuvil_edge.errors import InputError, UnsupportedOperator
from cuvil_edge.frontend.tflite import import_tflite
from cuvil_edge.frontend.tflite.coverage import (
    LEFT_OUT,
    builtin_coverage,
    coverage_markdown,
    litert_builtins,
    schema_builtins,
)
from cuvil_edge.frontend.tflite.registry import BUILTINS
from tests.support.tflite_builder import TfliteBuilder
from tests.support.tflite_builtins import CASES, Ops, assert_matches_litert, litert

SUPPORTED_MD = Path(__file__).resolve().parents[2] / "docs" / "SUPPORTED.md"



@pytest.mark.parametrize("case", sorted(CASES))
def test_builtins_match_litert(case: str) -> None:
    c = CASES[case]()
    want = litert(c.model, c.feeds)
    got = CuvilModel.load(c.model).predict(c.feeds)
    assert_matches_litert(got, want)


def test_shape_folds_to_a_constant() -> None:
    """SHAPE -> FILL -> ADD leaves one run-time node: the ADD (shapes are static)."""
    o = Ops()
    x = o.b.tensor("x", (2, 3))
    s = o.op("SHAPE", [x], (2,), "int32", ("ShapeOptions", {"OutType": 2}))
    y = o.op("ADD", [x, o.op("FILL", [s, o.const(np.array(2.0, np.float32))], (2, 3))], (2, 3))
    graph = import_tflite(o.b.build([x], [y]))
    assert [n.op for n in graph.nodes] == ["binary_f32"]


def _named_model() -> bytes:
    """One RELU whose tensors are named as a TF converter names them, the signature as Keras does."""
    b = TfliteBuilder()
    x = b.tensor("serving_default_input_1:0", (1, 4))
    y = b.tensor("StatefulPartitionedCall:0", (1, 4))
    b.op("RELU", [x], [y])
    return b.build([x], [y], signature_names={x: "input_1", y: "output_0"})


def test_inputs_and_outputs_answer_to_both_names() -> None:
    model = CuvilModel.load(_named_model())
    a = np.array([[-1, 2, -3, 4]], np.float32)
    want = np.maximum(a, 0)
    for key in ("input_1", "serving_default_input_1:0"):  # the signature key and get_input_details' name
        got = model.predict({key: a})
        assert list(got) == ["output_0"]  # one canonical name per tensor: the signature's
        np.testing.assert_array_equal(got["output_0"], want)
        np.testing.assert_array_equal(got["StatefulPartitionedCall:0"], want)
        assert "StatefulPartitionedCall:0" in got
    assert model.spec.inputs[0].aliases == ("serving_default_input_1:0",)
    assert model.spec.outputs[0].aliases == ("StatefulPartitionedCall:0",)
    with pytest.raises(InputError, match="'input_1' \\(or 'serving_default_input_1:0'\\).*unknown \\['x'\\]"):
        model.predict({"x": a})
    with pytest.raises(InputError, match="given twice"):
        model.predict({"input_1": a, "serving_default_input_1:0": a})


def test_input_shapes_by_either_name() -> None:
    b = TfliteBuilder()
    x, y = b.tensor("serving_default_x:0", (-1, 4)), b.tensor("y", (-1, 4))
    b.op("RELU", [x], [y])
    data = b.build([x], [y], signature_names={x: "x"})
    for key in ("x", "serving_default_x:0"):
        assert import_tflite(data, {key: [3, 4]}).inputs[0].type.shape == (3, 4)


def test_a_variant_outside_the_dtype_table_is_refused_naming_op_node_and_dtype() -> None:
    """SIN runs on float32 kernels only: an int32 SIN at run time is refused at import, not in clang."""
    o = Ops()
    x = o.b.tensor("x", (4,), "int32")
    y = o.op("SIN", [x], (4,), "int32")
    with pytest.raises(UnsupportedOperator, match="int32") as err:
        import_tflite(o.b.build([x], [y]))
    assert (err.value.op_type, err.value.node) == ("SIN", "sin_0")


def test_builtin_count_is_computed_and_stated_in_the_docs() -> None:
    c = builtin_coverage()
    litert = litert_builtins()
    left = [op for ops in c.left_out.values() for op in ops]
    assert len(left) == len(set(left))  # one reason each
    assert set(c.supported) == litert & set(BUILTINS)
    assert set(c.supported) | set(left) == litert and not set(c.supported) & set(left)
    assert c.total == len(litert) == len(c.supported) + len(left)
    assert set(c.no_kernel) == schema_builtins() - litert and "SHAPE" in c.supported
    assert f"{len(c.supported)} of {c.total} LiteRT builtins supported" in coverage_markdown()
    assert coverage_markdown() in SUPPORTED_MD.read_text()


@pytest.mark.parametrize("op", sorted(builtin_coverage().no_kernel))
def test_builtins_not_counted_have_no_litert_kernel(op: str) -> None:
    """What the count leaves out of LiteRT's list, LiteRT itself refuses to load."""
    b = TfliteBuilder()
    x, y = b.tensor("x", (1, 4)), b.tensor("y", (1, 4))
    b.op(op, [x], [y])
    with pytest.raises(Exception, match="Didn't find op for builtin opcode"):
        Interpreter(model_content=b.build([x], [y]), num_threads=1)


@pytest.mark.parametrize("op", sorted(op for ops in LEFT_OUT.values() for op in ops))
def test_a_left_out_builtin_is_refused_by_name(op: str) -> None:
    b = TfliteBuilder()
    x, y = b.tensor("x", (1, 4)), b.tensor("y", (1, 4))
    b.op(op, [x], [y])
    with pytest.raises(UnsupportedOperator) as err:
        import_tflite(b.build([x], [y]))
    assert err.value.op_type == op


def test_fake_quant_is_bit_exact_at_every_tie_and_on_nan() -> None:
    """FAKE_QUANT rounds half away from zero on a shifted value (two roundings, never one merged affine)
    and sends NaN to the nudged min, as LiteRT does: every output bit for bit, not within a tolerance."""
    c = CASES["fake_quant"]()
    want = litert(c.model, c.feeds)
    got = CuvilModel.load(c.model).predict(c.feeds)
    for name, ref in want.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=name)


def test_fake_quant_narrow_range_is_refused_as_litert_refuses_it() -> None:
    o = Ops()
    x = o.b.tensor("x", (1, 4))
    y = o.op("FAKE_QUANT", [x], (1, 4), options=("FakeQuantOptions", {"Min": -1.0, "Max": 1.0, "NumBits": 8,
                                                                       "NarrowRange": True}))
    with pytest.raises(UnsupportedOperator, match="narrow_range"):
        import_tflite(o.b.build([x], [y]))
