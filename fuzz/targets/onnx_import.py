"""The ONNX importer as ``CuvilModel.load`` runs it on a model file's bytes: ``import_onnx`` (read, checker,
opset upgrade, topological sort, every converter with its shape inference and constant folding, the
QDQ fusion) and then the IR verifier the build runs first; not the C compiler or the wasm build.

The importer's contract: any bytes in, a ``Graph`` that passes ``verify`` or a ``CuvilError`` out, within
the memory the engine's bound allows (``cuvil_edge.ir.limits``: what an import may materialise). It
accepts only models that pass ``onnx.checker.check_model`` (the default, not full, check: no shape
inference), so the checker is the first gate a mutated model meets; what it lets through (dangling
inputs are not its business in every case, attribute values and dims are not checked against each other,
nor raw_data against dims) is what the converters check themselves.

Input: the serialized ``ModelProto``. The mutator parses it and changes one field (an attribute to an
interesting int, a dim, an initializer's dims against its data, an input to a dangling name, an op type,
the opset, a node dropped); bytes that do not parse are mutated byte-wise."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from ..engine import Target, importer_target

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("cuvil_edge.frontend", "cuvil_edge.ir", "cuvil_edge.ops", "cuvil_edge.passes.verify",
              "cuvil_edge.quant.qdq")
#: integers that broke importers before, or are the edges of the types attributes and dims are read as
INTERESTING_INTS = (0, -1, 1, 2, 3, -2, 7, 2**31 - 1, 2**31, -(2**31), 2**32, 2**62, 2**63 - 1, -(2**63),
                    1 << 20, 1 << 40)
#: op types a node is changed to: their converters read the same kinds of inputs differently
OP_TYPES = ("Relu", "Add", "Reshape", "Transpose", "Concat", "Gather", "Slice", "Conv", "MaxPool",
            "AveragePool", "ConstantOfShape", "Range", "Tile", "Expand", "Pad", "Resize", "Split",
            "SequenceConstruct", "ConcatFromSequence", "SequenceAt", "Loop", "If", "ReduceSum", "Cast",
            "Unsqueeze", "Squeeze", "Flatten", "TopK", "OneHot", "Einsum", "DepthToSpace", "Softmax",
            "MatMul", "Gemm", "Where", "NonZero", "Shape", "Size", "Identity", "Dropout", "Trilu", "CumSum",
            "ScatterND", "GatherND", "GatherElements", "Mod", "QuantizeLinear", "DequantizeLinear")


def setup() -> Callable[[bytes], None]:
    from cuvil_edge.frontend.onnx import import_onnx
    from cuvil_edge.frontend.onnx.registry import CONVERTERS
    from cuvil_edge.ops import _load_all  # noqa: F401  (every op family, imported while instrumented)
    from cuvil_edge.passes.verify import verify

    CONVERTERS.get("Relu")  # the converter modules load on first lookup: here, while instrumented

    def one(data: bytes) -> None:
        verify(import_onnx(data), "import")

    return one


def target() -> Target:
    return importer_target("onnx_import", setup, INSTRUMENT, onnx_mutator)


# -- the mutator -------------------------------------------------------------------------------------

def _graphs(g: Any) -> list[Any]:
    """``g`` and every subgraph in it (Loop bodies, If branches)."""
    out = [g]
    for n in g.node:
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                out += _graphs(sub)
    return out


def _int_like(v: int, rng: random.Random) -> int:
    if rng.random() < 0.6:
        return rng.choice(INTERESTING_INTS)
    return v + rng.choice((-1, 1)) * rng.choice((1, 2, 2**8, 2**16, 2**32))


def _mutate_model(m: Any, rng: random.Random) -> bool:
    """Change one field of ``m`` in place; False when the chosen kind of change had nothing to change."""
    from onnx import AttributeProto

    g = rng.choice(_graphs(m.graph))
    nodes, roll = list(g.node), rng.random()
    if roll < 0.3 and nodes:  # an attribute's value
        kinds = (AttributeProto.INT, AttributeProto.INTS, AttributeProto.FLOAT, AttributeProto.TENSOR)
        attrs = [a for n in nodes for a in n.attribute if a.type in kinds]
        if not attrs:
            return False
        a = rng.choice(attrs)
        if a.type == AttributeProto.INT:
            a.i = max(-(2**63), min(2**63 - 1, _int_like(a.i, rng)))
        elif a.type == AttributeProto.FLOAT:
            a.f = rng.choice((0.0, -1.0, 1e30, float("nan"), float("inf")))
        elif a.type == AttributeProto.TENSOR:
            _mutate_dims(a.t, rng)
        elif a.ints and rng.random() < 0.7:
            i = rng.randrange(len(a.ints))
            a.ints[i] = max(-(2**63), min(2**63 - 1, _int_like(a.ints[i], rng)))
        elif a.ints and rng.random() < 0.5:
            del a.ints[-1]
        else:
            a.ints.append(rng.choice(INTERESTING_INTS[:8]))
        return True
    if roll < 0.45:  # a declared dim of an input, output or value_info
        infos = [vi for vi in (*g.input, *g.output, *g.value_info) if vi.type.tensor_type.shape.dim]
        if not infos:
            return False
        dims = rng.choice(infos).type.tensor_type.shape.dim
        d = dims[rng.randrange(len(dims))]
        d.dim_value = max(0, min(2**63 - 1, _int_like(d.dim_value, rng)))
        return True
    if roll < 0.6:  # an initializer's dims (its data stays: they may disagree)
        if not g.initializer:
            return False
        _mutate_dims(rng.choice(g.initializer), rng)
        return True
    if not nodes:
        return False
    n = rng.choice(nodes)
    if roll < 0.72 and n.input:  # an input renamed: dangling, or another value, or omitted
        names = [x for m_ in nodes for x in m_.output] + [i.name for i in g.input]
        n.input[rng.randrange(len(n.input))] = rng.choice(["", "dangling", *names])
    elif roll < 0.8:
        n.op_type = rng.choice(OP_TYPES)
    elif roll < 0.86:
        op = next((o for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
        if op is None:
            return False
        op.version = rng.choice((1, 6, 7, 11, 13, 18, 21, 28, 29, op.version - 1, op.version + 1))
    elif roll < 0.93:
        g.node.remove(n)
    else:  # an input added or dropped
        if n.input and rng.random() < 0.5:
            del n.input[-1]
        else:
            n.input.append(rng.choice([x for m_ in nodes for x in m_.output] or ["dangling"]))
    return True


def _mutate_dims(t: Any, rng: random.Random) -> None:
    if t.dims and rng.random() < 0.7:
        i = rng.randrange(len(t.dims))
        t.dims[i] = max(-(2**63), min(2**63 - 1, _int_like(t.dims[i], rng)))
    elif t.dims and rng.random() < 0.5:
        del t.dims[-1]
    else:
        t.dims.append(rng.choice((0, 1, 2, 1 << 20, 1 << 31)))


def onnx_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    """A ``ModelProto`` with one field changed (1 to 3 changes); 1 in 5, or when it does not parse,
    byte-level."""
    from google.protobuf.message import DecodeError
    from onnx import ModelProto

    rng = random.Random(seed)
    if rng.random() >= 0.2:
        m = ModelProto()
        try:
            m.ParseFromString(data)
        except (DecodeError, RecursionError, ValueError):
            m = None
        if m is not None and m.HasField("graph"):
            changed = False
            try:
                for _ in range(rng.choice((1, 1, 1, 2, 3))):
                    changed |= _mutate_model(m, rng)
                out = m.SerializeToString()
            except (UnicodeDecodeError, ValueError, RecursionError):  # names that are not UTF-8, ...
                changed = False
            if changed and len(out) <= max_size:
                return out
    from ..mutators import _bytes_mutate

    return _bytes_mutate(data, max_size)


# -- the seeds ---------------------------------------------------------------------------------------

def seeds() -> list[bytes]:
    """Small models covering the op families: convolution and pooling, gemm, shape chains folded at
    build time, indexing, reductions, normalization, QDQ, control flow (Loop, If), sequences, resize,
    ops expanded from their ONNX functions; fp16 and an old opset upgraded."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    from onnx import shape_inference

    def model(nodes: list, inputs: list, outputs: list, inits: tuple = (), opset: int = 17,
              ml: int = 0) -> bytes:
        """The graph with its outputs typed by onnx's shape inference (the checker wants a shape); ``ml``:
        the ai.onnx.ml opset it imports too."""
        outs = [h.make_empty_tensor_value_info(o) if isinstance(o, str) else o for o in outputs]
        opsets = [h.make_opsetid("", opset)] + ([h.make_opsetid("ai.onnx.ml", ml)] if ml else [])
        m = h.make_model(h.make_graph(nodes, "g", inputs, outs, list(inits)), opset_imports=opsets)
        m.ir_version = 8
        known = {vi.name: vi for vi in shape_inference.infer_shapes(m).graph.value_info}
        for o in m.graph.output:
            o.CopyFrom(known.get(o.name, o))
        return m.SerializeToString()

    def f32(name: str, shape: list, elem: int = T.FLOAT) -> Any:
        return h.make_tensor_value_info(name, elem, shape)

    def c(name: str, arr: Any) -> Any:
        return nh.from_array(np.asarray(arr), name)

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    x4, y = f32("x", [1, 3, 8, 8]), "y"
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    out = [
        model([h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1],
                           dilations=[1, 1]),
               h.make_node("Relu", ["c"], ["r"]),
               h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
               h.make_node("GlobalAveragePool", ["p"], ["y"])],
              [x4], [y], (c("w", w), c("b", np.zeros(4, np.float32)))),
        model([h.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                           strides=[2, 2]),
               h.make_node("ConvTranspose", ["a", "wt"], ["y"], strides=[2, 2], group=1)],
              [x4], [y], (c("wt", w.transpose(1, 0, 2, 3).copy()),)),
        model([h.make_node("Conv", ["x", "dw"], ["c"], group=3, kernel_shape=[3, 3], auto_pad="SAME_UPPER"),
               h.make_node("BatchNormalization", ["c", "s", "o", "o", "s"], ["y"], epsilon=1e-5)],
              [x4], [y], (c("dw", w[:3, :1]), c("s", np.ones(3, np.float32)),
                          c("o", np.zeros(3, np.float32)))),
        model([h.make_node("Gemm", ["x", "gw", "gb"], ["g"], transB=1, alpha=1.0),
               h.make_node("Softmax", ["g"], ["y"], axis=-1)],
              [f32("x", [2, 6])], [y], (c("gw", rng.standard_normal((5, 6)).astype(np.float32)),
                                        c("gb", np.zeros(5, np.float32)))),
        model([h.make_node("MatMul", ["x", "mw"], ["m"]), h.make_node("Add", ["m", "x"], ["a"]),
               h.make_node("LayerNormalization", ["a", "s", "o"], ["y"], axis=-1, epsilon=1e-5)],
              [f32("x", [2, 3, 4])], [y], (c("mw", np.eye(4, dtype=np.float32)),
                                           c("s", np.ones(4, np.float32)), c("o", np.zeros(4, np.float32)))),
        model([h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i0"], ["n"], axis=0),
               h.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
               h.make_node("Concat", ["n1", "m1"], ["shp"], axis=0),
               h.make_node("Reshape", ["x", "shp"], ["y"])],
              [f32("x", [2, 3, 4])], [y], (c("i0", np.int64(0)), c("ax", i64(0)), c("m1", i64(-1)))),
        model([h.make_node("ConstantOfShape", ["shp"], ["z"], value=c("v", np.array([1.5], np.float32))),
               h.make_node("Range", ["s0", "lim", "d"], ["r"]),
               h.make_node("Cast", ["r"], ["rf"], to=T.FLOAT),
               h.make_node("Add", ["z", "rf"], ["zr"]), h.make_node("Mul", ["x", "zr"], ["y"])],
              [f32("x", [2, 4])], [y], (c("shp", i64(2, 4)), c("s0", np.int64(0)), c("lim", np.int64(4)),
                                        c("d", np.int64(1)))),
        model([h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
               h.make_node("Transpose", ["s"], ["t"], perm=[1, 0, 2]),
               h.make_node("Tile", ["t", "rep"], ["tt"]), h.make_node("Expand", ["tt", "es"], ["y"])],
              [f32("x", [4, 3, 2])], [y], (c("st", i64(0, 1)), c("en", i64(4, 3)), c("ax", i64(0, 1)),
                                           c("sp", i64(2, 1)), c("rep", i64(1, 2, 1)),
                                           c("es", i64(2, 1, 1, 1)))),
        model([h.make_node("Pad", ["x", "pads", "pv"], ["p"], mode="constant"),
               h.make_node("Split", ["p", "sp"], ["a", "b"], axis=1), h.make_node("Sub", ["a", "b"], ["y"])],
              [f32("x", [2, 4])], [y],
              (c("pads", i64(0, 1, 0, 1)), c("pv", np.float32(0)), c("sp", i64(3, 3)))),
        model([h.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=1),
               h.make_node("ReduceMean", ["x"], ["m"], axes=[1], keepdims=0),
               h.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
               h.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=-1),
               h.make_node("CumSum", ["x", "cax"], ["y"])],
              [f32("x", [3, 5])], [y, "s", "m", "am", "tv"],
              (c("ax", i64(1)), c("k", i64(2)), c("cax", np.int64(1)))),
        model([h.make_node("GatherElements", ["x", "gi"], ["ge"], axis=1),
               h.make_node("ScatterND", ["x", "si", "su"], ["sn"]),
               h.make_node("Where", ["cond", "ge", "x"], ["y"])],
              [f32("x", [2, 3])], [y, "sn"],
              (c("gi", i64(0, 2, 1, 0, 2, 1).reshape(2, 3)), c("si", i64(1, 0).reshape(2, 1)),
               c("su", np.ones((2, 3), np.float32)), c("cond", np.array([True, False, True])))),
        model([h.make_node("QuantizeLinear", ["x", "sc", "zp"], ["q"]),
               h.make_node("DequantizeLinear", ["q", "sc", "zp"], ["dq"]),
               h.make_node("DequantizeLinear", ["qw", "sc", "zp"], ["dw"]),
               h.make_node("MatMul", ["dq", "dw"], ["y"])],
              [f32("x", [2, 4])], [y], (c("sc", np.float32(0.1)), c("zp", np.uint8(128)),
                                        c("qw", rng.integers(0, 255, (4, 3), dtype=np.uint8)))),
        model([h.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")],
              [x4], [y], (c("sc", np.array([1, 1, 2, 2], np.float32)),)),
        model([h.make_node("DepthToSpace", ["x"], ["d"], blocksize=2),
               h.make_node("SpaceToDepth", ["d"], ["s"], blocksize=2),
               h.make_node("Flatten", ["s"], ["f"], axis=1), h.make_node("Squeeze", ["f"], ["y"])],
              [f32("x", [1, 4, 2, 2])], [y]),
        model([h.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")],
              [f32("a", [2, 3]), f32("b", [3, 4])], [y]),
        model([h.make_node("OneHot", ["i", "depth", "vals"], ["o"], axis=-1),
               h.make_node("Trilu", ["o"], ["y"], upper=1)],
              [f32("i", [3], T.INT64)], [y],
              (c("depth", np.int64(4)), c("vals", np.array([0, 1], np.float32)))),
        model([h.make_node("Loop", ["trip", ""], ["y"], body=h.make_graph(
                  [h.make_node("Identity", ["cond_in"], ["cond_out"]),
                   h.make_node("Mul", ["x", "two"], ["s"])], "body",
                  [f32("it", [], T.INT64), f32("cond_in", [], T.BOOL)],
                  [f32("cond_out", [], T.BOOL), f32("s", [2])],
                  [c("two", np.float32(2))]))],
              [f32("x", [2])], [y], (c("trip", np.int64(3)),)),
        model([h.make_node("If", ["cond"], ["y"],
                           then_branch=h.make_graph([h.make_node("Neg", ["x"], ["t"])], "then", [],
                                                    [f32("t", [2])]),
                           else_branch=h.make_graph([h.make_node("Abs", ["x"], ["e"])], "else", [],
                                                    [f32("e", [2])]))],
              [f32("x", [2]), f32("cond", [], T.BOOL)], [y]),
        model([h.make_node("SplitToSequence", ["x"], ["sq"], axis=0),
               h.make_node("SequenceAt", ["sq", "i1"], ["a"]),
               h.make_node("ConcatFromSequence", ["sq"], ["b"], axis=1),
               h.make_node("SequenceLength", ["sq"], ["n"]), h.make_node("Cast", ["n"], ["nf"], to=T.FLOAT),
               h.make_node("Mul", ["b", "nf"], ["y"])],
              [f32("x", [3, 2])], [y, "a"], (c("i1", np.int64(1)),)),
        model([h.make_node("MeanVarianceNormalization", ["x"], ["m"]),
               h.make_node("HardSwish", ["m"], ["y"])],
              [x4], [f32("y", [1, 3, 8, 8])]),
        model([h.make_node("Cast", ["x"], ["h"], to=T.FLOAT16), h.make_node("Sigmoid", ["h"], ["y"])],
              [f32("x", [2, 3])], ["y"]),
        model([h.make_node("Relu", ["x"], ["r"]), h.make_node("Reshape", ["r", "shp"], ["y"])],
              [f32("x", [2, 3])], [y], (c("shp", i64(3, 2)),), opset=6),
        model([h.make_node("Size", ["x"], ["y"]),
               h.make_node("Mod", ["a", "b"], ["md"], fmod=0)],
              [f32("x", [2, 3]), f32("a", [3], T.INT32), f32("b", [3], T.INT32)],
              ["y", "md"]),
        # the fourth session's converters: ONNX-ML trees, n-gram counts, bit views, KV-cache writes, argmax
        # pooling, double math, general Einsum, sequence graph inputs and outputs
        model([h.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1,
                           nodes_treeids=[0, 0, 0, 1], nodes_nodeids=[0, 1, 2, 0],
                           nodes_featureids=[1, 0, 0, 0],
                           nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF", "LEAF"], nodes_values=[0.5, 0, 0, 0],
                           nodes_truenodeids=[1, 0, 0, 0], nodes_falsenodeids=[2, 0, 0, 0],
                           target_treeids=[0, 0, 1], target_nodeids=[1, 2, 0], target_ids=[0, 0, 0],
                           target_weights=[1.0, -1.0, 0.25], aggregate_function="AVERAGE"),
               h.make_node("Binarizer", ["y"], ["b"], domain="ai.onnx.ml", threshold=0.1)],
              [f32("x", [4, 2])], [y, "b"], ml=3),
        model([h.make_node("TfIdfVectorizer", ["t"], ["y"], mode="TFIDF", min_gram_length=1,
                           max_gram_length=2, max_skip_count=1, ngram_counts=[0, 2], ngram_indexes=[0, 1, 2],
                           pool_int64s=[3, 5, 3, 5], weights=[0.5, 1.0, 2.0])],
              [f32("t", [2, 6], T.INT64)], [y], opset=9),
        model([h.make_node("BitCast", ["x"], ["i"], to=T.INT32),
               h.make_node("Pow", ["i", "e"], ["y"]), h.make_node("Mod", ["x", "x"], ["m"], fmod=0)],
              [f32("x", [4])], [y, "m"], (c("e", np.float32(2)),), opset=28),
        model([h.make_node("TensorScatter", ["cache", "upd", "wi"], ["y"], axis=-2, mode="circular"),
               h.make_node("MaxPool", ["cache"], ["p", "pi"], kernel_shape=[2, 2], storage_order=1)],
              [f32("cache", [1, 2, 4, 3]), f32("upd", [1, 2, 1, 3])], [y, "p", "pi"],
              (c("wi", i64(3)),), opset=24),
        model([h.make_node("Cast", ["x"], ["d"], to=T.DOUBLE),
               h.make_node("Einsum", ["d", "d"], ["e"], equation="...ii,...ij->...j"),
               h.make_node("ReduceLogSumExp", ["e"], ["y"], keepdims=0)],
              [f32("x", [2, 3, 3])], [y]),
        model([h.make_node("SplitToSequence", ["x"], ["sq"], axis=0),
               h.make_node("SequenceInsert", ["sq", "x"], ["y"])],
              [f32("x", [2])], [h.make_tensor_sequence_value_info("y", T.FLOAT, None)]),
    ]
    return out
