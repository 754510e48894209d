"""``Gradient`` (ai.onnx.preview.training) built at import: compiled, run in wasmtime and compared with
central differences of the forward graph, which onnxruntime runs in float64 (onnxruntime-training, which
has Gradient itself, is not on the registry for this platform; the node suite's shipped outputs check
the two ``test_gradient_of_*`` cases)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import UnsupportedOperator
from cuvil_edge.oracle import ort_session

N = helper.make_node
TRAINING = "ai.onnx.preview.training"
EPS = 1e-6


def _model(nodes: list, inputs: dict[str, np.ndarray], outputs: dict[str, tuple[int, ...]],
           inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """Float graph in the dtype of its inputs; ``outputs``: name -> shape."""
    elem = helper.np_dtype_to_tensor_dtype(next(iter(inputs.values())).dtype)
    info = [helper.make_tensor_value_info(k, elem, v.shape) for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(k, elem, s) for k, s in outputs.items()]
    graph = helper.make_graph(nodes, "g", info, outs,
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(TRAINING, 1)])


def _grad_node(xs: list[str], y: str, inputs: list[str] | None = None, zs: list[str] | None = None):
    attrs = {"xs": xs, "y": y, **({"zs": zs} if zs else {})}
    return N("Gradient", inputs or [*xs, *(zs or [])], [f"d_{x}" for x in xs], domain=TRAINING,
             name="grad", **attrs)


def _ours(nodes: list, feeds: dict[str, np.ndarray], outputs: dict[str, tuple[int, ...]]
          ) -> dict[str, np.ndarray]:
    shapes = {k: v.shape for k, v in feeds.items()}
    with CuvilModel.load(_model(nodes, feeds, outputs), input_shapes=shapes).optimize(
            targets=[Target()]) as cm:
        return cm.predict(feeds)


def _numeric(forward: list, feeds: dict[str, np.ndarray], y: tuple[str, tuple[int, ...]], x: str
             ) -> np.ndarray:
    """d sum(y) / d x by central differences, the forward graph run by onnxruntime in float64."""
    f64 = {k: v.astype(np.float64) for k, v in feeds.items()}
    sess = ort_session(_model(forward, f64, dict([y])))
    grad = np.zeros_like(f64[x])
    for i in np.ndindex(grad.shape):
        sums = []
        for step in (EPS, -EPS):
            moved = {**f64, x: f64[x].copy()}
            moved[x][i] += step
            sums.append(sess.run(None, moved)[0].sum())
        grad[i] = (sums[0] - sums[1]) / (2 * EPS)
    return grad


def _feeds(**shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {k: rng.uniform(0.5, 1.5, s).astype(np.float32) for k, s in shapes.items()}


#: every op with a rule: broadcasting binaries (a value used twice), unaries, activations, reshape
FORWARD = [
    N("Sub", ["a", "c"], ["s"]), N("Mul", ["s", "b"], ["m"]), N("Exp", ["b"], ["eb"]),
    N("Div", ["m", "eb"], ["d"]), N("Tanh", ["d"], ["t"]), N("Mul", ["a", "a"], ["aa"]),
    N("Sigmoid", ["aa"], ["sg"]), N("Add", ["t", "sg"], ["e"]), N("Exp", ["e"], ["g1"]),
    N("Sqrt", ["g1"], ["g2"]), N("Add", ["g1", "g2"], ["g3"]), N("Log", ["g3"], ["g4"]),
    N("Reciprocal", ["g3"], ["g5"]), N("Sub", ["g4", "g5"], ["g6"]), N("Neg", ["g6"], ["g7"]),
    N("Reshape", ["g7", "shape"], ["y"]),
]


def test_gradient_of_a_chain_of_every_differentiable_op_matches_central_differences() -> None:
    feeds = _feeds(a=(2, 3), b=(3,), c=(2, 1), unused=(4,))
    shape = N("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([3, 2], np.int64)))
    nodes = [shape, *FORWARD, _grad_node(["a", "b", "c", "unused"], "y")]
    got = _ours(nodes, feeds, {"y": (3, 2), **{f"d_{k}": v.shape for k, v in feeds.items()}})
    for x in ("a", "b", "c"):
        np.testing.assert_allclose(got[f"d_{x}"], _numeric([shape, *FORWARD], feeds, ("y", (3, 2)), x),
                                   rtol=1e-4, atol=1e-5, err_msg=x)
    np.testing.assert_array_equal(got["d_unused"], np.zeros(4, np.float32))


def test_gradient_at_another_point_reruns_the_forward_ops_there() -> None:
    """Inputs other than the tensors xs/zs name: the derivative at those values (the spec's H_1)."""
    feeds = _feeds(a=(4,), b=(4,), a1=(4,), b1=(4,))
    forward = [N("Mul", ["a", "b"], ["m"]), N("Div", ["m", "b"], ["q"]), N("Exp", ["q"], ["y0"]),
               N("Mul", ["y0", "b"], ["y"])]
    nodes = [*forward, _grad_node(["a"], "y", inputs=["a1", "b1"], zs=["b"])]
    got = _ours(nodes, feeds, {"y": (4,), "d_a": (4,)})
    at, here = {"a": feeds["a1"], "b": feeds["b1"]}, {"a": feeds["a"], "b": feeds["b"]}
    np.testing.assert_allclose(got["d_a"], _numeric(forward, at, ("y", (4,)), "a"), rtol=1e-4, atol=1e-5)
    assert not np.allclose(got["d_a"], _numeric(forward, here, ("y", (4,)), "a"), rtol=1e-3)


def test_second_order_gradient_differentiates_the_first_gradient() -> None:
    """The spec's d^2O/dW^2: a Gradient of a Gradient's output (y = a^2 b: 2ab, then 2b)."""
    feeds = _feeds(a=(5,), b=(5,))
    nodes = [N("Mul", ["a", "a"], ["aa"]), N("Mul", ["aa", "b"], ["y"]), _grad_node(["a"], "y"),
             N("Gradient", ["a"], ["dd_a"], domain=TRAINING, name="grad2", xs=["a"], y="d_a")]
    got = _ours(nodes, feeds, {"d_a": (5,), "dd_a": (5,)})
    np.testing.assert_allclose(got["d_a"], 2 * feeds["a"] * feeds["b"], rtol=1e-6)
    np.testing.assert_allclose(got["dd_a"], 2 * feeds["b"], rtol=1e-6)


def test_forward_op_without_a_rule_is_named_with_its_node() -> None:
    feeds = _feeds(a=(2, 3), w=(3, 2))
    nodes = [N("MatMul", ["a", "w"], ["y"], name="proj"), _grad_node(["a"], "y")]
    with pytest.raises(UnsupportedOperator, match=r"Gradient.*grad.*'proj'"):
        CuvilModel.load(_model(nodes, feeds, {"d_a": (2, 3)}))


def test_gradient_with_respect_to_an_initializer_is_refused_at_import() -> None:
    feeds = _feeds(a=(3,))
    nodes = [N("Mul", ["a", "w"], ["y"]), _grad_node(["w"], "y")]
    model = _model(nodes, feeds, {"d_w": (3,)}, inits={"w": np.ones(3, np.float32)})
    with pytest.raises(UnsupportedOperator, match="'w', a build-time constant"):
        CuvilModel.load(model)
