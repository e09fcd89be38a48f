"""The plan for people: a rich table with colored field-level diffs (pure).

`render_table` returns a rich renderable; the CLI prints it. Each resource is a row
(action, kind, name, reason) followed by its changed fields as `field: old → new`, the
old value in red and the new one in green; a previewed fleet, volume or gateway adds its
stack's counts and estimated $/h (or why there is no preview). A plan made without a server
ends with the checks it could not make.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from reconciler.core.escaping import printable
from reconciler.core.rendering_json import canonical
from reconciler.core.rendering_markdown import price_text
from reconciler.domain.plan import Action, ActionKind, Plan

_STYLES = {
    ActionKind.CREATE: "bold green",
    ActionKind.UPDATE: "bold yellow",
    ActionKind.REPLACE: "bold dark_orange",
    ActionKind.DELETE: "bold red",
    ActionKind.RETAIN: "bold cyan",
    ActionKind.NOOP: "dim",
    ActionKind.BLOCKED: "bold magenta",
}
_VALUE_LIMIT = 120


def render_table(plan: Plan, *, show_noop: bool = True) -> RenderableType:
    """Errors (if any), the actions table, and a one-line summary."""
    parts: list[RenderableType] = []
    base = f" against {plan.base[:12]}" if plan.base else ""
    parts.append(Text(f"Plan for {plan.commit[:12]}{base}", style="bold"))
    if plan.errors:
        parts.append(_errors(plan))
    plain = [a for a in plan.actions if _is_plain_noop(a)] if show_noop else []
    actions = [
        a
        for a in plan.actions
        if a.action is not ActionKind.NOOP or (show_noop and not _is_plain_noop(a))
    ]
    if actions:
        parts.append(_actions(actions))
    if plain:
        parts.append(_unchanged(plain))
    parts.append(_summary(plan))
    if plan.unchecked:
        parts.append(Text("Planned without a server; not checked:", style="bold"))
        parts += [_text(f"  - {line}", style="dim") for line in plan.unchecked]
    parts += [_text(f"warning: {warning}", style="yellow") for warning in plan.warnings]
    return Group(*parts)


def _errors(plan: Plan) -> Table:
    table = Table(title="errors: nothing will be applied", title_style="bold red")
    table.add_column("file", style="red", no_wrap=True)
    table.add_column("field")
    table.add_column("message")
    for error in plan.errors:
        where = error.path
        if error.line is not None:
            where += f":{error.line}" + (f":{error.column}" if error.column else "")
        table.add_row(_text(where), _text(error.field or ""), _text(error.message))
    return table


def _actions(actions: list[Action]) -> Table:
    table = Table(show_lines=False)
    table.add_column("action", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("name", no_wrap=True)
    table.add_column("changes")
    for action in actions:
        label = Text(action.action.value, style=_STYLES[action.action])
        if action.destroys_data:
            label.append(" ⚠ data", style="bold red")
        name = _text(action.name)
        if action.implicit:
            name.append(" (implicit)", style="dim")
        table.add_row(label, action.kind.value, name, _changes(action))
    return table


def _is_plain_noop(action: Action) -> bool:
    """An unchanged resource with nothing but a reason to show (no preview, no fields)."""
    return action.action is ActionKind.NOOP and action.preview is None and not action.fields


def _unchanged(actions: list[Action]) -> Text:
    """The unchanged resources as dim aligned lines under the table, not as table rows: a
    repo of 1,000 configs that a commit barely touches is 1,000 such rows, and rich lays
    out a table cell by cell (0.4 s of CPU for them; bench/cli.py's offline plan)."""
    kinds = max(len(a.kind.value) for a in actions)
    names = [printable(a.name) + (" (implicit)" if a.implicit else "") for a in actions]
    width = max(len(n) for n in names)
    text = Text(f"{len(actions)} unchanged:", style="bold")
    for action, name in zip(actions, names, strict=True):
        text.append(
            f"\n  {action.kind.value:<{kinds}}  {name:<{width}}  {printable(action.reason)}",
            style="dim",
        )
    return text


def _changes(action: Action) -> Text:
    text = _text(action.reason, style="dim" if action.action is ActionKind.NOOP else "")
    preview = action.preview
    if preview is not None:
        price = price_text(preview, sep=", ")
        if preview.error is not None:
            why = f"no preview: {preview.error}{price}"
            text.append(f"\n  stack {printable(preview.stack)}: {printable(why)}", style="red")
        else:
            counts = ", ".join(f"{n} to {op}" for op, n in preview.counts.items() if n)
            shown = f"\n  stack {printable(preview.stack)}: {counts or 'no changes'}{price}"
            text.append(shown, style="cyan")
    for change in action.fields:
        text.append(f"\n  {printable(change.field)}: ", style="bold")
        text.append(_value(change.old), style="red")
        text.append(" → ")
        text.append(_value(change.new), style="green")
    return text


def _value(value: Any) -> str:
    if value is None:
        return "(unset)"
    text = printable(json.dumps(canonical(value), ensure_ascii=False, default=str))
    return text if len(text) <= _VALUE_LIMIT else text[:_VALUE_LIMIT] + "…"


def _text(text: str, style: str = "") -> Text:
    """A plan's string as a rich `Text`: never markup, never an escape (`printable`)."""
    return Text(printable(text), style=style)


def _summary(plan: Plan) -> Text:
    text = Text()
    for kind, count in plan.summary.items():
        if count:
            if text:
                text.append(", ")
            text.append(f"{count} {kind}", style=_STYLES[ActionKind(kind)])
    if plan.errors:
        text.append(f"{', ' if text else ''}{len(plan.errors)} error(s)", style="bold red")
    return text if text else Text("nothing to do")
