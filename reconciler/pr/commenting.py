"""The PR comment and the `dockyard/plan` status for a plan (pure).

The comment is the planner's markdown (`reconciler.core.rendering_markdown`) under a hidden
marker (`<!-- dockyard:plan -->`, or `<!-- dockyard:plan KEY -->` for a repo posting more
than one plan per PR), with the cost delta after the counts and each run's best offer in
its block. It always fits the host's limit (GitHub: under 65,536 characters).
"""

from __future__ import annotations

from reconciler.core.rendering_markdown import render_markdown
from reconciler.domain.plan import Action, ActionKind, Plan
from reconciler.engine.costing import ActionCost, PlanCost, money
from reconciler.pr.hosting import CommitStatus, StatusState
from reconciler.pr.reviewing import PlanReport

PLAN_CONTEXT = "dockyard/plan"
APPLY_CONTEXT = "dockyard/apply"
_STATUS_ORDER = (
    ActionKind.CREATE,
    ActionKind.UPDATE,
    ActionKind.REPLACE,
    ActionKind.DELETE,
    ActionKind.RETAIN,
    ActionKind.BLOCKED,
)
_VERBS = {
    ActionKind.CREATE: "to create",
    ActionKind.UPDATE: "to update",
    ActionKind.REPLACE: "to replace",
    ActionKind.DELETE: "to delete",
    ActionKind.RETAIN: "retained",
    ActionKind.BLOCKED: "blocked",
}


def marker(key: str = "") -> str:
    return f"<!-- dockyard:plan {key} -->" if key else "<!-- dockyard:plan -->"


def comment_body(
    report: PlanReport, *, limit: int, key: str = "", full_plan_url: str | None = None
) -> str:
    """The whole comment: the marker line, then the markdown; shorter than `limit`."""
    head = marker(key) + "\n"
    cost = report.cost
    summary = [_cost_line(cost)] if cost is not None and cost.actions else []
    notes = {c.key: _note(c) for c in cost.actions} if cost is not None else {}
    text = render_markdown(
        report.plan,
        limit=limit - len(head),
        summary_lines=summary,
        notes=notes,
        full_plan_url=full_plan_url,
    )
    return head + text


def plan_markdown(report: PlanReport, *, limit: int = 65_536) -> str:
    """The markdown of a PR plan without the marker (`dockyard plan --server --format markdown`)."""
    return comment_body(report, limit=limit + len(marker()) + 1)[len(marker()) + 1 :]


def cost_line(report: PlanReport) -> str | None:
    """The summary's cost line, or None when no prices were computed."""
    cost = report.cost
    return _cost_line(cost) if cost is not None and cost.actions else None


def _cost_line(cost: PlanCost) -> str:
    unmatched = sum(1 for c in cost.actions if c.unmatched)
    line = f"**Cost: {money(cost.total_delta, signed=True)}** for the runs this PR changes"
    if unmatched:
        line += f" ({unmatched} run(s) match no offer: counted $0/h)"
    return line


def _note(cost: ActionCost) -> str:
    if cost.unmatched:
        return (
            "💲 no offer matches this run's resources on its fleets: counted $0/h "
            "(it would wait for capacity)"
        )
    parts = []
    if cost.new is not None:
        jobs = f"{cost.new.jobs} x " if cost.new.jobs != 1 else ""
        parts.append(f"💲 best offer: {jobs}{cost.new.offer} = {money(cost.new.per_hour)}")
    if cost.old is not None:
        parts.append(f"was {money(cost.old.per_hour)}")
    parts.append(f"change {money(cost.delta, signed=True)}")
    return " · ".join(parts)


def describe(plan: Plan) -> str:
    """A status description: "2 to create, 1 to replace, 1 error" (or "no changes")."""
    summary = plan.summary
    parts = [f"{summary[k.value]} {_VERBS[k]}" for k in _STATUS_ORDER if summary[k.value]]
    if plan.errors:
        n = len(plan.errors)
        parts.append(f"{n} error" + ("s" if n != 1 else ""))
    return ", ".join(parts) if parts else "no changes"


def policy_blocked(plan: Plan) -> list[Action]:
    """The runs the repo policy blocks: they break a rule and no exception was approved for
    this content. The `dockyard/plan` status fails on them, and `dockyard plan` and
    `dockyard pr plan` exit 3 (`reconciler.cli.plan.plan_exit_code`)."""
    return [action for action in plan.actions if action.violations and not action.approved_by]


def plan_status(report: PlanReport, *, target_url: str | None = None) -> CommitStatus:
    """`dockyard/plan`: failure when the plan has errors or breaks the repo policy (an
    exception approved for this content does not count)."""
    plan = report.plan
    broken = len(policy_blocked(plan))
    approvers = [n for a in plan.actions if a.violations for n in a.approved_by]
    state = StatusState.FAILURE if plan.errors or broken else StatusState.SUCCESS
    description = describe(plan)
    if broken:
        description = f"{broken} run(s) break the repo policy; " + description
    elif approvers:
        names = ", ".join(dict.fromkeys(approvers))
        description = f"policy exception approved by {names}; " + description
    if report.cost is not None and report.cost.actions:
        description += f"; {money(report.cost.total_delta, signed=True)}"
    return CommitStatus(state, PLAN_CONTEXT, description, target_url)
