"""Intra-op threads: a module built for N threads runs on 1..N over one shared memory, bit-identical to one
thread, and a stopped or trapped job leaves the model serving."""

from __future__ import annotations

import gc
import json
import threading

import numpy as np
import pytest

from cuvil_edge.model import CuvilModel
from cuvil_edge.oracle import ort_session
from cuvil_edge.testing import zoo, zoo_transformers
from cuvil_edge.testing.zoo import NetBuilder
from runtime_wasm.cache import ModuleCache
from runtime_wasm.engine import EngineConfig
from runtime_wasm.errors import InferenceTrap, ModuleLoadError, SpecError
from runtime_wasm.instance import available_cores, resolve_threads
from runtime_wasm.spec import ModelSpec
from tests.support.threads import TARGET, build_threaded, open_threaded, seeded_inputs

pytestmark = pytest.mark.integration


def _cuvil_threads() -> int:
    return sum(t.name.startswith("cuvil-thread-") for t in threading.enumerate())


#: sizes where the elementwise, pooling and normalisation nodes are big enough to be split too
NETS = {
    "resnet": zoo.resnet,
    "mobilenet": zoo.mobilenet,
    "unet": zoo.unet,
    "audio": zoo.audio,
    "mlp": zoo.mlp,
    "bert": lambda: zoo_transformers.bert_encoder(layers=1, hidden=256, heads=4, ffn=512, seq=64),
}


@pytest.mark.parametrize("net", sorted(NETS))
def test_threaded_outputs_equal_one_thread_bit_for_bit(net):
    """Every split kernel computes each output element with the code one thread runs: any thread count
    gives the same bits (including 3, which splits nothing evenly)."""
    model = build_threaded(NETS[net]())
    assert model.spec.threads == 4
    xs = seeded_inputs(model.spec)
    outputs = {}
    for n in (1, 2, 3):
        with open_threaded(model, n) as m:
            assert m.threads == n
            outputs[n] = [m.predict(xs) for _ in range(2)]  # a second job reuses the parked threads
    for n in (2, 3):
        for run in outputs[n]:
            for name, ref in outputs[1][0].items():
                assert np.array_equal(run[name], ref), (net, n, name)


