"""Device packages run without the host extras: no onnx, onnxruntime, compiler or cuvil_edge."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target

ROOT = Path(__file__).resolve().parents[2]
DEVICE_PACKAGES = ("runtime_wasm", "ota", "cuvil_agent", "device_profiles")
HOST_ONLY = ("cuvil_edge", "onnx", "onnxruntime", "ziglang", "psycopg")  # psycopg: the fleet store's

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {host}:
            raise ImportError("host-only module imported on the device: " + name)
sys.meta_path.insert(0, Block())
"""


def test_device_packages_never_import_host_modules_statically():
    for pkg in DEVICE_PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
                bad = [n for n in names if n.split(".")[0] in HOST_ONLY]
                assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_device_runs_a_built_model_with_host_modules_blocked(tmp_path):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "dev",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [numpy_helper.from_array(w, "w")])
    model = CuvilModel.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    model.optimize(targets=[Target()])
    out_dir = model.save(tmp_path / "m.cuvil")
    x = rng.standard_normal((2, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = BLOCKER.format(host=set(HOST_ONLY)) + f"""
import numpy as np
import runtime_wasm, ota, cuvil_agent, device_profiles
import cuvil_agent.agent, cuvil_agent.cli
from runtime_wasm.loader import load_model_dir
with load_model_dir({str(out_dir)!r}) as m:
    y = m.predict([np.load({str(tmp_path / "x.npy")!r})])["y"]
np.save({str(tmp_path / "y.npy")!r}, y)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
