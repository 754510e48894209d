"""Small Conv / ConvTranspose ONNX models with seeded weights (typed by ONNX shape inference), for the
convolution tests and the profile-rate tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def build(nodes: list[onnx.NodeProto], inputs: dict[str, Sequence[int]],
          weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """One-output model ("y"); output type from ONNX shape inference."""
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def conv_model(op: str, x_shape: Sequence[int], w_shape: Sequence[int], bias: bool = True,
               act: tuple[str, dict] | None = None, **attrs: object) -> onnx.ModelProto:
    """``op`` (Conv or ConvTranspose) on input "x", optionally followed by an activation node."""
    rng = np.random.default_rng(len(x_shape) * 100 + sum(w_shape))
    weights = {"w": rand(rng, *w_shape) * np.float32(0.5)}
    if bias:
        n_out = w_shape[0] if op == "Conv" else w_shape[1] * int(attrs.get("group", 1))
        weights["b"] = rand(rng, n_out)
    ins = ["x", "w"] + (["b"] if bias else [])
    nodes = [helper.make_node(op, ins, ["c" if act else "y"], **attrs)]
    if act:
        kind, act_attrs = act
        act_ins = ["c"]
        if kind == "Clip":
            weights["lo"], weights["hi"] = np.float32(-0.5), np.float32(0.75)
            act_ins += ["lo", "hi"]
        nodes.append(helper.make_node(kind, act_ins, ["y"], **act_attrs))
    return build(nodes, {"x": x_shape}, weights)
