"""Footprint sized to the model: a threaded module's memory grows with the threads a device runs, each
thread's stack and scratch sized from the model, the spec's per-thread table right, outputs bit-identical."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge.codegen.emit import STACK_BYTES
from cuvil_edge.codegen.toolchain import Target, check_stack, module_memory, stack_bound
from cuvil_edge.errors import ToolchainError
from cuvil_edge.model import CuvilModel
from cuvil_edge.testing import zoo
from runtime_wasm.cache import ModuleCache
from runtime_wasm.engine import EngineConfig, engine_for
from runtime_wasm.errors import ModuleLoadError
from runtime_wasm.instance import WasmModel

TARGET = Target("relaxed", "x86")


def _tiny() -> bytes:
    w = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)  # 512 bytes of weights
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                          initializer=[numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _build(proto: bytes, max_threads: int) -> CuvilModel:
    return CuvilModel.load(proto).optimize("fp32", targets=[TARGET], max_threads=max_threads)


def _open(model: CuvilModel, threads: int, memory_limit: int | None = None) -> WasmModel:
    files = model._built()
    config = EngineConfig(TARGET.tier)
    module = ModuleCache().load(files.modules[TARGET.name], config)
    return WasmModel(engine_for(config), module, model.spec, files.weights, memory_limit=memory_limit,
                     threads=threads)


def test_tiny_model_memory_and_table() -> None:
    plain, threaded = _build(_tiny(), 1), _build(_tiny(), 4)
    assert plain.spec.memory == (module_memory(plain._built().modules[TARGET.name]),)
    assert plain.spec.memory[0] < (1 << 20) + (128 << 10)  # its 1 MiB stack, then its few bytes
    table = threaded.spec.memory
    assert len(table) == 4 and list(table) == sorted(table)
    assert table[0] == module_memory(threaded._built().modules[TARGET.name])
    # was 10,551,296 bytes whatever the thread count; on one thread now under 1 MiB: one f32-gemm pack
    # buffer (512 KiB), the others lie in the regions of the threads that run
    assert table[0] < 1 << 20
    assert all(b - a >= 512 << 10 for a, b in zip(table, table[1:]))  # each thread brings its own buffer
    for k in (1, 4):
        m = _open(threaded, k)
        assert m._mem_len() == table[k - 1] and m.threads == k


def test_memory_limit_uses_threads_in_use() -> None:
    model = _build(_tiny(), 4)
    table = model.spec.memory
    _open(model, 1, memory_limit=table[0]).close()
    with pytest.raises(ModuleLoadError, match="needs"):
        _open(model, 4, memory_limit=table[0])


def test_stacks_bounded_and_outputs_bit_identical() -> None:
    model = _build(zoo.mobilenet().SerializeToString(), 4)
    wasm = model._built().modules[TARGET.name]
    assert 0 < 2 * stack_bound(wasm) <= STACK_BYTES
    step = model.spec.memory[1] - model.spec.memory[0]  # one more thread: its stack and scratch
    assert step >= STACK_BYTES, model.spec.memory
    x = np.random.default_rng(1).standard_normal(model.spec.inputs[0].shape).astype(np.float32)
    outs = []
    for k in (1, 2, 4):
        m = _open(model, k)
        outs.append(next(iter(m.predict([x]).values())).copy())
        assert m._mem_len() == model.spec.memory[k - 1]
        m.close()
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_frames_past_half_the_stack_are_refused() -> None:
    frame = b"\x23\x80\x80\x80\x80\x00\x41\xc0\xb8\x02\x6b"  # global.get sp; i32.const 40000; i32.sub
    wasm = b"\0asm\1\0\0\0" + bytes([10, len(frame)]) + frame
    assert stack_bound(wasm) == 40000
    check_stack(wasm, [f"-Wl,-z,stack-size={1 << 20}"], TARGET)
    with pytest.raises(ToolchainError, match="40000 bytes"):
        check_stack(wasm, [f"-Wl,-z,stack-size={STACK_BYTES}"], TARGET)
