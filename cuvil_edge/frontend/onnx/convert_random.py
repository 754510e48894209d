"""Random generators: RandomUniform, RandomNormal, their ``Like`` forms, Bernoulli and Multinomial, drawn
from a counter-based generator (Philox4x32-10, ``ops/random.py``, C in ``f32-random``).

What a user can count on: the same model, seed and run number give the same numbers on every host and
in every fresh instance; each inference draws new numbers (a run counter, an int64 persistent state of
the module, moves on at the end of every run; ``reset_state`` starts the sequence again).
- ``seed`` (a float attribute) keys the stream by its float32 bits (1.0 and 1.5 are different streams);
  nodes with the same seed and shape draw the same numbers in one run, as onnxruntime's do.
- Without ``seed``, the key is a fixed hash (sha256) of the node's name: a compiled module cannot draw
  entropy, so an unseeded model still repeats from instance to instance; seed it, or feed noise as an
  input, for other draws.
- No other generator's numbers are reproduced (onnxruntime's mt19937 and the ONNX reference's numpy
  global state differ from each other too): the distributions are what holds.
Bernoulli has its own converter, 1 with probability p (``u < p``), as the operator's text and onnxruntime's
kernel say: its ONNX function (``Greater(u, p)``) gives 1 with probability 1 - p.
Refused: a draw inside a Loop, Scan or If body kept as a loop or branch (each iteration would repeat the
same numbers), non-finite parameters, and element types the operators do not define. A stateful model
builds at fp32 only (``CuvilModel.optimize``).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from ...codegen.memplan import StateVar
from ...ir.graph import Graph, Value
from ...ops.cast import HELD
from ...ops.random import RUN_TYPE
from .float16 import stored_type_of
from .registry import ConvertContext, converter

#: element type drawn -> the bits of each uniform number (the float's significand)
BITS = {"float32": 24, "float16": 11, "bfloat16": 8, "float64": 53}
#: ``graph.meta`` key of (run counter input, its next value) until ``keep_run_counter``
_RUN_META = "random_run"
#: ``graph.meta`` key: source node -> how many draws it made (an unrolled loop converts a node again)
_DRAWS_META = "random_draws"


def _run_counter(ctx: ConvertContext) -> Value:
    """The model's run counter (one for all its random nodes), made on first use: a graph input whose
    next value (+1) ``keep_run_counter`` makes the last graph output once the model's own are in place."""
    graph = ctx.graph
    if graph.meta.get("source") != "onnx":
        raise ctx.unsupported("a random draw inside a Loop, Scan or If body: every iteration would draw the "
                              "same numbers (only the model's top-level graph holds the run counter)")
    if _RUN_META not in graph.meta:
        run = graph.value("random_run", RUN_TYPE)
        graph.inputs.append(run)
        one = graph.constant(f"{run.name}/one", np.ones(1, np.int64))
        graph.meta[_RUN_META] = (run, ctx.emit1("binary_loop", [run, one], {"kind": "add"},
                                                name=f"{run.name}/next"))
    return graph.meta[_RUN_META][0]


def keep_run_counter(graph: Graph) -> None:
    """After import: the run counter's next value becomes the last graph output, the counter a state."""
    made = graph.meta.pop(_RUN_META, None)
    graph.meta.pop(_DRAWS_META, None)
    if made is None:
        return
    run, nxt = made
    graph.outputs.append(nxt)
    graph.meta.setdefault("states", []).append(
        StateVar(run.name, graph.inputs.index(run), len(graph.outputs) - 1, np.zeros(1, np.int64)))


def _stream(ctx: ConvertContext) -> dict[str, object]:
    """The node's key (its seed's float32 bits, else a hash of its name) and draw number."""
    seed = ctx.attr("seed")
    if seed is None:
        h = hashlib.sha256(ctx.name.encode()).digest()
        key = [int.from_bytes(h[:4], "little"), int.from_bytes(h[4:8], "little") | 1 << 31]
    else:
        key = [int(np.float32(seed).view(np.uint32)), 0]  # high word 0: never an unseeded node's key
    draws = ctx.graph.meta.setdefault(_DRAWS_META, {})
    source = ctx.proto.name or ctx.name
    draw = draws.get(source, 0)
    draws[source] = draw + 1
    return {"key": key, "draw": draw}


