"""Quantization: precision schemes, calibration, sensitivity analysis and the mixed-precision plan.

``quantize(graph, precision, ...)`` takes the optimized fp32 graph and returns a quantized clone plus
the plan record that goes into the compiled spec (``extra["quantization"]``) and the JSON report.

Schemes: fp32, fp16 (weights stored fp16, computed f32), int8 (static: per-channel symmetric weights,
activations from calibration), int8-dynamic (activation ranges at run time), int4 (group-wise 4-bit
weights for gemm and convs whose K is a multiple of the group; int8-dynamic activations; other
layers stay fp32) and mixed (the cheapest per-layer choice that keeps the error within
``accuracy_budget``, from a one-layer-at-a-time sensitivity table). int8-dynamic given calibration data
holds the same budget: it measures its plan on the samples and, while it misses, moves the layer whose int8
error hurts most up to fp16, then fp32 (a random-weight Llama's logits: 1.4% of the largest off at int8
everywhere, 0.2% once v_proj, o_proj and lm_head stay float). int8, int8-dynamic and mixed leave a
layer fp32 where its int8 kernel is slower than its fp32 one, by a cost model (``cost.py``: the same plan on
every machine; ``kernel_cost="measured"``: timed on this host, not reproducible; ``False``: not at all).
Static int8 layers hand uint8 to the static int8 layers that alone read them (``chain.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import QuantizationError
from ..ir.graph import Graph, Node
from .calibrate import CALIBRATION_HINT, OBSERVERS, ActRange, Sample, calibrate, load_samples
from .cost import SLOWER, LayerCost, costed_layers, drop_slow_int8, estimated, measure, model_identity
from .rewrite import choices_for, quantizable, quantize_graph

#: every ``precision`` a build takes (``CuvilModel.optimize``, the CLI's ``--precision`` choices)
PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic", "int4", "mixed")
Progress = Callable[[str], None]

__all__ = ["OBSERVERS", "PRECISIONS", "QuantResult", "check_precision", "compare", "load_samples", "quantize",
           "report"]


@dataclass
class QuantResult:
    graph: Graph
    record: dict[str, Any] = field(default_factory=dict)  # goes to spec.extra["quantization"]


def compare(ref: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> dict[str, float]:
    """Output fidelity over samples: mean cosine, max abs difference, top-1 agreement (over every row of the
    last axis: a language model's token positions count one each, as a classifier's samples do)."""
    r = np.stack([a.reshape(-1) for a in ref]).astype(np.float64)
    g = np.stack([a.reshape(-1) for a in got]).astype(np.float64)
    cos = (r * g).sum(1) / np.maximum(np.linalg.norm(r, axis=1) * np.linalg.norm(g, axis=1), 1e-30)
    last = ref[0].shape[-1] if ref[0].ndim else 1
    top1 = float(np.mean(r.reshape(-1, last).argmax(-1) == g.reshape(-1, last).argmax(-1)))
    return {"cosine": float(cos.mean()), "max_abs": float(np.abs(r - g).max()), "top1_agreement": top1}


def error_of(metrics: dict[str, float], classifier: bool) -> float:
    """The budgeted error: top-1 disagreement for classifiers, 1 - cosine otherwise."""
    return 1 - metrics["top1_agreement"] if classifier else 1 - metrics["cosine"]


class _Evaluator:
    """Runs candidate plans on the calibration samples and scores them against fp32."""

    def __init__(self, graph: Graph, samples: list[Sample], ranges: dict[str, ActRange], group: int,
                 dynamic: bool) -> None:
        from .runner import Runner

        self.graph, self.samples, self.ranges = graph, samples, ranges
        self.group, self.dynamic = group, dynamic
        with Runner(graph) as run:
            self.ref = [next(iter(o.values())) for o in run.run_all(samples)]
        self.classifier = self.ref[0].ndim >= 1 and self.ref[0].shape[-1] > 1

    def __call__(self, plan: dict[str, str]) -> dict[str, float]:
        from .runner import Runner

        q = quantize_graph(self.graph, plan, self.ranges, self.group, self.dynamic)
        with Runner(q) as run:
            got = [next(iter(o.values())) for o in run.run_all(self.samples)]
        return compare(self.ref, got)


def _layers(graph: Graph) -> list[Node]:
    return [n for n in graph.nodes if quantizable(n)]


def scheme_plan(layers: Sequence[Node], precision: str, group: int) -> dict[str, str]:
    """Per-layer choice of a uniform scheme (int4 falls back to fp32 where it does not apply)."""
    want = {"fp32": "fp32", "fp16": "fp16", "int8": "int8", "int8-dynamic": "int8", "int4": "int4"}[precision]
    return {n.name: want if want in choices_for(n, group) else "fp32" for n in layers}


def sensitivity(ev: _Evaluator, layers: Sequence[Node], progress: Progress,
                kinds: Sequence[str] = ("int4", "int8")) -> dict[str, dict[str, Any]]:
    """Quantize one layer at a time (each of its quantized choices among ``kinds``) and score the model
    output."""
    fp32 = {n.name: "fp32" for n in layers}
    table: dict[str, dict[str, Any]] = {}
    for i, n in enumerate(layers, 1):
        progress(f"sensitivity [{i}/{len(layers)}] {n.name}")
        table[n.name] = {c: ev({**fp32, n.name: c}) for c in choices_for(n, ev.group) if c in kinds}
    return table


def mixed_plan(ev: _Evaluator, layers: Sequence[Node], table: dict[str, dict[str, Any]], budget: float,
               progress: Progress, start: dict[str, str]) -> tuple[dict[str, str], dict[str, float]]:
    """Start every layer at ``start`` (mixed: its cheapest choice; int8-dynamic: int8; either way fp32
    where int8 is slower); while the whole model misses the budget, move the layer whose current choice
    hurts most (per the table) one step up CHOICES."""
    plan = dict(start)
    opts = {n.name: choices_for(n, ev.group) for n in layers}
    while True:
        metrics = ev(plan)
        err = error_of(metrics, ev.classifier)
        progress(f"mixed: error {err:.4f} (budget {budget}) with {sorted(set(plan.values()))}")
        movable = [k for k, c in plan.items() if c != "fp32"]
        if err <= budget or not movable:
            return plan, metrics

        def hurt(name: str) -> float:
            m = table[name].get(plan[name])
            return error_of(m, ev.classifier) + (1 - m["cosine"]) if m else 0.0

        worst = max(movable, key=hurt)
        plan[worst] = opts[worst][opts[worst].index(plan[worst]) + 1]


def check_precision(precision: str) -> None:
    """A ``QuantizationError`` naming the choices for a precision no build knows, before any work."""
    if precision not in PRECISIONS:
        raise QuantizationError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")


def quantize(graph: Graph, precision: str, calibration: Any = None, accuracy_budget: float = 0.01,
             observer: str = "minmax", group_size: int = 32, max_samples: int = 256,
             progress: Progress | None = None, kernel_cost: bool | str = True, chain: bool = True
             ) -> QuantResult:
    """Quantize the optimized fp32 ``graph`` per ``precision`` (see the module docstring); ``kernel_cost``:
    True or "model" (the cost model), "measured" (timed here) or False; ``chain=False`` keeps f32 between
    int8 layers (``chain.py``: the same bits either way)."""
    check_precision(precision)
    if kernel_cost not in (True, False, "model", "measured"):
        raise QuantizationError(f"kernel_cost is True, False, 'model' or 'measured', not {kernel_cost!r}")
    if group_size % 32 or group_size <= 0:
        raise QuantizationError(f"int4 group size must be a positive multiple of 32, got {group_size}")
    say = progress or (lambda _m: None)
    layers = _layers(graph)
    samples = load_samples(calibration, graph.inputs, max_samples) if calibration is not None else None
    if precision == "int8" and samples is None:
        raise QuantizationError(f"int8 (static) needs calibration data: {CALIBRATION_HINT}; "
                                "or use int8-dynamic, which needs none")
    dynamic = precision == "int8-dynamic" or samples is None
    ranges: dict[str, ActRange] = {}
    if samples is not None and not dynamic:
        ranges = calibrate(graph, [n.inputs[0] for n in layers], samples, observer, say)
    record: dict[str, Any] = {"precision": precision, "observer": observer if ranges else None,
                              "int4_group_size": group_size, "calibration_samples": len(samples or [])}
    table: dict[str, dict[str, Any]] = {}
    metrics = None
    costs: dict[str, LayerCost] = {}
    if precision == "mixed" and samples is None:
        raise QuantizationError("mixed precision measures its accuracy budget on calibration data: "
                                f"{CALIBRATION_HINT}")
    plan = scheme_plan(layers, "int8" if precision == "mixed" else precision, group_size)
    if kernel_cost and precision in ("int8", "int8-dynamic", "mixed"):
        costed = costed_layers(layers, plan)
        if kernel_cost == "measured":
            if costed:
                say(f"kernel cost: timing {len(costed)} layers at fp32 and int8")
                costs = measure(graph, quantize_graph(graph, plan, ranges, group_size, dynamic), costed)
            record["kernel_cost"] = {"mode": "measured", "host": _host_name(), "int8_slower_than": SLOWER,
                                     "reproducible": False}
        else:
            costs = estimated(layers, costed)
            record["kernel_cost"] = model_identity()
    if precision == "mixed" or (precision == "int8-dynamic" and samples is not None):
        ev = _Evaluator(graph, samples, ranges, group_size, dynamic)
        mixed = precision == "mixed"
        start = drop_slow_int8({n.name: choices_for(n, group_size)[0] for n in layers} if mixed else plan,
                               costs)
        table = sensitivity(ev, layers, say, ("int4", "int8") if mixed else ("int8",))
        plan, metrics = mixed_plan(ev, layers, table, accuracy_budget, say, start)
        record["accuracy_budget"] = accuracy_budget
    else:
        plan = drop_slow_int8(plan, costs)
    qgraph = quantize_graph(graph, plan, ranges, group_size, dynamic, log=progress, chain=chain)
    record["layers"] = [{"name": n.name, "op": n.op, "choice": plan[n.name],
                         "activations": _act_mode(qgraph, n.name),
                         "sensitivity": table.get(n.name, {}),
                         **({"cost_us": costs[n.name].record()} if n.name in costs else {})} for n in layers]
    if metrics is not None:
        record["accuracy_vs_fp32"] = metrics
    return QuantResult(qgraph, record)


def _host_name() -> str:
    from ..here import host_target

    return host_target().name


def _act_mode(graph: Graph, name: str) -> str:
    node = next(n for n in graph.nodes if n.name == name)
    xq = node.attrs.get("xq")
    if xq is None:
        return "f32"
    return "chained" if xq.mode == "input" else xq.mode  # quant/chain.py: static, as bytes from its producer


def report(fp32_graph: Graph, result: QuantResult, calibration: Any, weights: int,
           max_samples: int = 256) -> dict[str, Any]:
    """The JSON report: accuracy vs fp32 on the calibration data, sizes and per-layer choices."""
    from .runner import Runner

    rep = dict(result.record)
    weights_fp32 = sum(v.const.nbytes for v in fp32_graph.values() if v.is_const)
    rep["size"] = {"weights_fp32_bytes": weights_fp32, "weights_bytes": weights,
                   "ratio": round(weights / max(weights_fp32, 1), 4)}
    if calibration is not None and "accuracy_vs_fp32" not in rep:
        samples = load_samples(calibration, fp32_graph.inputs, max_samples)
        with Runner(fp32_graph) as a, Runner(result.graph) as b:
            rep["accuracy_vs_fp32"] = compare([next(iter(o.values())) for o in a.run_all(samples)],
                                              [next(iter(o.values())) for o in b.run_all(samples)])
    return rep

