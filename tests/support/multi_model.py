"""Two real compiled models of different priority (``HIGH``, ``LOW``), signed as release 1 of their own
line and installed in a template state per line: the world of the multi-model serving and agent tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel
from cuvil_edge.signing import Keyring, build_bundle
from ota import Installer

HW = "test-device"
HIGH, LOW = "alert", "census"  # the signed manifest names, the URL names and the model lines
LOW_ROWS, LOW_IN, LOW_WIDTH, LOW_LAYERS = 128, 16, 512, 8


def mlp(name: str, rows: int, width_in: int, width: int, hidden: int, width_out: int, seed: int) -> Any:
    """x [rows, width_in] -> ``hidden`` MatMul+Relu layers of ``width`` -> y [rows, width_out]."""
    rng = np.random.default_rng(seed)
    dims = [width_in, *[width] * hidden, width_out]
    nodes, inits, cur = [], [], "x"
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        inits.append(numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32),
                                             f"w{i}"))
        out = "y" if i == len(dims) - 2 else f"r{i}"
        nodes += [helper.make_node("MatMul", [cur, f"w{i}"], [f"h{i}"]),
                  helper.make_node("Relu", [f"h{i}"], [out])]
        cur = out
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width_in])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width_out])
    graph = helper.make_graph(nodes, name, [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class MultiWorld:
    """Both models compiled, signed by one keyring as release 1 of their own line, and installed in a
    template state directory per line (bound to its model name)."""

    def __init__(self, base: Path) -> None:
        self.ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1,
                                 release_threshold=1)
        low = mlp(LOW, LOW_ROWS, LOW_IN, LOW_WIDTH, LOW_LAYERS, 8, 2)  # ~10 ms a run: it saturates
        self.models = {HIGH: CuvilModel.load(mlp(HIGH, 2, 16, 32, 1, 8, 1)).optimize(),
                       LOW: CuvilModel.load(low).optimize()}
        self.inputs = {HIGH: np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32),
                       LOW: np.random.default_rng(4).standard_normal((LOW_ROWS, LOW_IN)).astype(np.float32)}
        self.bundles, self.templates = {}, {}
        for name, model in self.models.items():
            self.bundles[name] = base / f"{name}.cvb"
            build_bundle(model.save(base / name), self.bundles[name], self.ring.release_keys(),
                         version="1.0.0", release=1, hardware_ids=[HW])
            self.templates[name] = base / f"{name}-state"
            Installer(self.templates[name], HW, root=self.ring.root_envelope(), model=name).install(
                self.bundles[name])
        self.expected = {n: m.predict({"x": self.inputs[n]})["y"] for n, m in self.models.items()}
