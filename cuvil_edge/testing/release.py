"""The smallest release there is, for the fleet demo and benchmarks: a rollout needs a signed bundle, not
a big model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ..model import CuvilModel
from ..signing import Keyring, build_bundle


def tiny_release(workdir: Path, ring: Keyring, release: int, hardware_id: str) -> Path:
    """A signed bundle of a seeded 16->8 MatMul+Relu compiled for this host; ``release`` seeds the weights."""
    w = np.random.default_rng(release).standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [numpy_helper.from_array(w, "w")])
    model = CuvilModel.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    out = model.optimize(targets="host").save(workdir / f"tiny{release}")
    bundle = workdir / f"tiny-r{release}.cvb"
    build_bundle(out, bundle, ring.release_keys(), version=f"1.0.{release}", release=release,
                 hardware_ids=[hardware_id])
    return bundle
