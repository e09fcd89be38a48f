"""Prometheus metrics of one server: a registry per app, never the global one.

Counters the web layer bumps itself (webhook deliveries by provider and outcome) live on
`Metrics`; everything about the state (reconciles by status and their durations, runs and
jobs by status, worker lag) is read from the database at scrape time by `StateCollector`,
so it is right after a restart and across several replicas sharing one database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from agent.diskspace import DiskWatch
from reconciler.adapters.db.models import Fleet, Gateway, Instance, Job, Reconcile, Run, Volume

_FINISHED_RUN = ("terminated", "failed", "done")


class RequestTotals(Protocol):
    def totals(self) -> dict[tuple[str, str, str], tuple[int, float]]: ...


_FINISHED_JOB = ("terminated", "aborted", "failed", "done")


@dataclass(frozen=True, slots=True)
class StateFigures:
    """What the collector reads from the database in one short session."""

    reconciles: dict[str, int] = field(default_factory=dict)
    reconcile_seconds: dict[str, tuple[int, float]] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)
    lag_seconds: dict[str, float] = field(default_factory=dict)


def _seconds(later: datetime, earlier: datetime) -> float:
    return max(0.0, (later - earlier).total_seconds())


def read_figures(session: Session, now: datetime) -> StateFigures:
    reconciles = dict(
        session.execute(select(Reconcile.status, func.count()).group_by(Reconcile.status)).all()
    )
    durations: dict[str, tuple[int, float]] = {}
    rows = session.execute(
        select(Reconcile.status, Reconcile.created_at, Reconcile.finished_at).where(
            Reconcile.finished_at.is_not(None)
        )
    )
    for status, created, finished in rows:
        if finished is None:
            continue
        count, total = durations.get(status, (0, 0.0))
        durations[status] = (count + 1, total + _seconds(finished, created))
    runs = dict(
        session.execute(
            select(Run.status, func.count()).where(Run.deleted.is_(False)).group_by(Run.status)
        ).all()
    )
    jobs = dict(session.execute(select(Job.status, func.count()).group_by(Job.status)).all())
    return StateFigures(reconciles, durations, runs, jobs, _read_lag(session, now))


def _read_lag(session: Session, now: datetime) -> dict[str, float]:
    """Per worker kind: how long the least recently processed active row has waited."""
    active: dict[str, tuple[Any, Any, Any]] = {
        "runs": (Run.last_processed_at, Run.submitted_at, Run.status.not_in(_FINISHED_RUN)),
        "jobs": (Job.last_processed_at, Job.submitted_at, Job.status.not_in(_FINISHED_JOB)),
        "instances": (
            Instance.last_processed_at,
            Instance.created_at,
            Instance.status != "terminated",
        ),
        "fleets": (Fleet.last_processed_at, Fleet.created_at, Fleet.deleted.is_(False)),
        "volumes": (Volume.last_processed_at, Volume.created_at, Volume.deleted.is_(False)),
        "gateways": (Gateway.last_processed_at, Gateway.created_at, Gateway.deleted.is_(False)),
    }
    lag: dict[str, float] = {}
    for kind, (processed, created, condition) in active.items():
        # a row never processed has waited since it was made
        oldest = session.scalar(
            select(func.min(func.coalesce(processed, created))).where(condition)
        )
        lag[kind] = _seconds(now, oldest) if oldest is not None else 0.0
    queued = session.scalar(
        select(func.min(Reconcile.created_at)).where(Reconcile.status == "queued")
    )
    lag["reconciles"] = _seconds(now, queued) if queued is not None else 0.0
    return lag


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
        engine: Engine,
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
        self.registry.register(StateCollector(lambda: self._read(engine)))

    @staticmethod
    def _read(engine: Engine) -> StateFigures:
        with Session(engine) as session:
            return read_figures(session, datetime.now(UTC))

    def render(self) -> bytes:
        return generate_latest(self.registry)
