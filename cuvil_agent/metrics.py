"""Prometheus metrics of the device's serving, in the text exposition format of ``prometheus-client``.

Model metrics are not counted twice: at each scrape ``ServingCollector`` reads what every served model's
scheduler and supervisor already count (``Scheduler.metrics()``) and turns it into metric families
labelled by model name (and variant, for latency). Only what the HTTP layer alone sees is counted here:
requests by endpoint and status, connections refused at the connection limit, and clients cut off by a
timeout. A reload starts a new scheduler, so model counters restart from zero then; Prometheus'
``rate()`` treats that as the counter reset it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from runtime_wasm.counts import SERVING_COUNTS

from .serve import ModelRegistry

#: the ``Content-Type`` of ``render()``
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: batch-size histogram buckets (a batch is at most ``max_batch_size`` requests)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class _Families:
    """Metric families by name, created on first use, so every model's samples share one family (the
    text format allows one HELP/TYPE block per name)."""

    def __init__(self) -> None:
        self.all: dict[str, Metric] = {}

    def add(self, kind: type, name: str, doc: str, labels: dict[str, str], *value: Any) -> None:
        if name not in self.all:
            self.all[name] = kind(name, doc, labels=list(labels))
        self.all[name].add_metric(list(labels.values()), *value)  # type: ignore[attr-defined]


class ServingCollector:
    """Reads every registered model's scheduler metrics at scrape time (a custom prometheus collector)."""

    def __init__(self, models: ModelRegistry) -> None:
        self._models = models

    def describe(self) -> list[Metric]:
        return []  # names vary with the models served; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        f = _Families()
        for host, priority, m, served in self._models.states():
            model = {"model": host.name}
            f.add(GaugeMetricFamily, "cuvil_model_ready", "1 while the model is loaded and answering", model,
                  1.0 if m is not None else 0.0)
            f.add(GaugeMetricFamily, "cuvil_model_priority", "serving priority (higher first)", model,
                  priority)
            if m is None or served is None:
                continue
            f.add(GaugeMetricFamily, "cuvil_model_release", "release counter of the model served", model,
                  served.release)
            f.add(GaugeMetricFamily, "cuvil_model_info", "what is served: release, version and variant",
                  {**model, "release": str(served.release), "version": served.version,
                   "variant": served.variant}, 1.0)
            self._scheduler(f, model, m)
        return iter(f.all.values())

    @staticmethod
    def _scheduler(f: _Families, model: dict[str, str], m: dict[str, Any]) -> None:
        """One model's scheduler and supervisor counts (``Scheduler.metrics()``) as samples, named by the
        telemetry vocabulary (``runtime_wasm.counts``)."""
        for c in SERVING_COUNTS:
            kind = GaugeMetricFamily if c.gauge else CounterMetricFamily
            f.add(kind, c.metric, c.help, {**model, **c.labels}, m[c.key])
        for error, n in sorted(m["failed"].items()):
            f.add(CounterMetricFamily, "cuvil_requests_failed", "requests failed, by error type",
                  {**model, "error": error}, n)
        thermal = m["thermal"]
        f.add(GaugeMetricFamily, "cuvil_thermal_degraded", "1 while over the thermal budget",
              {**model, "action": thermal["action"]}, 1.0 if thermal["degraded"] else 0.0)
        if thermal["temp_c"] is not None:
            f.add(GaugeMetricFamily, "cuvil_cpu_temperature_celsius", "hottest thermal zone at the last poll",
                  model, thermal["temp_c"])
        for variant, h in m["latency_histogram_ms"].items():
            buckets = [(f"{le / 1e3:g}", n) for le, n in zip(h["le"], h["cumulative"])]
            f.add(HistogramMetricFamily, "cuvil_inference_latency_seconds",
                  "end-to-end latency of answered requests (queue + compute)", {**model, "variant": variant},
                  [*buckets, ("+Inf", h["cumulative"][-1])], h["sum_ms"] / 1e3)
        sizes = {int(k): v for k, v in m["batch_sizes"].items()}
        buckets = [(str(le), sum(n for k, n in sizes.items() if k <= le)) for le in _BATCH_BUCKETS]
        f.add(HistogramMetricFamily, "cuvil_batch_size", "requests per dispatch", model,
              [*buckets, ("+Inf", sum(sizes.values()))], sum(k * n for k, n in sizes.items()))


#: one model line's update as ``UpdateCollector`` reads it: (model, update state, (chunks verified,
#: chunks) of the download in progress, or None)
LineUpdate = tuple[str, str, tuple[int, int] | None]


class UpdateCollector:
    """Each model line's update state and download progress at scrape time: what its status messages tell
    the publisher, for a scraper on the device too (the agent registers it beside the serving metrics)."""

    def __init__(self, lines: Callable[[], Iterable[LineUpdate]]) -> None:
        self._lines = lines

    def describe(self) -> list[Metric]:
        return []  # names vary with the lines; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        f = _Families()
        for name, state, progress in self._lines():
            model = {"model": name}
            f.add(GaugeMetricFamily, "cuvil_update_state", "1 for the update state the model line is in "
                  "(idle, downloading, verifying, installing, self-test, active, failed, ...)",
                  {**model, "state": state}, 1.0)
            have, total = progress or (0, 0)
            f.add(GaugeMetricFamily, "cuvil_transfer_chunks_verified",
                  "chunks of the bundle being downloaded that are verified (0: no download)", model, have)
            f.add(GaugeMetricFamily, "cuvil_transfer_chunks", "chunks of the bundle being downloaded "
                  "(0: no download)", model, total)
        yield from f.all.values()


class ServingMetrics:
    """The HTTP server's registry: its own counters plus a ``ServingCollector`` over ``models``."""

    def __init__(self, models: ModelRegistry) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ServingCollector(models))  # type: ignore[arg-type]
        self.requests = Counter("cuvil_http_requests", "HTTP responses by model, endpoint and status",
                                ["model", "endpoint", "code"], registry=self.registry)
        self.refused = Counter("cuvil_http_connections_refused", "connections over the limit (answered 503)",
                               registry=self.registry)
        self.timeouts = Counter("cuvil_http_timeouts", "clients cut off by a timeout, by phase",
                                ["phase"], registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
