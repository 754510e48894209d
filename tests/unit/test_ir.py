"""IR, verifier, memory planner and kernel generator invariants."""

from __future__ import annotations

import numpy as np
import pytest

from cuvil_edge.codegen.kernels import generate
from cuvil_edge.codegen.memplan import plan_memory
from cuvil_edge.errors import GraphVerificationError
from cuvil_edge.ir import Graph, TensorType
from cuvil_edge.ops import get as get_op
from cuvil_edge.passes import run_passes, verify


def _chain(n_layers: int = 6) -> Graph:
    """x -> gemm -> act -> gemm -> act ... with a skip from layer 0 to the end (long liveness)."""
    g = Graph("chain")
    x = g.value("x", TensorType((2, 8)))
    g.inputs.append(x)
    cur, first = x, None
    for i in range(n_layers):
        w = g.constant(f"w{i}", np.eye(8, dtype=np.float32))
        h = g.value(f"h{i}", TensorType((2, 8)))
        g.add_node("gemm", f"mm{i}", [cur, w], [h])
        a = g.value(f"a{i}", TensorType((2, 8)))
        g.add_node("epilogue_act", f"act{i}", [h], [a], {"act": ("relu", 0.0, 0.0)})
        cur = a
        first = first or a
    r = g.value("r", TensorType((4, 4)))
    g.add_node("reshape", "view", [first], [r], {"shape": [4, 4]})
    g.outputs += [cur, r]
    return g


def test_verifier_accepts_valid_and_names_the_failing_pass_and_node():
    g = _chain()
    verify(g)
    g.nodes[0].outputs[0].type = TensorType((2, 9))
    with pytest.raises(GraphVerificationError, match=r"after my_pass: node 'mm0'"):
        verify(g, "my_pass")
    g = _chain()
    g.nodes.reverse()
    with pytest.raises(GraphVerificationError, match="before it is defined"):
        verify(g)


def test_memory_plan_never_overlaps_live_buffers():
    g = _chain()
    plan = plan_memory(g)
    n = len(g.nodes)
    live: dict[int, list[int]] = {}
    for t, node in enumerate(g.nodes):
        for v in (*node.inputs, *node.outputs):
            if not v.is_const:
                live.setdefault(id(plan.roots[id(v)]), []).append(t)
    for v in g.inputs:
        live.setdefault(id(v), []).extend([-1, n])
    for v in g.outputs:
        live.setdefault(id(plan.roots[id(v)]), []).append(n)
    roots = {id(plan.roots[id(v)]): plan.roots[id(v)] for v in g.values() if not v.is_const}
    spans = {k: (min(live[k]), max(live[k])) for k in roots}
    keys = list(roots)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            (a0, a1), (b0, b1) = spans[a], spans[b]
            if a1 < b0 or b1 < a0:
                continue
            oa, ob = plan.offsets[a], plan.offsets[b]
            sa, sb = roots[a].type.nbytes, roots[b].type.nbytes
            assert oa + sa <= ob or ob + sb <= oa, "live buffers overlap"
    # the reshape is a view: same buffer as its source; in-place activations share their input
    reshape = g.nodes[-1]
    assert plan.offset(reshape.outputs[0]) == plan.offset(reshape.inputs[0])
    act = g.nodes[3]
    assert get_op("epilogue_act").inplace and plan.offset(act.outputs[0]) == plan.offset(act.inputs[0])


def test_passes_fuse_activation_into_gemm_and_keep_results():
    g = _chain()
    run_passes(g)
    assert g.op_counts() == {"gemm": 6, "reshape": 1}
    assert all(n.attrs.get("act") == ("relu", 0.0, 0.0) for n in g.nodes if n.op == "gemm")


def test_generated_kernels_are_fresh():
    assert generate.main(["--check"]) == 0


def test_template_expansion():
    text = "$for i in range(2):\nv${i} = ${i * 2};\n$end\n"
    assert generate.expand(text) == "v0 = 0;\nv1 = 2;\n"
    with pytest.raises(SyntaxError):
        generate.expand("$for i in range(2):\nx\n")
