"""The plan as markdown for a pull-request comment (pure).

Summary first (counts per action, errors, data-destroying actions), then one `<details>`
block per changed resource with its field diff, then one block listing the unchanged
resources. A previewed fleet, volume or gateway shows its stack preview in its block (the
counts per op and the estimated $/h, then its steps, or why there is no preview); actions
that restore drift (what changed outside Git) come after the PR's own changes under their
own heading; a plan made without a server says which checks it could not make; runs that
break the repo policy (`.dockyard.yml` `policy`) are listed first, with each rule.

GitHub rejects comments of 65,536 characters or more, so the text is always shorter than
`limit`: blocks that do not fit are left out and a note says how many resources and
characters were dropped, names them, and links the full plan when a URL is given.

Callers may add to the comment without a second renderer: `summary_lines` go right after
the counts (the PR comment's cost delta), `notes` add one line to a resource's block (its
best offer and $/h), `full_plan_url` is linked at the end and in the truncation note. A
plan holding both errors and actions (a PR preview of the valid files) says so.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.core.escaping import markdown_code, printable
from reconciler.core.rendering_json import canonical
from reconciler.domain.kinds import ResourceKey
from reconciler.domain.plan import Action, ActionKind, Plan, StackPreview

MARKDOWN_LIMIT = 65_536
_VALUE_LIMIT = 300
_STEPS_SHOWN = 20
_DRIFT_HEADING = (
    "#### Drift: changed outside Git, not by this PR\n\n"
    "_What runs differs from what Git says; the next apply restores it._\n"
)
_ICONS = {
    ActionKind.CREATE: "🟢",
    ActionKind.UPDATE: "🟡",
    ActionKind.REPLACE: "🟠",
    ActionKind.DELETE: "🔴",
    ActionKind.RETAIN: "🔒",
    ActionKind.NOOP: "⚪",
    ActionKind.BLOCKED: "⛔",
}


def render_markdown(
    plan: Plan,
    *,
    limit: int = MARKDOWN_LIMIT,
    summary_lines: Sequence[str] = (),
    notes: Mapping[ResourceKey, str] | None = None,
    full_plan_url: str | None = None,
) -> str:
    """The PR-comment markdown of `plan`, always fewer than `limit` characters."""
    head = _header(plan, summary_lines)
    notes = notes or {}
    changed = [a for a in plan.actions if a.action is not ActionKind.NOOP and not a.drift]
    drifted = [a for a in plan.actions if a.drift]
    blocks = [_details(action, notes.get(action.key)) for action in changed]
    titles = [f"{a.kind.value} {_code(a.name)}" for a in changed]
    if drifted:
        blocks.append(_DRIFT_HEADING)
        titles.append("drift")
        blocks += [_details(action, notes.get(action.key)) for action in drifted]
        titles += [f"drift of {a.kind.value} {_code(a.name)}" for a in drifted]
    unchanged = [a for a in plan.actions if a.action is ActionKind.NOOP]
    if unchanged:
        blocks.append(_unchanged(unchanged))
        titles.append(f"{len(unchanged)} unchanged")
    footer = f"\n[Full plan]({full_plan_url})\n" if full_plan_url else ""
    parts = [head]
    used = len(head) + len(footer)
    reserve = 1_200  # room for the truncation note
    for index, block in enumerate(blocks):
        if used + len(block) + reserve >= limit:
            left = blocks[index:]
            note = _truncation_note(
                len(left), sum(len(b) for b in left), titles[index:], full_plan_url
            )
            parts.append(note)
            break
        parts.append(block)
        used += len(block)
    text = "\n".join(parts) + footer
    return text if len(text) < limit else text[: limit - 1]


def _approved_lines(plan: Plan) -> list[str]:
    """The exceptions approved for this content: who, and which violations."""
    approved = [a for a in plan.actions if a.violations and a.approved_by]
    if not approved:
        return []
    names = ", ".join(dict.fromkeys(f"@{n}" for a in approved for n in a.approved_by))
    lines = [
        f"**✅ Policy exception approved by {_escape(names)} for this content: "
        f"{len(approved)} run(s) will be applied despite**",
        "",
    ]
    lines += [
        f"- {a.kind.value} {_code(a.name)}: {_escape(line)}"
        for a in approved
        for line in a.violations
    ]
    return [*lines, ""]


def _header(plan: Plan, summary_lines: Sequence[str] = ()) -> str:
    base = f" against `{plan.base[:12]}`" if plan.base else ""
    lines = [f"### Dockyard plan for `{plan.commit[:12]}`{base}", ""]
    broken = [a for a in plan.actions if a.violations and not a.approved_by]
    if broken:  # first: the PR cannot land as it is
        lines += [
            f"**⛔ Policy: {len(broken)} run(s) break the repo policy and will not be applied**",
            "",
        ]
        lines += [
            f"- {a.kind.value} {_code(a.name)}: {_escape(line)}"
            for a in broken
            for line in a.violations
        ]
        lines.append("")
    lines += _approved_lines(plan)
    counts = [f"{n} {kind}" for kind, n in plan.summary.items() if n]
    lines.append("**" + (", ".join(counts) if counts else "no resources") + "**")
    if summary_lines:
        lines += ["", *summary_lines]
    if plan.errors:
        lines += ["", f"**❌ {len(plan.errors)} error(s): nothing will be applied**", ""]
        lines += [f"- {_escape(str(error))}" for error in plan.errors[:200]]
        if len(plan.errors) > 200:
            lines.append(f"- … and {len(plan.errors) - 200} more")
    destroying = [a for a in plan.actions if a.destroys_data]
    if destroying:
        names = ", ".join(f"{a.kind.value} {_code(a.name)} ({a.action.value})" for a in destroying)
        lines += ["", f"> ⚠️ destroys data: {names}"]
    if plan.warnings:
        lines += ["", f"**⚠️ {len(plan.warnings)} warning(s)** (the plan still applies)", ""]
        lines += [f"- {_escape(str(warning))}" for warning in plan.warnings[:50]]
    if plan.unchecked:
        lines += ["", "> **Planned without a server; not checked:**"]
        lines += [f"> - {_escape(line)}" for line in plan.unchecked]
    if plan.errors and plan.actions:
        lines += ["", "_Below: what the valid files would do once the errors are fixed._"]
    return "\n".join(lines) + "\n"


def _details(action: Action, note: str | None = None) -> str:
    icon = _ICONS[action.action]
    implicit = " (implicit)" if action.implicit else ""
    summary = (
        f"{icon} <b>{action.action.value}</b> {action.kind.value} "
        f"<code>{html.escape(printable(action.name))}</code>{implicit} — "
        f"{_inline_code(action.reason)}"
    )
    lines = ["<details>", f"<summary>{summary}</summary>", ""]
    facts = [f"file {_code(action.path)}"] if action.path else []
    if action.forced_by:
        facts.append("forced by " + ", ".join(_code(f) for f in action.forced_by))
    if action.destroys_data:
        facts.append("**destroys data**")
    if facts:
        lines.append(" · ".join(facts))
    if note:
        lines += ["", note]
    if action.preview is not None:
        lines += ["", *_preview_lines(action.preview)]
    if action.fields:
        lines += ["", "| field | old | new |", "|---|---|---|"]
        lines += [f"| {_code(c.field)} | {_cell(c.old)} | {_cell(c.new)} |" for c in action.fields]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _preview_lines(preview: StackPreview) -> list[str]:
    """The stack preview of an action: counts and $/h, then its steps (or why none)."""
    price = _escape(price_text(preview, sep=" · "))
    if preview.error is not None:
        return [f"🔍 stack {_code(preview.stack)}: ⚠️ no preview: {_escape(preview.error)}{price}"]
    counts = ", ".join(f"{n} to {op}" for op, n in preview.counts.items() if n)
    lines = [f"🔍 stack {_code(preview.stack)}: {counts or 'no changes'}{price}"]
    for step in preview.steps[:_STEPS_SHOWN]:
        diffs = f" ({', '.join(_code(d) for d in step.diffs[:8])})" if step.diffs else ""
        lines.append(f"- {step.op} {_code(step.name)} {_escape(step.type)}{diffs}")
    if len(preview.steps) > _STEPS_SHOWN:
        lines.append(f"- … and {len(preview.steps) - _STEPS_SHOWN} more steps")
    return lines


def price_text(preview: StackPreview, *, sep: str) -> str:
    """`<sep>est. $0.011/h (100 GB gp3 $0.08/GB-month)`, the reason there is no figure,
    or "" (not a priced resource)."""
    basis = f" ({preview.price_basis})" if preview.price_basis else ""
    if preview.per_hour is not None:
        return f"{sep}est. {money_per_hour(preview.per_hour)}{basis}"
    return f"{sep}{preview.price_basis}" if preview.price_basis else ""


def money_per_hour(value: float) -> str:
    """`$1.006/h`, `-$0.5/h` (the saving of a delete)."""
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value):.4g}/h"


def _unchanged(actions: list[Action]) -> str:
    lines = ["<details>", f"<summary>⚪ {len(actions)} unchanged</summary>", ""]
    lines += [f"- {a.kind.value} {_code(a.name)}: {_escape(a.reason)}" for a in actions]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _truncation_note(
    resources: int, characters: int, titles: Sequence[str], full_plan_url: str | None
) -> str:
    shown = ", ".join(titles[:10]) + (f", and {len(titles) - 10} more" if len(titles) > 10 else "")
    where = (
        f"See the [full plan]({full_plan_url})."
        if full_plan_url
        else "Run `dockyard plan --format json` for the full plan."
    )
    return (
        f"\n> ✂️ Truncated: {resources} more block(s) ({characters:,} characters) left out "
        f"to stay under the comment limit: {shown}. {where}\n"
    )


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    text = json.dumps(canonical(value), ensure_ascii=False, default=str)
    if len(text) > _VALUE_LIMIT:
        text = text[:_VALUE_LIMIT] + "…"
    return f"<code>{html.escape(printable(text)).replace('|', '&#124;')}</code>"


def _inline_code(text: str) -> str:
    """HTML-escaped `text` with `code` spans as <code> (markdown is not rendered in <summary>)."""
    parts = html.escape(printable(text), quote=False).replace("|", "&#124;").split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _escape(text: str) -> str:
    """Free text (an error, a reason, a rule) on one markdown line: no escape sequence,
    line break, tag or table cell can come from it (`escaping.printable`)."""
    return printable(text).replace("<", "&lt;").replace(">", "&gt;").replace("|", "&#124;")


def _code(text: str) -> str:
    return markdown_code(text)