def _conv(c: int, m: int, size: int, k: int, stride: int, group: int = 1):
    """One Conv node, seeded weights, ``size`` x ``size`` input."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(1).standard_normal((m, c // group, k, k)).astype(np.float32) * 0.1
    out = (size + 2 * (k // 2) - k) // stride + 1
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[k // 2] * 4, strides=[stride] * 2, group=group)],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, out, out])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape", [(3, 96, 224, 11, 4, 1), (384, 384, 13, 3, 1, 2), (8, 8, 160, 3, 1, 1)])
def test_im2col_convs_whose_last_pixel_chunk_is_smaller(shape):
    """Threads pack and multiply their own pixels with no barrier between chunks: a thread may pack the
    next chunk while another still reads this one, so each packs where its share of a full chunk lives
    (an AlexNet stem, a grouped conv and a direct conv, several runs each)."""
    model = build_threaded(_conv(*shape))
    xs = seeded_inputs(model.spec)
    with open_threaded(model, 1) as one:
        ref = one.predict(xs)
    for n in (2, 3):
        with open_threaded(model, n) as m:
            for _ in range(4):
                assert all(np.array_equal(v, ref[k]) for k, v in m.predict(xs).items()), (shape, n)


def _body(model: CuvilModel) -> str:
    """The generated C of ``run``'s nodes (the kernels' own code left out)."""
    src = model.compiled.program.source
    return src.split("cuvil_body(const int tid) {")[1].split("CUVIL_ENTRY_POINTS")[0]


def _body_nodes(model: CuvilModel) -> list[tuple[str, bool]]:
    """(node name, barrier before it) in the order ``run`` executes them, from the generated C."""
    out, barrier = [], False
    for line in _body(model).splitlines():
        if line == "  cuvil_barrier();":
            barrier = True
        elif line.startswith("  /* "):
            out.append((line[5:].split(":")[0], barrier))
            barrier = False
    return out


def _assert_threads_match_one(model: CuvilModel, counts=(2, 3, 4), runs: int = 3) -> None:
    xs = seeded_inputs(model.spec)
    with open_threaded(model, 1) as one:
        ref = one.predict(xs)
    for n in counts:
        with open_threaded(model, n) as m:
            for _ in range(runs):
                out = m.predict(xs)
                assert all(np.array_equal(out[k], ref[k]) for k in ref), n


def _chain():
    """Four elementwise nodes split alike over [64, 512], then nodes that read across their partition:
    a softmax by rows (split by rows), two transposes (thread 0 alone) and a softmax by rows again."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node("Mul", ["b", "x"], ["c"]), helper.make_node("Abs", ["c"], ["d"]),
             helper.make_node("Softmax", ["d"], ["s"], axis=-1),
             helper.make_node("Transpose", ["s"], ["t"], perm=[1, 0]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["u"], perm=[1, 0]),
             helper.make_node("Softmax", ["u"], ["y"], axis=-1)]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", f32, [64, 512])],
                              [helper.make_tensor_value_info("y", f32, [128, 256])],
                              [helper.make_tensor("shape", TensorProto.INT64, [2], [256, 128])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_nodes_split_alike_share_no_barrier_and_give_the_same_bits():
    """A barrier only where a node may touch bytes another thread wrote (or reads what it overwrites):
    none inside the same-partition chain or between serial nodes, one before each node that reads across."""
    model = build_threaded(_chain())
    order = _body_nodes(model)
    ops = {n.name: n.op for n in model.graph.nodes}
    kinds = [ops[name] for name, _ in order]
    assert kinds == ["unary", "unary", "binary_f32", "unary", "softmax", "transpose", "transpose",
                     "softmax"], kinds
    split = set(model.compiled.program.parallel_nodes)
    assert {name for name, _ in order[:5]} <= split and order[5][0] not in split and order[6][0] not in split
    assert [b for _, b in order] == [False, False, False, False, True, True, False, True]
    assert _body(model).count("cuvil_barrier();") == 3  # and none after the last node
    _assert_threads_match_one(model)


def _neck():
    """A YOLO-style neck at sizes where its data movement splits: channel slices, an add, a concat of
    views, chained 5x5 max pools, a nearest 2x upsample, a 3-D max pool and a concat along the pixels."""
    b = NetBuilder("neck")
    y = b.conv("x", 32, 64, 1)
    halves = [b.op("Slice", [y, *(b.const(np.array([v], np.int64), "s") for v in (lo, lo + 32, 1))])
              for lo in (0, 32)]
    z = b.op("Concat", [*halves, b.op("Add", halves)], axis=1)
    pools = [z]
    for _ in range(2):
        pools.append(b.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2] * 4))
    scales = b.const(np.array([1, 1, 2, 2], np.float32), "sc")
    up = b.op("Resize", [b.op("Concat", pools, axis=1), "", scales], mode="nearest")
    vol = b.op("Reshape", [up, b.const(np.array([1, 9, 32, 80, 80], np.int64), "shape")])
    pooled = b.op("MaxPool", [vol], kernel_shape=[3, 3, 3], strides=[1, 2, 2], pads=[1] * 6)
    flat = b.op("Reshape", [pooled, b.const(np.array([1, 288, 1600], np.int64), "flat")])
    head = b.op("Reshape", [b.conv(y, 64, 288, 1), b.const(np.array([1, 288, 1600], np.int64), "head")])
    return b.build([("x", [1, 32, 40, 40])], b.op("Concat", [flat, head], axis=2), [1, 288, 3200])


def test_neck_data_movement_splits_and_gives_the_same_bits():
    model = build_threaded(_neck())
    ops = {n.name: n.op for n in model.graph.nodes}
    split_ops = {ops[n] for n in model.compiled.program.parallel_nodes}
    assert {"slice", "pool", "resize", "concat", "binary_f32", "conv"} <= split_ops, split_ops
    _assert_threads_match_one(model)


def test_fp16_weights_threaded_equal_one_thread():
    """fp16-stored weights are widened by every thread in shares, then a barrier: same bits."""
    model = build_threaded(zoo.resnet(size=48), precision="fp16")
    xs = seeded_inputs(model.spec)
    with open_threaded(model, 1) as one, open_threaded(model, 2) as two:
        a, b = one.predict(xs), two.predict(xs)
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_default_predict_uses_available_cores_and_matches_onnxruntime():
    proto = zoo.mobilenet(size=48)
    model = build_threaded(proto)
    xs = seeded_inputs(model.spec)
    out = model.predict(xs)
    assert model.instance.threads == min(4, available_cores())
    sess = ort_session(proto)
    ref = sess.run(None, {t.name: x for t, x in zip(model.spec.inputs, xs)})
    np.testing.assert_allclose(list(out.values())[0], ref[0], rtol=1e-4, atol=1e-4)
    model.close()


