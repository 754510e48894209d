"""The kernel table (``codegen/kernels/table.py``) against the generated C in ``gen/`` and against what ops
record: every symbol exists in its family, every label follows NAMING.md, every family's calls into
another family are declared (so module order never depends on how an op lists families), and the
labels ops record on real graphs are table rows whose C the node actually calls."""

from __future__ import annotations

import itertools
import re

import onnx
import pytest
from onnx import helper

from cuvil_edge import CuvilModel
from cuvil_edge.codegen.emit import EmitContext
from cuvil_edge.codegen.kernels import GEN_DIR, TEMPLATE_DIR
from cuvil_edge.codegen.kernels.table import (
    KERNELS,
    NEEDS,
    defined_functions,
    family_order,
    resolve,
)
from cuvil_edge.codegen.memplan import plan_memory
from cuvil_edge.compiler import optimize_graph
from cuvil_edge.ops import registered
from cuvil_edge.ops.registry import node_code
from cuvil_edge.testing import zoo
from tests.support.onnx_suites import DATA, passing_cases

#: NAMING.md: kernel := <dtype> "-" <op> [ "-" <tile> ]; conversions <from>-<to>-vcvt; a fp16-weight node
#: joins two with "+". <op> is lowercase words; a tile is MRxNR, a filter and stride, or rows per step.
DTYPES = r"(?:f32|f64|h|i8|u8|i32|i64|b|x8|x32|qs8|qb4|qu8|f16)"
TILE = r"(?:\d+x\d+|\d+x\d+(?:x\d+)?s\d+(?:x\d+){0,2}|\d+)"
GRAMMAR = re.compile(rf"{DTYPES}-(?:{DTYPES}-vcvt|[a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)*(?:-{TILE})?)")
#: a value for each pattern field, shaped as the field's labels are
SAMPLE = {"dtype": "i64", "tile": "4x8", "filter": "3x3s2", "n": "4", "x8": "-x8", "kind": "sum",
          "act": "relu", "src": "f32", "dst": "i32", "width": "x32", "stride": "s1", "pool": "max",
          "inner": "f32-gemm-4x8"}

