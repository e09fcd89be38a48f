"""The pure bookkeeping of one reconcile: its stages, action results and its verdict.

A reconcile goes through fixed stages (Flux's straight-line `reconcile()`): fetch, parse,
plan, preview, apply, record, report. The engine records the stage *before* it starts, so a
reconcile that hangs or dies shows where (`reconciles.stage`; the store keeps one timing per
stage in `reconciles.stage_timings`). `conclude` turns what happened into the row's final
status, the applied revision and the error line — the rules of the loop:

- a plan with errors (invalid commit, empty snapshot) applies nothing: `failed`, and the
  applied revision stays the last good one;
- a failed preview aborts the whole reconcile before anything is applied: `aborted`;
- an apply where some action failed is `failed` but records what was applied;
- otherwise `succeeded` and the attempted revision becomes the applied one; `blocked`
  actions (no engine here can carry them out, or they wait for such capacity) are not
  failures: everything else was applied, and `Conclusion.summary` says "applied N,
  blocked M" with each blocked action's reason.

No I/O and no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


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
class ActionResult:
    """What applying one plan action did: `applied`, `skipped` (noop), `blocked` or `failed`."""

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
    warnings: tuple[str, ...] = ()
    """Things a person should know that did not fail the pass (e.g. a run no fleet fits)."""
    results: tuple[ActionResult, ...] = ()
    """What applying each action did, when the pass got to applying."""

    @property
    def blocked(self) -> tuple[str, ...]:
        """`key: reason` of each blocked action."""
        return tuple(f"{r.key}: {r.message}" for r in self.results if r.result == "blocked")

    @property
    def summary(self) -> str | None:
        """ "applied N, blocked M: key: reason; …" once the pass applied (else None)."""
        if not self.results:
            return None
        applied = sum(1 for r in self.results if r.result == "applied")
        text = f"applied {applied}, blocked {len(self.blocked)}"
        failed = sum(1 for r in self.results if r.failed)
        text += f", failed {failed}" if failed else ""
        return f"{text}: {_summarize(self.blocked)}" if self.blocked else text


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
        error = _summarize(failures)
        return Conclusion(ReconcileStatus.FAILED, last_applied, error, results=tuple(results))
    return Conclusion(ReconcileStatus.SUCCEEDED, attempted, None, results=tuple(results))


def _summarize(lines: Sequence[str], limit: int = 5) -> str:
    shown = "; ".join(lines[:limit])
    more = len(lines) - limit
    return f"{shown} (and {more} more)" if more > 0 else shown