def test_a_stopped_job_traps_and_the_next_one_runs():
    """A job whose threads were stopped (what a trap in any thread does) raises InferenceTrap; the model
    restarts its threads and serves the next request with the same results."""
    model = build_threaded(zoo.resnet(size=48))
    xs = seeded_inputs(model.spec)
    with open_threaded(model, 2) as m:
        ref = m.predict(xs)
        m._exports["cuvil_stop"](m._store)  # fault injection: every waiter wakes and stops
        with pytest.raises(InferenceTrap):
            m.predict(xs)
        assert _cuvil_threads() >= 1  # threads were started again
        again = m.predict(xs)
        assert all(np.array_equal(again[k], ref[k]) for k in ref)


def test_threads_end_on_close_and_on_garbage_collection():
    model = build_threaded(zoo.mlp())
    before = _cuvil_threads()
    m = open_threaded(model, 3)
    assert _cuvil_threads() == before + 2
    m.close()
    m.close()  # idempotent
    assert _cuvil_threads() == before
    with pytest.raises(RuntimeError, match="closed"):
        m.run()
    others = set(threading.enumerate())  # models other tests still hold keep their threads parked
    m = open_threaded(model, 2)
    assert _cuvil_threads() == before + 1
    ours = [t for t in threading.enumerate() if t not in others and t.name.startswith("cuvil-thread-")]
    del m
    gc.collect()
    for t in ours:  # the finalizer stopped them; joining proves they ended
        t.join(timeout=30)
    assert not any(t.is_alive() for t in ours)
    assert _cuvil_threads() == before


def test_opening_and_closing_many_times_never_hangs():
    """Stopping parked threads races with their going to sleep: stop changes the words they wait on, so
    none sleeps through it (a lost wake-up hung close() about once in a few hundred)."""
    model = build_threaded(zoo.mlp())
    xs = seeded_inputs(model.spec)
    done = []

    def cycle() -> None:
        for i in range(200):
            with open_threaded(model, 3) as m:
                if i % 2:
                    m.predict(xs)
        done.append(True)

    t = threading.Thread(target=cycle, daemon=True)
    t.start()
    t.join(timeout=300)  # a hang guard only: the loop takes a few seconds
    assert done, "close() hung waiting for a parked thread"


def test_thread_count_is_clamped_to_what_the_module_was_built_for():
    model = build_threaded(zoo.mlp(), max_threads=2)
    assert model.spec.threads == 2
    with open_threaded(model, 8) as m:
        assert m.threads == 2
    assert resolve_threads(0, 16) == min(16, available_cores())
    assert resolve_threads(5, 2) == 2 and resolve_threads(1, 4) == 1
    with pytest.raises(ValueError):
        resolve_threads(-1, 4)


def test_max_threads_1_builds_a_plain_module():
    model = build_threaded(zoo.mlp(), max_threads=1)
    module = model._built().modules[TARGET.name]
    assert model.spec.threads == 1 and "threads" not in json.loads(model.spec.to_json())
    with open_threaded(model, 4) as m:
        assert m.threads == 1 and not ModuleCache().load(module, EngineConfig(TARGET.tier)).imports
        xs = seeded_inputs(model.spec)
        with open_threaded(build_threaded(zoo.mlp()), 2) as threaded:
            a, b = m.predict(xs), threaded.predict(xs)
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_shared_memory_larger_than_the_limit_is_refused():
    """A shared memory cannot grow and is not counted by the store's limits: the cap is checked at load."""
    model = build_threaded(zoo.mlp())
    with pytest.raises(ModuleLoadError, match="limit"):
        open_threaded(model, 2, memory_limit=1 << 20)


def test_spec_thread_count_is_validated():
    model = build_threaded(zoo.mlp())
    d = json.loads(model.spec.to_json())
    assert d["threads"] == 4
    for bad in (0, 17, "4"):
        with pytest.raises(SpecError, match="threads"):
            ModelSpec.from_json(json.dumps({**d, "threads": bad}))


def test_profiles_set_the_thread_capacity_and_a_given_one_wins():
    """A build for device classes supports as many threads as the largest of them has cores (serving
    uses one fewer by default, the profile's ``threads``): 6 on a Jetson Orin Nano, 16 on the AVX-512
    server class."""
    proto = zoo.mlp().SerializeToString()
    assert CuvilModel.load(proto).optimize(profiles=["jetson-orin-nano"]).spec.threads == 6
    assert CuvilModel.load(proto).optimize(profiles=["raspberry-pi-4", "x86-64-avx512"]).spec.threads == 16
    assert CuvilModel.load(proto).optimize(profiles=["x86-64-avx512"], max_threads=2).spec.threads == 2