_CALL = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\(")


def _closure(families) -> set[str]:
    return set(family_order(families))


def _all_functions() -> dict[str, str]:
    """C function -> the family whose generated file defines it."""
    return {fn: fam for fam in NEEDS for fn in defined_functions(fam)}


def test_needs_lists_every_family_and_only_them():
    assert set(NEEDS) == {p.name.removesuffix(".c.in") for p in TEMPLATE_DIR.glob("*.c.in")}
    assert set(NEEDS) == {p.stem for p in GEN_DIR.glob("*.c")}


def test_every_symbol_exists_in_its_family():
    for k in KERNELS:
        if k.family is None:
            assert not k.symbols, k
            continue
        assert k.symbols, k
        for fam, s in k.functions():
            if "{" in s:  # a field-named symbol: some function of the family has that shape
                shape = re.compile(re.sub(r"\\\{\w+\\\}", "[a-z0-9]+", re.escape(s)))
                assert any(shape.fullmatch(f) for f in defined_functions(fam)), (k.pattern, s)
            else:
                assert s in defined_functions(fam), (k.pattern, s, fam)


def test_every_label_follows_the_grammar():
    for k in KERNELS:
        label = k.pattern.format(**SAMPLE)
        assert GRAMMAR.fullmatch(label), label


def test_family_dependencies_are_declared():
    """Each family's C calls functions only of itself, ``common`` and the families it needs (transitively)."""
    owner = _all_functions()
    for fam in NEEDS:
        src = (GEN_DIR / f"{fam}.c").read_text()
        used = {owner[c] for c in _CALL.findall(src) if c in owner} - {fam, "common"}
        assert used <= _closure([fam]), (fam, used - _closure([fam]))


def test_family_order_does_not_depend_on_how_ops_list_families():
    for op in registered().values():
        orders = [family_order(p) for p in itertools.permutations(op.kernels)]
        for order in orders:
            assert order[0] == "common" and set(order) == set(orders[0]), op.name
            for i, fam in enumerate(order):
                assert set(NEEDS[fam]) <= set(order[:i]), (op.name, order)


def test_unknown_labels_are_refused():
    for bad in ("c-where", "x8-copy", "f32-act-relu-4", "f32-vnosuch-4", "f32-gemm"):
        with pytest.raises(ValueError, match="table.py"):
            resolve(bad)
    assert [k.family for k in resolve("f16-cvt+f32-gemm-4x8")] == ["qf16-cvt", "f32-gemm"]
    assert resolve("f32-vrelu-4")[0].symbols == ("f32_act",)
    assert resolve("f32-vsqrt-4")[0].family == "f32-unary"
    assert resolve("f32-vaddc-4")[0].family == "f32-binary"


def _typed_ops() -> onnx.ModelProto:
    """Ops the suites leave out: C loops over typed tensors, conversions, Mod."""
    f, i, b = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.BOOL
    node = helper.make_node
    nodes = [node("Less", ["a", "b"], ["lt"]), node("Not", ["lt"], ["not"]),
             node("Where", ["lt", "a", "b"], ["where"]), node("Add", ["i", "j"], ["add"]),
             node("ArgMax", ["a"], ["argmax"], axis=1),
             node("CumSum", ["a", "axis"], ["cumsum"]), node("TopK", ["a", "k"], ["topv", "topi"]),
             node("Cast", ["i"], ["cast"], to=f), node("Mod", ["i", "j"], ["mod"])]
    outs = {"lt": (b, [2, 5]), "not": (b, [2, 5]), "where": (f, [2, 5]), "add": (i, [2, 5]),
            "argmax": (i, [2, 1]), "cumsum": (f, [2, 5]), "topv": (f, [2, 2]), "topi": (i, [2, 2]),
            "cast": (f, [2, 5]), "mod": (i, [2, 5])}
    info = helper.make_tensor_value_info
    inputs = [info(n, t, [2, 5]) for n, t in (("a", f), ("b", f), ("i", i), ("j", i))]
    graph = helper.make_graph(nodes, "typed", inputs, [info(n, t, shape) for n, (t, shape) in outs.items()],
                              [helper.make_tensor("axis", i, [], [1]), helper.make_tensor("k", i, [1], [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _corpus():
    yield "typed", _typed_ops()
    for case in passing_cases():
        model = onnx.load(str(DATA / case / "model.onnx"))
        if next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 7:
            model = onnx.version_converter.convert_version(model, 7)
        yield case, model
    for net in (zoo.mlp, zoo.resnet, zoo.mobilenet, zoo.unet, zoo.audio):
        yield net.__name__, net()


def test_ops_record_table_labels_whose_c_the_node_calls():
    """On the conformance suites and the zoo nets: every recorded label is a table row (``use_kernel``
    refuses others), the node's C calls one of the row's symbols, and every kernel function it calls is
    in a family its op declares (with what those need)."""
    owner = _all_functions()
    ops = registered()
    seen = set()
    for name, model in _corpus():
        graph = optimize_graph(CuvilModel.load(model).graph)
        ctx = EmitContext(graph, plan_memory(graph))
        for n in graph.nodes:
            code = node_code(n, ctx)
            label = ctx.kernels_used.get(n.name)
            if code is None or label is None:
                continue
            seen.add(label)
            calls = set(_CALL.findall(code))
            rows = resolve(label)
            assert all(GRAMMAR.fullmatch(part) for part in label.split("+")), (name, label)
            inline = all(k.family is None for k in rows)
            assert inline or any(s in calls for k in rows for _, s in k.functions()), \
                (name, n.name, label, sorted(calls & set(owner)))
            called = {owner[c] for c in calls if c in owner} - {"common"}
            assert called <= _closure(ops[n.op].kernels), (name, n.op, called)
    assert len(seen) >= 40, sorted(seen)  # the corpus reaches most of the table
    assert {"f32-lt", "b-not", "f32-where", "i64-add", "f32-argmax", "f32-cumsum", "f32-topk", "i64-f32-vcvt",
            "i64-mod", "x8-memmove", "f32-vrelu-4"} <= seen, sorted(seen)
