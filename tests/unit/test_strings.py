"""ONNX StringNormalizer on string inputs, built here with onnx.helper, compiled to wasm, run in wasmtime
and compared with onnxruntime on the same inputs: case mapping (ASCII and Latin-1), stopwords with and
without case, [C] and [1, C] inputs, the all-removed output, the byte bound and the import errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import InputError, UnsupportedOperator
from cuvil_edge.oracle import ort_session
from runtime_wasm import InferenceInputError
from runtime_wasm.loader import load_model_dir

S = TensorProto.STRING


def strnorm_model(shape: list[int], nodes: list[onnx.NodeProto] | None = None,
                  **attrs: object) -> onnx.ModelProto:
    """x -> StringNormalizer -> y (or ``nodes`` instead), y's last dim data-dependent; locale C.UTF-8: the
    one this box's onnxruntime can construct (ours maps case the same whatever the locale)."""
    nodes = nodes or [helper.make_node("StringNormalizer", ["x"], ["y"], name="norm", locale="C.UTF-8",
                                       **attrs)]
    g = helper.make_graph(nodes, "strings", [helper.make_tensor_value_info("x", S, shape)],
                          [helper.make_tensor_value_info("y", S, [*shape[:-1], "n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def strs(*xs: str) -> np.ndarray:
    return np.array(xs, dtype=object)


#: every feed has 5 strings: ASCII, Latin-1 letters (mapped), CJK (no case), spaces, empty strings
FEEDS = [strs("Monday", "tuesday", "MONDAY", "Ça va, ÉTÉ", "x"),
         strs("", "monday ", "日本語 Straße", "àÀ×÷ÞþÝý", "Monday"),
         strs("monday", "Monday", "MONDAY", "mOnDaY", "monday")]  # all removed without case


@pytest.mark.parametrize("attrs", [
    {"case_change_action": "UPPER", "is_case_sensitive": 0, "stopwords": ["monday", "été"]},
    {"case_change_action": "LOWER", "is_case_sensitive": 1, "stopwords": ["Monday", "x"]},
    {"case_change_action": "NONE", "is_case_sensitive": 0, "stopwords": ["MONDAY", "ça va, été"]},
    {"case_change_action": "NONE", "is_case_sensitive": 1},
], ids=["upper-nocase", "lower-case", "none-nocase", "none-nostops"])
def test_strnorm_matches_onnxruntime(attrs: dict[str, object]) -> None:
    m = strnorm_model([5], **attrs)
    sess = ort_session(m)
    with CuvilModel.load(m).optimize(targets=[Target()]) as cm:
        assert cm.spec.inputs[0].dtype == "S64" and "y:length" not in cm.predict(FEEDS[0])
        for x in FEEDS:
            got, (want,) = cm.predict({"x": x})["y"], sess.run(None, {"x": x})
            assert got.dtype == object and got.shape == want.shape, (got, want)
            assert got.tolist() == want.tolist()


def test_strnorm_two_dim_and_all_removed() -> None:
    """[1, C] keeps its leading 1; nothing kept: [1, 1] holding one empty string, as onnxruntime."""
    m = strnorm_model([1, 4], case_change_action="LOWER", is_case_sensitive=0, stopwords=["monday"])
    sess = ort_session(m)
    with CuvilModel.load(m).optimize(targets=[Target()]) as cm:
        for x in (strs("A", "MONDAY", "b", "Monday").reshape(1, 4), strs("monday", "MONDAY", "Monday",
                                                                          "mondaY").reshape(1, 4)):
            got, (want,) = cm.predict({"x": x})["y"], sess.run(None, {"x": x})
            assert got.shape == want.shape and got.tolist() == want.tolist(), (got, want)
        assert got.tolist() == [[""]]


def test_string_longer_than_the_bound_is_refused(tmp_path: Path) -> None:
    """The bound counts UTF-8 bytes: 8 fit (4 two-byte letters), 9 are a typed error naming the input and
    the bound (the runtime's own, the API's ``InputError`` above it), and the model still answers; the
    saved model, loaded by the device runtime alone, reads the bound from its spec."""
    m = strnorm_model([2], case_change_action="UPPER")
    with CuvilModel.load(m, max_string_bytes=8).optimize(targets=[Target()]) as cm:
        assert cm.spec.inputs[0].dtype == "S8"
        assert cm.predict({"x": strs("éèàç", "abcdefgh")})["y"].tolist() == ["ÉÈÀÇ", "ABCDEFGH"]
        too_long = r"input 'x' holds a string of 9 UTF-8 bytes.*most 8"
        with pytest.raises(InferenceInputError, match=too_long):
            cm.instance.predict({"x": strs("ok", "abcdefghi")})
        with pytest.raises(InputError, match=too_long):
            cm.predict({"x": strs("ok", "abcdefghi")})
        with pytest.raises(InputError, match="input 'x' must be strings"):
            cm.predict({"x": np.zeros(2, np.float32)})
        assert cm.predict({"x": strs("a", "b")})["y"].tolist() == ["A", "B"]
        saved = cm.save(tmp_path / "m")
    with load_model_dir(saved) as wm:
        assert wm.predict({"x": strs("ça", "")})["y"].tolist() == ["ÇA", ""]
        with pytest.raises(InferenceInputError, match=too_long):
            wm.predict({"x": strs("ok", "abcdefghi")})


def test_other_ops_on_strings_fail_at_import() -> None:
    """Only StringNormalizer carries strings: another op reading one, a string constant (node or
    initializer), or one StringNormalizer reading the other's run-time-length output, is named."""
    ident = strnorm_model([2], nodes=[helper.make_node("Identity", ["x"], ["x2"], name="copy"),
                                      helper.make_node("StringNormalizer", ["x2"], ["y"], name="norm")])
    with pytest.raises(UnsupportedOperator, match=r"'Identity' at node 'copy'.*string tensors"):
        CuvilModel.load(ident)
    words = onnx.numpy_helper.from_array(strs("a", "b"), "words")
    held = strnorm_model([2], nodes=[helper.make_node("Constant", [], ["c"], name="words", value=words),
                                     helper.make_node("StringNormalizer", ["c"], ["y"], name="norm")])
    with pytest.raises(UnsupportedOperator, match=r"'Constant' at node 'words'.*string tensors"):
        CuvilModel.load(held)
    held.graph.node.pop(0)
    held.graph.initializer.append(words)
    held.graph.node[0].input[0] = "words"
    with pytest.raises(UnsupportedOperator, match=r"'Initializer' at node 'words'.*string tensors"):
        CuvilModel.load(held)
    chained = strnorm_model([2], nodes=[helper.make_node("StringNormalizer", ["x"], ["x2"], name="first"),
                                        helper.make_node("StringNormalizer", ["x2"], ["y"], name="second")])
    with pytest.raises(UnsupportedOperator, match=r"'StringNormalizer' at node 'second'.*run-time length"):
        CuvilModel.load(chained)