def _dtype(ctx: ConvertContext, default: str | None, allowed: tuple[str, ...]) -> str:
    """The ``dtype`` attribute's element type (``default`` when absent), one of ``allowed``."""
    from onnx import helper

    code = ctx.attr("dtype")
    try:
        dtype = default if code is None else np.dtype(helper.tensor_dtype_to_np_dtype(code)).name
    except (KeyError, TypeError, ValueError):
        dtype = f"ONNX type {code}"
    if dtype not in allowed:
        raise ctx.unsupported(f"dtype {dtype}: {ctx.op_type} draws {', '.join(allowed)}")
    return dtype


def _like(ctx: ConvertContext) -> tuple[tuple[int, ...], str]:
    """Input 0's shape and element type (its stored type: float16 is held as float32)."""
    x = ctx.input(0)
    return x.type.shape, stored_type_of(ctx.graph, x) or x.type.dtype


def _finite(ctx: ConvertContext, *names_defaults: tuple[str, float]) -> list[float]:
    """The float attributes (name, default), which must be finite: C literals, and a draw of inf is none."""
    values = [float(ctx.attr(n, d)) for n, d in names_defaults]
    if not all(map(math.isfinite, values)):
        raise ctx.unsupported(f"non-finite {', '.join(n for n, _ in names_defaults)}: {values}")
    return values


def _cast(ctx: ConvertContext, v: Value, dtype: str) -> Value:
    """v as ``dtype``; a stored float type (float16, bfloat16) by way of float32, the type it is held in."""
    if HELD.get(dtype) == "float32" and v.type.dtype != "float32":
        v = ctx.emit1("cast", [v], {"to": "float32"})
    return v if v.type.dtype == dtype else ctx.emit1("cast", [v], {"to": dtype})


def _draw(ctx: ConvertContext, dist: str, shape: tuple[int, ...], dtype: str, a: float, b: float) -> Value:
    """Numbers of ``dist`` of ``shape`` as ``dtype``: drawn as float32 or float64, then cast."""
    held = "float64" if dtype == "float64" else "float32"
    y = ctx.emit1("random", [_run_counter(ctx)], {"dist": dist, "shape": list(shape), "dtype": held, "a": a,
                                                   "b": b, "bits": BITS[dtype], **_stream(ctx)})
    return _cast(ctx, y, dtype)


#: Bernoulli's output types (its ``dtype``)
_BERNOULLI_TYPES = (*BITS, "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
_PARAMS = {"Uniform": (("low", 0.0), ("high", 1.0)), "Normal": (("mean", 0.0), ("scale", 1.0))}


@converter("RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike")
def random_op(ctx: ConvertContext) -> None:
    like = ctx.op_type.endswith("Like")
    kind = ctx.op_type.removeprefix("Random").removesuffix("Like")
    if like:
        shape, own = _like(ctx)
        dtype = _dtype(ctx, own, tuple(BITS))
    else:
        shape, dtype = ctx.attr("shape"), _dtype(ctx, "float32", tuple(BITS))
        if shape is None or any(d < 0 for d in shape):
            raise ctx.unsupported(f"shape {shape}: a static shape of sizes >= 0 is needed")
        shape = tuple(int(d) for d in shape)
    a, b = _finite(ctx, *_PARAMS[kind])
    ctx.set_outputs(_draw(ctx, kind.lower(), shape, dtype, a, b))


@converter("Bernoulli")
def bernoulli(ctx: ConvertContext) -> None:
    p = ctx.input(0)
    shape, own = _like(ctx)
    if p.type.dtype not in ("float32", "float64"):
        raise ctx.unsupported(f"probabilities of {own}: Bernoulli takes float16, float32 or float64")
    hit = ctx.emit1("compare", [_draw(ctx, "uniform", shape, p.type.dtype, 0.0, 1.0), p], {"kind": "lt"})
    ctx.set_outputs(_cast(ctx, hit, _dtype(ctx, own, _BERNOULLI_TYPES)))


@converter("Multinomial")
def multinomial(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    if len(x.type.shape) != 2 or x.type.dtype not in ("float32", "float64"):
        raise ctx.unsupported(f"input {x.type}: Multinomial takes [batch, classes] of float16/32/64")
    samples = int(ctx.attr("sample_size", 1))
    if samples < 1 or x.type.shape[1] < 1:
        raise ctx.unsupported(f"sample_size {samples} from {x.type.shape[1]} classes")
    dtype = _dtype(ctx, "int32", ("int32", "int64"))
    ctx.set_outputs(ctx.emit1("multinomial", [x, _run_counter(ctx)],
                              {"samples": samples, "dtype": dtype, **_stream(ctx)}))
