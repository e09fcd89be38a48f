"""Pure bookkeeping of a reconcile: stage timings and the final verdict (rules of the loop)."""

from __future__ import annotations

from reconciler.core.reconcile_status import (
    ActionResult,
    ReconcileStatus,
    Stage,
    conclude,
)


def test_an_invalid_commit_applies_nothing_and_keeps_the_last_good_revision() -> None:
    c = conclude(attempted="b" * 40, last_applied="a" * 40, plan_errors=["x.dstack.yml:3: bad"])
    assert c.status is ReconcileStatus.FAILED
    assert c.applied_revision == "a" * 40
    assert c.error == "x.dstack.yml:3: bad"


def test_a_failed_preview_aborts_everything() -> None:
    c = conclude(attempted="b", last_applied=None, preview_errors=["fleet gpu: no pulumi"])
    assert (c.status, c.applied_revision) == (ReconcileStatus.ABORTED, None)
    assert c.error == "preview failed, nothing applied: fleet gpu: no pulumi"


def test_apply_failures_fail_the_reconcile_and_success_advances_the_revision() -> None:
    ok = ActionResult("main/task/a", "create", "applied")
    bad = ActionResult("main/fleet/f", "create", "failed", "agent down")
    failed = conclude(attempted="b", last_applied="a", results=[ok, bad])
    assert (failed.status, failed.applied_revision) == (ReconcileStatus.FAILED, "a")
    assert failed.error == "main/fleet/f: agent down"
    good = conclude(attempted="b", last_applied="a", results=[ok])
    assert (good.status, good.applied_revision, good.error) == (
        ReconcileStatus.SUCCEEDED,
        "b",
        None,
    )


def test_long_error_lists_are_summarized() -> None:
    c = conclude(attempted="b", last_applied=None, plan_errors=[f"e{i}" for i in range(8)])
    assert c.error == "e0; e1; e2; e3; e4 (and 3 more)"


def test_finished_statuses() -> None:
    assert ReconcileStatus.ABORTED.is_finished() and not ReconcileStatus.QUEUED.is_finished()
    assert Stage.APPLY.value == "apply"
