"""The telemetry vocabulary: every count a served model keeps, under one name everywhere.

A count's ``key`` is its name in ``Scheduler.metrics()``, in the agent's telemetry summaries
(``cuvil_agent.telemetry``, read by ``ota.protocol.SUMMARY_DATA_SCHEMA`` and the fleet's collector and
dashboard) and in docs; ``metric`` (with ``labels``) is the Prometheus family ``/metrics`` shows it as
(``cuvil_agent.metrics``). One table, so a count added to the scheduler reaches the wire, the scrape
and the fleet's screens at once, and a word means the same in each.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServingCount:
    """One count: ``key`` (scheduler, summaries), its Prometheus ``metric`` family and ``labels`` in it,
    ``help`` (the family's; shared by counts of one family), ``gauge`` for a level rather than a total."""

    key: str
    metric: str
    help: str
    labels: dict[str, str] = field(default_factory=dict)
    gauge: bool = False


_SHED = "requests refused with Overloaded, by reason"

#: every count, in the order ``/metrics`` and ``cuvil-edge fleet telemetry`` show them
SERVING_COUNTS: tuple[ServingCount, ...] = (
    ServingCount("submitted", "cuvil_requests_submitted", "requests submitted to the scheduler"),
    ServingCount("completed", "cuvil_requests_completed", "requests answered"),
    ServingCount("queue_full", "cuvil_requests_shed", _SHED, {"reason": "queue_full"}),
    ServingCount("shed", "cuvil_requests_shed", _SHED, {"reason": "thermal"}),
    ServingCount("priority_shed", "cuvil_requests_shed", _SHED, {"reason": "priority"}),
    ServingCount("stale", "cuvil_stale_inputs", "requests refused as StaleInput"),
    ServingCount("deadline_kills", "cuvil_deadline_kills", "workers killed for overrunning a deadline"),
    ServingCount("worker_restarts", "cuvil_worker_restarts", "worker restarts (deadline kills and crashes)"),
    ServingCount("degrade_activations", "cuvil_degrade_activations", "times the thermal budget was exceeded"),
    ServingCount("queue_depth", "cuvil_queue_depth", "requests waiting for a worker", gauge=True),
)
#: the counts of requests refused with ``Overloaded``, whatever the reason
SHED_KEYS = tuple(c.key for c in SERVING_COUNTS if c.metric == "cuvil_requests_shed")


def serving_counts(metrics: dict) -> dict[str, int]:
    """``Scheduler.metrics()`` narrowed to the vocabulary: what a summary carries."""
    return {c.key: metrics[c.key] for c in SERVING_COUNTS}
