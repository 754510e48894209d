"""Stateful TFLite models: resource variables with a CALL_ONCE initializer, compiled and run step by step
against LiteRT's interpreter (state carried in both), reset, and run again; the device loader and a
plain (single-threaded) build carry state the same way; stateless models are unaffected."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from ai_edge_litert.interpreter import Interpreter
from onnx import TensorProto, helper

from cuvil_edge import CuvilModel
from cuvil_edge.cli import main
from cuvil_edge.errors import QuantizationError, UnsupportedOperator
from cuvil_edge.frontend.tflite import import_tflite
from runtime_wasm.errors import PolicyError, SpecError
from runtime_wasm.loader import load_model_dir
from runtime_wasm.policy import RuntimePolicy
from runtime_wasm.scheduler import Scheduler
from runtime_wasm.spec import ModelSpec
from runtime_wasm.supervisor import ModelSource, SupervisedModel
from tests.support.tflite_builder import TfliteBuilder
from tests.support.tflite_stateful import INIT, RNG, streaming, variable_handle


class LiteRT:
    """The oracle: one interpreter, whose resource variables persist from one invoke to the next."""

    def __init__(self, data: bytes) -> None:
        self.it = Interpreter(model_content=data, num_threads=1)
        self.it.allocate_tensors()

    def step(self, x: np.ndarray) -> dict[str, np.ndarray]:
        self.it.set_tensor(self.it.get_input_details()[0]["index"], x)
        self.it.invoke()
        return {d["name"]: self.it.get_tensor(d["index"]) for d in self.it.get_output_details()}


def steps(n: int) -> list[np.ndarray]:
    return [RNG.standard_normal((1, 4)).astype(np.float32) for _ in range(n)]


def check_steps(predict, oracle: LiteRT, xs: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    got_all = []
    for i, x in enumerate(xs):
        want, got = oracle.step(x), predict(x)
        assert sorted(got) == sorted(want)
        for name, ref in want.items():
            np.testing.assert_allclose(got[name], ref, atol=1e-4, rtol=1e-4, err_msg=f"step {i}: {name}")
        got_all.append(got)
    return got_all


@pytest.fixture(scope="module")
def data() -> bytes:
    return streaming()


@pytest.fixture(scope="module")
def model(data: bytes) -> CuvilModel:
    m = CuvilModel.load(data).optimize()
    yield m
    m.close()


def test_state_carries_across_predicts_like_litert_and_resets(data: bytes, model: CuvilModel) -> None:
    assert model.spec.threads > 1  # the default threaded build (its FCs split across threads)
    model.threads = 0
    predict = lambda x: model.predict([x])  # noqa: E731
    first = check_steps(predict, LiteRT(data), xs := steps(5))
    assert not np.allclose(first[0]["total"], first[-1]["total"])  # the state really moved
    model.reset_state()
    again = check_steps(predict, LiteRT(data), xs[:3])  # a fresh interpreter: the initial state
    for a, b in zip(first, again):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    model.reset_state()
    model.reset_state()  # twice in a row: still the initial state
    check_steps(predict, LiteRT(data), steps(2))


def test_spec_records_states_and_only_assigned_variables_persist(model: CuvilModel) -> None:
    spec = model.spec
    assert [t.name for t in spec.inputs] == ["x"]
    assert [t.name for t in spec.outputs] == ["y", "scaled_ema", "total"]
    assert spec.stateful and sorted(s.name for s in spec.states) == ["ema", "h", "total"]  # gain: read only
    assert "gain" not in [v.name for v in model.graph.inputs]
    again = ModelSpec.from_json(spec.to_json())
    assert again.states == spec.states
    inst = model.instance
    inst.reset_state()
    for s in spec.states:
        np.testing.assert_array_equal(inst.state_views[s.name], INIT[s.name])
    inst.predict([np.ones((1, 4), np.float32)])
    np.testing.assert_allclose(inst.state_views["total"], np.ones((1, 4)))
    np.testing.assert_allclose(inst.state_views["ema"], np.full((1, 4), 0.55), rtol=1e-6)


def test_device_loader_and_plain_build_carry_state(data: bytes, model: CuvilModel, tmp_path, capsys) -> None:
    xs = steps(4)
    model.save(tmp_path / "threaded")
    assert main(["inspect", str(tmp_path / "threaded")]) == 0
    assert "  state  ema: float32[1, 4] @arena+" in capsys.readouterr().out
    plain = CuvilModel.load(data).optimize(max_threads=1)
    assert plain.spec.threads == 1 and plain.spec.stateful
    plain.save(tmp_path / "plain")
    for name, threads in (("threaded", 2), ("plain", 1)):
        with load_model_dir(tmp_path / name, threads=threads) as wm:
            assert wm.spec.stateful
            predict = lambda x: wm.predict([x])  # noqa: E731
            check_steps(predict, LiteRT(data), xs)
            wm.reset_state()
            check_steps(predict, LiteRT(data), xs)


def feedback() -> bytes:
    """acc' = FC(x + acc): the last node, a threaded FC, writes the state and nothing reads it after."""
    b = TfliteBuilder()
    first = b.subgraph()
    acc0 = first.const("acc_0", np.ones((1, 16), np.float32))
    first.op("ASSIGN_VARIABLE", [variable_handle(first, "acc"), acc0], [])
    x = b.tensor("x", (1, 16))
    b.op("CALL_ONCE", [], [], ("CallOnceOptions", {"InitSubgraphIndex": 1}))
    h = variable_handle(b, "acc")
    prev, out, new = b.tensor("acc_prev", (1, 16)), b.tensor("out", (1, 16)), b.tensor("acc_new", (1, 16))
    b.op("READ_VARIABLE", [h], [prev])
    b.op("ADD", [x, prev], [out], ("AddOptions", {}))
    w = (RNG.standard_normal((16, 16)) * 0.25).astype(np.float32)
    b.op("FULLY_CONNECTED", [out, b.const("w", w)], [new], ("FullyConnectedOptions", {}))
    b.op("ASSIGN_VARIABLE", [h, new], [])
    return b.build([x], [out], subgraphs=((first, [], []),))


