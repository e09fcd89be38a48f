"""Prometheus metrics of one server: a registry per app, never the global one.

Counters the web layer bumps itself (webhook deliveries by provider and outcome) live on
`Metrics`; everything about the state (reconciles by status and their durations, runs and
jobs by status, worker lag) is read from the database at scrape time by `StateCollector`,
so it is right after a restart and across several replicas sharing one database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from agent.diskspace import DiskWatch
from reconciler.adapters.db.readmodels.database import Database
from reconciler.adapters.db.readmodels.metrics import StateFigures, read_figures


class RequestTotals(Protocol):
    def totals(self) -> dict[tuple[str, str, str], tuple[int, float]]: ...


class StateCollector(Collector):
    """Reads `StateFigures` at every scrape and turns them into metric families."""

    def __init__(self, read: Callable[[], StateFigures]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        figures = self._read()
        yield _gauge("dockyard_reconciles", "Reconciles by status", "status", figures.reconciles)
        summary = SummaryMetricFamily(
            "dockyard_reconcile_duration_seconds",
            "Duration of finished reconciles, by outcome",
            labels=["outcome"],
        )
        for outcome, (count, total) in sorted(figures.reconcile_seconds.items()):
            summary.add_metric([outcome], count_value=count, sum_value=total)
        yield summary
        yield _gauge("dockyard_runs", "Runs by status", "status", figures.runs)
        yield _gauge("dockyard_jobs", "Jobs by status", "status", figures.jobs)
        yield _gauge(
            "dockyard_worker_lag_seconds",
            "Age of the least recently processed active row, per worker kind",
            "kind",
            figures.lag_seconds,
        )


def _gauge(name: str, doc: str, label: str, values: dict[str, int] | dict[str, float]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], float(value))
    return family


class ServiceCollector(Collector):
    """The proxy's per-service totals (`RequestStats.totals`) at every scrape."""

    def __init__(self, read: Callable[[], dict[tuple[str, str, str], tuple[int, float]]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        labels = ["project", "run", "code"]
        requests = CounterMetricFamily(
            "dockyard_service_requests",
            "Requests through the service proxy, by service and status class",
            labels=labels,
        )
        duration = SummaryMetricFamily(
            "dockyard_service_request_duration_seconds",
            "Time from a request's arrival to the end of its response, by service",
            labels=labels,
        )
        for key, (count, seconds) in sorted(self._read().items()):
            requests.add_metric(list(key), count)
            duration.add_metric(list(key), count_value=count, sum_value=seconds)
        yield requests
        yield duration


class DiskCollector(Collector):
    """Free bytes of the server's data dir and whether it is below `min_free_disk`."""

    def __init__(self, disk: DiskWatch) -> None:
        self._disk = disk

    def collect(self) -> Iterator[Metric]:
        state = self._disk.check()
        yield _gauge(
            "dockyard_disk_free_bytes",
            "Free bytes of the server's filesystems",
            "path",
            dict(state.free),
        )
        low = GaugeMetricFamily(
            "dockyard_disk_low", "1 while free space is below min_free_disk (logs stop)"
        )
        low.add_metric([], 1.0 if state.low else 0.0)
        yield low


class Metrics:
    """The registry of one app and the counters the web layer updates."""

    def __init__(
        self,
        db: Database,
        services: RequestTotals | None = None,
        disk: DiskWatch | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        if disk is not None:
            self.registry.register(DiskCollector(disk))
        if services is not None:
            self.registry.register(ServiceCollector(services.totals))
        self.webhook_deliveries = Counter(
            "dockyard_webhook_deliveries",
            "Webhook deliveries received, by provider and outcome",
            ["provider", "outcome"],
            registry=self.registry,
        )
        self.registry.register(StateCollector(lambda: db.read_now(read_figures, datetime.now(UTC))))

    def render(self) -> bytes:
        return generate_latest(self.registry)
