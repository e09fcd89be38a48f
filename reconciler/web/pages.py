"""The read-only reconcile page that commit statuses link to (small HTML, no script).

`GET /pages/reconciles/{id}?sig=…` shows one reconcile: its commit, trigger, stage and
times, the plan's counts, the outcome ("applied N, blocked M: …"), the plan errors
(file:line), the error line, and one row per action with its outcome (a blocked action
with its reason). `GET /pages/commits/{sha}?sig=…` shows the newest reconcile of a
commit (what a pending `dockyard/apply` links to before the reconcile has finished).

A browser following a status link carries no bearer token, so these paths are open at the
gate and check a signature instead: links are signed by the server's pull-request bot
(`reconciler.pr.bot`), and the pages exist only when the bot is configured. The template is
`templates/reconcile.html`; every value is HTML-escaped.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from importlib import resources
from string import Template
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse

from reconciler.adapters.db.readmodels.project import find_reconcile_page
from reconciler.domain.history import ReconcileRecord
from reconciler.pr.bot import PullRequestBot
from reconciler.web.context import get_context

PAGE_PREFIX = "/pages/"
_SETTLED = {"noop": "unchanged", "retain": "retained"}


def action_outcomes(
    status: str,
    error: str | None,
    actions: Sequence[Mapping[str, Any]],
    results: Sequence[Mapping[str, Any]] = (),
) -> list[tuple[str, str]]:
    """(outcome, detail) per action.

    From the per-action `results` the reconcile recorded (its outcome's `actions`) where
    there are some; for older rows, from the status and error line: a reconcile that
    failed while applying names the failed actions in its error (`project/kind/name:
    message`, the first five), the others of that pass were applied. Any other failure or
    an abort applied nothing.
    """
    recorded = {str(r.get("key")): r for r in results if isinstance(r, Mapping)}
    keys = [f"{a.get('project')}/{a.get('kind')}/{a.get('name')}:" for a in actions]
    failed = {key for key in keys if error and key in error}
    rows: list[tuple[str, str]] = []
    for action, key in zip(actions, keys, strict=True):
        kind = str(action.get("action"))
        result = recorded.get(key[:-1])
        if kind in _SETTLED:
            rows.append((_SETTLED[kind], ""))
        elif kind == "blocked":
            rows.append(("blocked", str((result or {}).get("message") or action.get("reason"))))
        elif result is not None and result.get("result") == "failed":
            rows.append(("failed", str(result.get("message") or "")))
        elif result is not None:
            rows.append(("applied", ""))
        elif status in ("queued", "running"):
            rows.append(("pending", ""))
        elif status == "succeeded" or (status == "failed" and failed and key not in failed):
            rows.append(("applied", ""))
        elif key in failed and error:
            rows.append(("failed", _after(error, key)))
        else:
            rows.append(("not-applied", status))
    return rows


def _after(error: str, key: str) -> str:
    return error.split(key, 1)[1].split(";", 1)[0].strip()


def render_page(row: ReconcileRecord) -> str:
    project = row.project
    plan: Mapping[str, Any] = row.plan or {}
    actions = [a for a in plan.get("actions") or [] if isinstance(a, Mapping)]
    errors = [e for e in plan.get("errors") or [] if isinstance(e, Mapping)]
    recorded = (row.outcome or {}).get("actions") if isinstance(row.outcome, Mapping) else None
    outcomes = action_outcomes(row.status, row.error, actions, recorded or ())
    result = row.outcome.get("summary") if isinstance(row.outcome, Mapping) else None
    summary = ", ".join(f"{n} {k}" for k, n in (plan.get("summary") or {}).items() if n)
    e = html.escape
    values = {
        "title": e(f"Reconcile {row.id[:8]} · {row.status} · {project}"),
        "short_id": e(row.id[:8]),
        "status": e(row.status),
        "commit": e(row.attempted_revision or "(not fetched yet)"),
        "project": e(project),
        "trigger": e(row.trigger),
        "stage": e(row.stage or "queued"),
        "created": e(row.created_at.isoformat(timespec="seconds")),
        "finished": e(row.finished_at.isoformat(timespec="seconds") if row.finished_at else "—"),
        "applied": e(row.applied_revision or "—"),
        "summary": e(summary or ("not planned yet" if not plan else "no resources")),
        "outcome": e(str(result) if result else "—"),
        "error_block": f'<p class="error" id="error">{e(row.error)}</p>' if row.error else "",
        "errors_block": _errors(errors),
        "actions_block": _actions(actions, outcomes),
    }
    return _template().substitute(values)


def _template() -> Template:
    text = resources.files("reconciler.web").joinpath("templates/reconcile.html").read_text()
    return Template(text)


def _errors(errors: Sequence[Mapping[str, Any]]) -> str:
    if not errors:
        return ""
    items = []
    for error in errors:
        where = str(error.get("path"))
        if error.get("line") is not None:
            where += f":{error['line']}"
        items.append(
            f"<li><code>{html.escape(where)}</code> {html.escape(str(error.get('message')))}</li>"
        )
    return f'<h2>Errors: nothing was applied</h2>\n<ul id="errors">{"".join(items)}</ul>'


def _actions(actions: Sequence[Mapping[str, Any]], outcomes: Sequence[tuple[str, str]]) -> str:
    if not actions:
        return "<p>No actions.</p>"
    titles = ("action", "kind", "name", "file", "reason", "outcome")
    head = "<tr>" + "".join(f"<th>{t}</th>" for t in titles) + "</tr>"
    rows = []
    for action, (outcome, detail) in zip(actions, outcomes, strict=True):
        cells = [
            html.escape(str(action.get(k) or ""))
            for k in ("action", "kind", "name", "path", "reason")
        ]
        shown = f'<span class="status {outcome}">{outcome}</span>'
        if detail:
            shown += f" {html.escape(detail)}"
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + f"<td>{shown}</td></tr>")
    return f'<table id="actions">{head}{"".join(rows)}</table>'


def build_pages_router() -> APIRouter:
    router = APIRouter(prefix="/pages", include_in_schema=False)

    @router.get("/{kind}/{ident}", response_class=HTMLResponse)
    async def page(kind: str, ident: str, request: Request, sig: str | None = None) -> HTMLResponse:
        bot: PullRequestBot | None = getattr(request.app.state, "pull_requests", None)
        if kind not in ("reconciles", "commits") or bot is None:
            raise HTTPException(404, "no such page")
        if not bot.is_signed(kind, ident, sig):
            raise HTTPException(403, "this link is not signed by this server")
        found = await get_context(request).db.read(find_reconcile_page, kind, ident)
        if found is None:
            body = (
                f"<!doctype html><title>Waiting</title><p>No reconcile of {html.escape(ident)}.</p>"
            )
            return HTMLResponse(body, status_code=404)
        return HTMLResponse(render_page(found))

    return router
