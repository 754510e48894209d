"""The pass pipeline: a list of named stages over the IR, each followed by the verifier."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..ir.graph import Graph
from . import absorb_transposes, fuse_patterns, layout, simplify
from .verify import verify


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Graph], bool]  # returns True when it changed the graph
    doc: str = ""


DEFAULT_PIPELINE: tuple[Pass, ...] = (
    Pass("fold_constants", simplify.fold_constants, "evaluate nodes whose inputs are all constant"),
    Pass("fuse_patterns", fuse_patterns.fuse_patterns,
         "LayerNorm, GELU, SiLU, attention subgraphs -> one kernel each; B transposes fold into matmul"),
    Pass("simplify_layout", layout.simplify_layout, "merge/drop transposes, drop no-op slices/concats"),
    Pass("canonicalize_affine", simplify.canonicalize_affine,
         "per-channel constant mul/add/sub/div become one channel_affine op"),
    Pass("fold_channel_affine", simplify.fold_channel_affine,
         "merge channel_affine chains, fold them into conv/gemm"),
    Pass("fuse_activations", simplify.fuse_activations, "move activations into producers' epilogues"),
    Pass("absorb_transposes", absorb_transposes.absorb_transposes,
         "conv -> transpose to NHWC: the conv writes channels-last; transposes merge across a reshape"),
    Pass("eliminate_dead", simplify.eliminate_dead, "drop nodes nothing reads"),
    Pass("materialize_outputs", simplify.materialize_outputs, "give every graph output its own buffer"),
)


def run_passes(graph: Graph, passes: Sequence[Pass] = DEFAULT_PIPELINE,
               log: Callable[[str], None] | None = None) -> Graph:
    verify(graph, "import")
    for p in passes:
        before = len(graph.nodes)
        changed = _run_nested(p, graph)
        verify(graph, p.name)
        if log is not None:
            log(f"{p.name}: {before} -> {len(graph.nodes)} nodes" + ("" if changed else " (no change)"))
    return graph


def _run_nested(p: Pass, graph: Graph) -> bool:
    """A pass runs on loop/if bodies too: they are graphs like the model's, planned and emitted alike."""
    changed = p.run(graph)
    for n in graph.nodes:
        for sub in n.subgraphs:
            changed = _run_nested(p, sub) or changed
    return changed