def test_state_written_by_a_threaded_last_node() -> None:
    data = feedback()
    m = CuvilModel.load(data).optimize()
    src = m.compiled.program.source
    assert m.compiled.program.parallel_nodes[-1] == m.graph.nodes[-1].name  # the FC, split across threads
    assert "  cuvil_barrier();\n  /* state: the new values replace the old */" in src
    m.threads = 2
    check_steps(lambda x: m.predict([x]), LiteRT(data), xs := [x.repeat(4, axis=1) for x in steps(4)])
    m.reset_state()
    check_steps(lambda x: m.predict([x]), LiteRT(data), xs)
    m.close()


def int8_accumulator() -> bytes:
    """A full-int8 running sum: int8 input, variable and output, one quantization (scale 0.1, zp 3)."""
    q = ([0.1], [3], 0)
    b = TfliteBuilder()
    first = b.subgraph()
    acc0 = first.const("acc_0", np.full((1, 8), 5, np.int8), q)
    first.op("ASSIGN_VARIABLE", [variable_handle(first, "acc"), acc0], [])
    x = b.tensor("x", (1, 8), "int8", q)
    b.op("CALL_ONCE", [], [], ("CallOnceOptions", {"InitSubgraphIndex": 1}))
    h = variable_handle(b, "acc")
    prev, new = b.tensor("acc_prev", (1, 8), "int8", q), b.tensor("acc_new", (1, 8), "int8", q)
    b.op("READ_VARIABLE", [h], [prev])
    b.op("ADD", [x, prev], [new], ("AddOptions", {}))
    b.op("ASSIGN_VARIABLE", [h, new], [])
    return b.build([x], [new], subgraphs=((first, [], []),))


