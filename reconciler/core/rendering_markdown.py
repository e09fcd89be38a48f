"""The plan as markdown for a pull-request comment (pure).

Summary first (counts per action, errors, data-destroying actions), then one `<details>`
block per changed resource with its field diff, then one block listing the unchanged
resources. GitHub rejects comments of 65,536 characters or more, so the text is always
shorter than `limit`: blocks that do not fit are left out and a note says how many
resources and characters were dropped.
"""

from __future__ import annotations

import html
import json
from typing import Any

from reconciler.core.rendering_json import canonical
from reconciler.domain.plan import Action, ActionKind, Plan

MARKDOWN_LIMIT = 65_536
_VALUE_LIMIT = 300
_ICONS = {
    ActionKind.CREATE: "🟢",
    ActionKind.UPDATE: "🟡",
    ActionKind.REPLACE: "🟠",
    ActionKind.DELETE: "🔴",
    ActionKind.RETAIN: "🔒",
    ActionKind.NOOP: "⚪",
    ActionKind.BLOCKED: "⛔",
}


def render_markdown(plan: Plan, *, limit: int = MARKDOWN_LIMIT) -> str:
    """The PR-comment markdown of `plan`, always fewer than `limit` characters."""
    head = _header(plan)
    blocks = [_details(action) for action in plan.actions if action.action is not ActionKind.NOOP]
    unchanged = [a for a in plan.actions if a.action is ActionKind.NOOP]
    if unchanged:
        blocks.append(_unchanged(unchanged))
    parts = [head]
    used = len(head)
    reserve = 300  # room for the truncation note
    for index, block in enumerate(blocks):
        if used + len(block) + reserve >= limit:
            left = blocks[index:]
            parts.append(_truncation_note(len(left), sum(len(b) for b in left)))
            break
        parts.append(block)
        used += len(block)
    text = "\n".join(parts)
    return text if len(text) < limit else text[: limit - 1]


def _header(plan: Plan) -> str:
    base = f" against `{plan.base[:12]}`" if plan.base else ""
    lines = [f"### Dockyard plan for `{plan.commit[:12]}`{base}", ""]
    counts = [f"{n} {kind}" for kind, n in plan.summary.items() if n]
    lines.append("**" + (", ".join(counts) if counts else "no resources") + "**")
    if plan.errors:
        lines += ["", f"**❌ {len(plan.errors)} error(s): nothing will be applied**", ""]
        lines += [f"- {_escape(str(error))}" for error in plan.errors[:200]]
        if len(plan.errors) > 200:
            lines.append(f"- … and {len(plan.errors) - 200} more")
    destroying = [a for a in plan.actions if a.destroys_data]
    if destroying:
        names = ", ".join(f"{a.kind.value} `{a.name}` ({a.action.value})" for a in destroying)
        lines += ["", f"> ⚠️ destroys data: {names}"]
    return "\n".join(lines) + "\n"


def _details(action: Action) -> str:
    icon = _ICONS[action.action]
    implicit = " (implicit)" if action.implicit else ""
    summary = (
        f"{icon} <b>{action.action.value}</b> {action.kind.value} "
        f"<code>{html.escape(action.name)}</code>{implicit} — {_inline_code(action.reason)}"
    )
    lines = ["<details>", f"<summary>{summary}</summary>", ""]
    facts = [f"file `{action.path}`"] if action.path else []
    if action.forced_by:
        facts.append("forced by " + ", ".join(f"`{f}`" for f in action.forced_by))
    if action.destroys_data:
        facts.append("**destroys data**")
    if facts:
        lines.append(" · ".join(facts))
    if action.fields:
        lines += ["", "| field | old | new |", "|---|---|---|"]
        lines += [f"| `{c.field}` | {_cell(c.old)} | {_cell(c.new)} |" for c in action.fields]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _unchanged(actions: list[Action]) -> str:
    lines = ["<details>", f"<summary>⚪ {len(actions)} unchanged</summary>", ""]
    lines += [f"- {a.kind.value} `{a.name}`: {_escape(a.reason)}" for a in actions]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _truncation_note(resources: int, characters: int) -> str:
    return (
        f"\n> ✂️ Truncated: {resources} more block(s) ({characters:,} characters) left out "
        "to stay under GitHub's comment limit. Run `dockyard plan --format json` for the "
        "full plan.\n"
    )


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    text = json.dumps(canonical(value), ensure_ascii=False, default=str)
    if len(text) > _VALUE_LIMIT:
        text = text[:_VALUE_LIMIT] + "…"
    return f"<code>{html.escape(text).replace('|', '&#124;')}</code>"


def _inline_code(text: str) -> str:
    """HTML-escaped `text` with `code` spans as <code> (markdown is not rendered in <summary>)."""
    parts = html.escape(text, quote=False).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _escape(text: str) -> str:
    return text.replace("<", "&lt;").replace(">", "&gt;")
