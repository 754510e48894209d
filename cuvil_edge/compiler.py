"""The build pipeline as named stages: import -> passes -> plan + emit C -> compile one module per target."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runtime_wasm.digest import TREE_CHUNK, weights_tree_sha256
from runtime_wasm.instance import available_cores
from runtime_wasm.spec import ModelSpec, TensorSpec, VariantSpec

from .codegen.emit import DEFAULT_THREADS, CProgram, emit_c
from .codegen.memplan import user_io
from .codegen.toolchain import Target, compile_c, module_memory
from .ir.graph import Graph, Value
from .passes import run_passes

Progress = Callable[[str], None]


@dataclass
class CompiledModel:
    """Everything a device needs (spec, modules, weights) plus the host's view (graph, C and the kernel
    each node runs: ``program.kernels_used``)."""

    spec: ModelSpec
    modules: dict[str, bytes]  # variant name -> wasm bytes
    weights: bytes
    graph: Graph
    program: CProgram


def node_table(graph: Graph, program: CProgram) -> list[dict[str, object]]:
    """Per-node record of op, output type, arena offset and kernel: what ``inspect`` shows."""
    from .ops import get as get_op

    rows = []
    for n in graph.nodes:
        out = n.outputs[0]
        alias = get_op(n.op).alias
        rows.append({"name": n.name, "op": n.op, "output": str(out.type), "offset": program.plan.offset(out),
                     "kernel": "view (no code)" if alias else program.kernels_used.get(n.name, "-")})
    return rows


def index_bounds(graph: Graph) -> dict[int, int]:
    """``id`` of a graph input -> the smallest gather-axis size of any table its values index (followed
    through casts and reshapes): ids drawn from [0, bound) pick real rows of every table, where larger
    ones would only test the clamp."""
    from .ops import get as get_op

    consumers = graph.consumers()
    bounds: dict[int, int] = {}
    for v in graph.inputs:
        sizes: list[int] = []
        todo: list[Value] = [v]
        while todo:
            x = todo.pop()
            for n in consumers.get(id(x), []):
                if n.op == "gather" and n.inputs[1] is x:
                    table = n.inputs[0].type.shape
                    sizes.append(table[int(n.attrs["axis"]) % len(table)])
                elif n.op == "cast" or get_op(n.op).alias:
                    todo.append(n.outputs[0])
        if min(sizes, default=0):
            bounds[id(v)] = min(sizes)
    return bounds


def optimize_graph(graph: Graph, progress: Progress | None = None) -> Graph:
    return run_passes(graph, log=progress)


def compile_graph(graph: Graph, targets: Sequence[Target] = (Target(),),
                  progress: Progress | None = None, profile: bool = False,
                  extra: dict[str, object] | None = None, threads: int = DEFAULT_THREADS) -> CompiledModel:
    """``profile=True`` builds modules that also export each node (for ``cuvil-edge profile``);
    ``extra`` adds records to the spec (e.g. ``quantization``: the per-layer precision plan);
    ``threads``: most threads the modules run (the device picks how many; 1: plain modules)."""
    say = progress or (lambda _msg: None)
    say(f"emit: {len(graph.nodes)} nodes -> C")
    program = emit_c(graph, profile=profile, threads=threads)
    plan = program.plan
    inputs, outputs = user_io(graph)  # a state's read and write are the module's own, not the caller's
    names = graph.meta.get("output_names") or [v.name for v in outputs]
    bounds = index_bounds(graph)
    aliases = graph.meta.get("aliases", {})  # role -> name -> other names (a TFLite tensor's own)

    def tensor(v, name: str, role: str) -> TensorSpec:
        return TensorSpec(name, v.type.dtype, v.type.shape, plan.offset(v), bounds.get(id(v)),
                          tuple(aliases.get(role, {}).get(name, ())))

    modules: dict[str, bytes] = {}
    variants = []
    for i, t in enumerate(targets, 1):
        say(f"compile [{i}/{len(targets)}] {t.name}")
        wasm = compile_c(program.source, t, extra_flags=program.link_flags())
        modules[t.name] = wasm
        variants.append(VariantSpec(t.name, t.tier, t.family, f"{t.name}.wasm",
                                    hashlib.sha256(wasm).hexdigest(), len(wasm)))
    spec = ModelSpec(
        name=graph.name,
        inputs=tuple(tensor(v, v.name, "inputs") for v in inputs),
        outputs=tuple(tensor(v, n, "outputs") for v, n in zip(outputs, names)),
        weights_size=len(program.weights),
        arena_size=program.arena_size,
        variants=tuple(variants),
        weights_sha256=hashlib.sha256(program.weights).hexdigest(),
        weights_tree_sha256=weights_tree_sha256(program.weights, TREE_CHUNK, available_cores()),
        weights_tree_chunk=TREE_CHUNK,
        extra={"nodes": node_table(graph, program), **(extra or {})},
        threads=program.threads,
        states=program.states,
        memory=program.memory_table() if program.threads > 1
        else (max(map(module_memory, modules.values())),),
    )
    spec.check()
    return CompiledModel(spec, modules, program.weights, graph, program)