def test_int8_state_matches_litert_exactly() -> None:
    """The variable is held as its real value; read back through the same quantization it is the same
    integers, so the sum matches LiteRT's bit for bit, step after step."""
    data = int8_accumulator()
    with CuvilModel.load(data) as m:
        xs = [RNG.integers(-10, 10, (1, 8), dtype=np.int8) for _ in range(5)]
        oracle = LiteRT(data)
        for x in xs:
            np.testing.assert_array_equal(m.predict([x])["acc_new"], oracle.step(x)["acc_new"])


def test_a_supervised_worker_keeps_the_state_until_it_restarts(data: bytes, model: CuvilModel,
                                                                tmp_path) -> None:
    """Served, the state lives in the one worker process: requests carry it on; a restart (as after a
    deadline kill) starts from the initial values."""
    model.save(tmp_path / "m")
    xs = steps(3)
    with SupervisedModel(ModelSource.from_dir(tmp_path / "m"), 256 << 20, threads=1) as served:
        predict = lambda x: served.predict([x], timeout_s=60)  # noqa: E731
        check_steps(predict, LiteRT(data), xs)
        served.restart()
        check_steps(predict, LiteRT(data), xs)


def test_a_stateful_model_gets_no_fallback_with_its_own_state(model: CuvilModel, tmp_path) -> None:
    """Degrading to a cheaper variant would switch to a worker holding another state: refused."""
    model.save(tmp_path / "m")
    src = ModelSource.from_dir(tmp_path / "m")
    with pytest.raises(PolicyError, match="stateful"):
        Scheduler(src, RuntimePolicy(degrade_action="cheaper_variant"), fallback=src)


def test_stateless_models_are_unaffected(tmp_path) -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(proto)
    m = CuvilModel.load(proto).optimize(max_threads=1)
    assert m.spec.states == () and not m.spec.stateful
    assert "states" not in json.loads(m.spec.to_json())
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    m.reset_state()
    np.testing.assert_array_equal(m.predict([x])["y"], np.maximum(x, 0))
    m.reset_state()  # nothing to reset, nothing breaks
    np.testing.assert_array_equal(m.predict([x])["y"], np.maximum(x, 0))


def test_stateful_model_is_not_requantized(data: bytes) -> None:
    with pytest.raises(QuantizationError, match="stateful"):
        CuvilModel.load(data).optimize(precision="int8", calibration=[np.zeros((1, 4), np.float32)])


def test_uninitialized_and_mistyped_variables_fail_at_import() -> None:
    b = TfliteBuilder()
    x = b.tensor("x", (1, 4))
    prev = b.tensor("prev", (1, 4))
    b.op("READ_VARIABLE", [variable_handle(b, "orphan")], [prev])
    y = b.tensor("y", (1, 4))
    b.op("ADD", [prev, x], [y], ("AddOptions", {}))
    with pytest.raises(UnsupportedOperator, match=r"READ_VARIABLE.*operator index 1.*'orphan'"):
        import_tflite(b.build([x], [y]))
    with pytest.raises(UnsupportedOperator, match=r"ASSIGN_VARIABLE.*'h' holds float32\[1,4\], assigned "
                                                  r"float32\[1,8\]"):
        import_tflite(streaming({**INIT, "h": np.zeros((1, 4), np.float32)}, h_width=4))


def test_malformed_state_in_spec_is_a_spec_error(model: CuvilModel) -> None:
    d = json.loads(model.spec.to_json())
    d["states"][0]["init_offset"] = model.spec.weights_size
    with pytest.raises(SpecError, match="initial value lies outside the weights"):
        ModelSpec.from_json(json.dumps(d))
    del d["states"][0]["init_offset"]
    with pytest.raises(SpecError, match="malformed"):
        ModelSpec.from_json(json.dumps(d))
