"""What the qs8 convolution kernel tests (1x1 and depthwise) share: the tiers this host runs, a seeded input
per case, every case of a one-node-per-case model quantized to int8, one compile-and-run per tier (the
``results`` fixture), the bit-for-bit check against a numpy reference, and the dynamic quantizer's parameters
their references take."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.compiler import optimize_graph
from cuvil_edge.here import host_tiers
from cuvil_edge.ir.graph import Graph
from cuvil_edge.quant.calibrate import ActRange
from cuvil_edge.quant.rewrite import act_qparams, quantize_graph
from cuvil_edge.quant.runner import Runner
from runtime_wasm.variants import probe_host

TIERS = host_tiers()
#: kernels used per node, outputs by name
RunResult = tuple[dict[str, str], dict[str, np.ndarray]]


def _input(name: str, shape: Sequence[int]) -> np.ndarray:
    return np.random.default_rng(len(name)).standard_normal(shape).astype(np.float32)


def quantize_cases(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], dynamic: bool = False
                   ) -> tuple[Graph, dict[str, np.ndarray], dict[str, ActRange]]:
    """Every conv of ``proto`` (input ``x_<case>`` per case in ``shapes``) quantized to int8: activations
    static (calibrated on the test input itself) or dynamic. Returns the graph, inputs and ranges by case."""
    graph = CuvilModel.load(proto).graph
    optimize_graph(graph)
    xs = {name: _input(name, shape) for name, shape in shapes.items()}
    ranges = {name: ActRange(float(x.min()), float(x.max())) for name, x in xs.items()}
    plan = {n.name: "int8" for n in graph.nodes if n.op == "conv"}
    q = quantize_graph(graph, plan, {f"x_{k}": r for k, r in ranges.items()}, dynamic=dynamic)
    return q, xs, ranges


def run_cases(graph: Graph, xs: Mapping[str, np.ndarray], tier: str) -> RunResult:
    with Runner(graph, Target(tier, probe_host().family)) as run:
        return dict(run.compiled.program.kernels_used), run({f"x_{k}": x for k, x in xs.items()})


def every_tier() -> Callable[..., dict[str, RunResult]]:
    """A test module's ``results`` fixture: each tier's kernels and outputs for the module's ``quantized``
    cases, one compile per tier (made here, as fixtures imported by name would shadow their parameters)."""

    @pytest.fixture(scope="module")
    def results(quantized) -> dict[str, RunResult]:
        q, xs, _ = quantized
        return {tier: run_cases(q, xs, tier) for tier in TIERS}

    return results


def bit_for_bit_test(cases: Mapping[str, object],
                     reference: Callable[..., np.ndarray]) -> Callable[..., None]:
    """A test module's ``test_matches_integer_reference_bit_for_bit``: each of ``cases`` in every tier
    equals ``reference(name, x, scale, zero_point)``, with the module's ``quantized`` and ``results``."""

    @pytest.mark.parametrize("name", sorted(cases))
    @pytest.mark.parametrize("tier", TIERS)
    def test(quantized, results, name: str, tier: str) -> None:
        """Exact int32 sums and the shared f32 epilogue: equal to the numpy reference in every tier (so the
        SIMD128 and relaxed-SIMD modules agree bit for bit)."""
        _, xs, ranges = quantized
        _, outs = results[tier]
        want = reference(name, xs[name], *act_qparams(ranges[name]))
        np.testing.assert_array_equal(outs[f"y_{name}"], want)

    return test


def dynamic_qparams(x: np.ndarray) -> tuple[float, int]:
    """Scale and zero point of the run-time (dynamic) quantizer for ``x``: its range widened to hold 0,
    over the 7-bit grid, in f32 arithmetic."""
    lo, hi = min(x.min(), np.float32(0)), max(x.max(), np.float32(0))
    s = (hi - lo) / np.float32(127)
    return s, int(np.clip(np.rint(-lo / s), 0, 127))
