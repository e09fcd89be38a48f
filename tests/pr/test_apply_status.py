"""What `dockyard/apply` and `dockyard reconcile --wait` say of a pass that applied
everything it could and left actions blocked: "applied N, blocked M: key: reason"."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from reconciler.adapters.db.store import Store
from reconciler.api.models import Reconcile as WireReconcile
from reconciler.cli.reconcile import _summary
from reconciler.core.reconcile_status import ActionResult, conclude
from reconciler.engine.reconciling import Report
from reconciler.pr.bot import BotConfig, PullRequestBot, apply_status
from reconciler.pr.hosting import CodeHost, StatusState

BLOCKED = "blocked: Pulumi CLI not found: install it"
RESULTS = [
    ActionResult("main/fleet/local", "create", "applied", "submitted fleet local"),
    ActionResult("main/task/hello", "create", "applied", "submitted run hello"),
    ActionResult("main/fleet/cloud", "blocked", "blocked", BLOCKED),
    ActionResult("main/task/train", "noop", "skipped", "up to date"),
]


def test_the_conclusion_of_a_partly_blocked_pass_counts_and_names_them() -> None:
    conclusion = conclude(attempted="c2", last_applied="c1", results=RESULTS)
    assert (conclusion.status.value, conclusion.applied_revision, conclusion.error) == (
        "succeeded", "c2", None,
    )  # fmt: skip
    assert conclusion.summary == f"applied 2, blocked 1: main/fleet/cloud: {BLOCKED}"
    assert conclusion.blocked == (f"main/fleet/cloud: {BLOCKED}",)


def test_dockyard_apply_fails_with_the_summary_while_something_is_blocked(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'd.db'}", migrate=True)

    def no_host(repo: str) -> CodeHost:
        raise AssertionError("not called")

    bot = PullRequestBot(store, no_host, BotConfig("main", "https://dy.example", b"k", "a/b"))
    conclusion = conclude(attempted="c2", last_applied="c1", results=RESULTS)
    report = Report("r1", "main", "c2", conclusion.status, None, None,
                    summary=conclusion.summary, blocked=conclusion.blocked)  # fmt: skip
    status = apply_status(report, bot)
    assert status.state is StatusState.FAILURE
    assert status.description.startswith("applied 2, blocked 1: main/fleet/cloud: blocked:")
    assert len(status.description) <= 140
    clean = conclude(attempted="c2", last_applied="c1", results=RESULTS[:2])
    ok = Report("r2", "main", "c2", clean.status, None, None, summary=clean.summary)
    assert apply_status(ok, bot).state is StatusState.SUCCESS
    store.close()


def test_reconcile_wait_prints_the_summary() -> None:
    now = datetime.now(UTC)
    row = WireReconcile(
        id="r1", project_name="main", trigger="api", delivery_id=None,
        attempted_revision="c" * 40, applied_revision="c" * 40, status="succeeded",
        stage="done", outcome={"summary": "applied 2, blocked 1: main/fleet/cloud: …"},
        error=None, created_at=now, finished_at=now,
    )  # fmt: skip
    assert _summary(row) == (
        f"reconcile r1 succeeded at {'c' * 12}: applied 2, blocked 1: main/fleet/cloud: …"
    )
