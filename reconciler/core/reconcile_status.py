"""The pure bookkeeping of one reconcile: its stages, their timings and its verdict.

A reconcile goes through fixed stages (Flux's straight-line `reconcile()`): fetch, parse,
plan, preview, apply, record, report. The engine records the stage *before* it starts, so a
reconcile that hangs or dies shows where (`reconciles.stage`), and keeps one timing per
stage (`reconciles.stage_timings`, a JSON list). `conclude` turns what happened into the
row's final status, the applied revision and the error line — the rules of the loop:

- a plan with errors (invalid commit, empty snapshot) applies nothing: `failed`, and the
  applied revision stays the last good one;
- a failed preview aborts the whole reconcile before anything is applied: `aborted`;
- an apply where some action failed is `failed` but records what was applied;
- otherwise `succeeded` and the attempted revision becomes the applied one.

No I/O and no clock: times are passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Stage(StrEnum):
    FETCH = "fetch"
    PARSE = "parse"
    PLAN = "plan"
    PREVIEW = "preview"
    APPLY = "apply"
    RECORD = "record"
    REPORT = "report"
    DONE = "done"


class ReconcileStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"

    def is_finished(self) -> bool:
        return self in (self.SUCCEEDED, self.FAILED, self.ABORTED)


@dataclass(frozen=True, slots=True)
class StageTiming:
    """When one stage started and (once the next began) finished, as unix seconds."""

    stage: Stage
    started_at: float
    finished_at: float | None = None

    @property
    def seconds(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.started_at

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage.value,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "seconds": None if self.seconds is None else round(self.seconds, 6),
        }


def enter_stage(
    timings: Sequence[StageTiming], stage: Stage, now: float
) -> tuple[StageTiming, ...]:
    """Pure: close the open stage (if any) at `now` and open `stage`."""
    closed = close_stages(timings, now)
    if stage is Stage.DONE:
        return closed
    return (*closed, StageTiming(stage, now))


def close_stages(timings: Sequence[StageTiming], now: float) -> tuple[StageTiming, ...]:
    """Pure: the timings with every open stage finished at `now`."""
    return tuple(
        t if t.finished_at is not None else StageTiming(t.stage, t.started_at, now) for t in timings
    )


def timings_to_json(timings: Sequence[StageTiming]) -> list[dict[str, Any]]:
    return [t.to_json() for t in timings]


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What applying one plan action did: `applied`, `skipped` (noop) or `failed`."""

    key: str
    action: str
    result: str
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.result == "failed"

    def to_json(self) -> dict[str, str]:
        return {
            "resource": self.key,
            "action": self.action,
            "result": self.result,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Conclusion:
    """The final state of a reconcile row."""

    status: ReconcileStatus
    applied_revision: str | None
    error: str | None


def conclude(
    *,
    attempted: str,
    last_applied: str | None,
    plan_errors: Sequence[str] = (),
    preview_errors: Sequence[str] = (),
    results: Sequence[ActionResult] = (),
) -> Conclusion:
    """Pure: the status, applied revision and error of a reconcile (module docstring)."""
    if plan_errors:
        return Conclusion(ReconcileStatus.FAILED, last_applied, _summarize(plan_errors))
    if preview_errors:
        error = "preview failed, nothing applied: " + _summarize(preview_errors)
        return Conclusion(ReconcileStatus.ABORTED, last_applied, error)
    failures = [f"{r.key}: {r.message}" for r in results if r.failed]
    if failures:
        return Conclusion(ReconcileStatus.FAILED, last_applied, _summarize(failures))
    return Conclusion(ReconcileStatus.SUCCEEDED, attempted, None)


def _summarize(lines: Sequence[str], limit: int = 5) -> str:
    shown = "; ".join(lines[:limit])
    more = len(lines) - limit
    return f"{shown} (and {more} more)" if more > 0 else shown


def is_superseded(revision: str | None, newer_revisions: Sequence[str | None]) -> bool:
    """Pure: whether a reconcile pinned to `revision` should yield to a newer request.

    A newer request for another revision (or for the branch head, `None`) pre-empts the
    retries of an older one: only the newest commit is worth retrying.
    """
    return any(newer != revision or newer is None for newer in newer_revisions)
