"""Preview runs of a pull request, the pure part: names, what is deployed, the budget, the
comment section (docs/previews.md).

Called by `reconciler.engine.previewruns` (deploy, teardown, sweep) and
`reconciler.pr.previews` (the comment). No I/O, no clock: `now` is passed in.

- `preview_project_name`: the ephemeral project of a PR, `<project>-pr-<n>` (GitLab:
  `<project>-mr-<n>`): the config repo's project is in it, so two config repos served by one
  server (or a GitHub PR and a GitLab MR of the same number) never share one.
- `select_preview`: from the PR head's desired state, the services and dev environments
  (tasks only with `policy.previews.tasks: true`) and the fleets they may use
  (`policy.previews.fleets`), re-homed into the preview project; runs that cannot be
  previewed are listed with the rule.
- `budget_refusal`: `policy.previews.budget.hourly` for every preview of the project.
- `render_section`: the preview comment: each run's URL through the proxy, its status,
  its cost so far.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from reconciler.core.policy import PreviewRules
from reconciler.domain.desired import DesiredResource, DesiredState
from reconciler.domain.kinds import Kind
from reconciler.domain.previewruns import PreviewRun, PreviewRunStatus, PreviewState

LABEL = "dockyard:preview"
COMMAND = "/dockyard preview"
MARKER = "<!-- dockyard:preview-runs -->"
_NAME_LIMIT = 50


def preview_project_name(project: str, provider: str, number: int) -> str:
    """`main-pr-7` (GitHub) or `main-mr-7` (GitLab); a long project name is shortened and
    made unique with a hash of it (`pr-7-1a2b3c4d`)."""
    kind = "mr" if provider == "gitlab" else "pr"
    name = f"{project}-{kind}-{number}"
    if len(name) <= _NAME_LIMIT:
        return name
    digest = hashlib.sha256(project.encode()).hexdigest()[:8]
    return f"{kind}-{number}-{digest}"


def is_preview_command(body: str) -> bool:
    """Whether a comment asks for a preview: a line that is `/dockyard preview`."""
    return any(line.strip() == COMMAND for line in body[:10_000].splitlines())


@dataclass(frozen=True, slots=True)
class PreviewSelection:
    """What a preview deploys: fleets first, then runs (all in the preview project)."""

    resources: tuple[DesiredResource, ...]
    notes: tuple[str, ...]
    """One line per run left out, with the rule."""

    @property
    def runs(self) -> tuple[DesiredResource, ...]:
        return tuple(r for r in self.resources if r.kind.is_run)


def _fleet_names(spec: Mapping[str, Any]) -> list[str] | None:
    refs = spec.get("fleets")
    if not refs:
        return None
    return [str(r.get("name") if isinstance(r, Mapping) else r) for r in refs]


def _network_volumes(spec: Mapping[str, Any]) -> list[str]:
    names = []
    for volume in spec.get("volumes") or ():
        if isinstance(volume, Mapping) and volume.get("name"):
            name = volume["name"]
            names.append(str(name if isinstance(name, str) else name[0]))
    return names


def _previewed_kinds(rules: PreviewRules) -> set[Kind]:
    kinds = {Kind.SERVICE, Kind.DEV_ENVIRONMENT}
    if rules.tasks:
        kinds.add(Kind.TASK)
    return kinds


def select_preview(
    desired: DesiredState, rules: PreviewRules, preview_project: str
) -> PreviewSelection:
    """See the module docstring; `desired` must have no issues."""
    fleets = {r.name: r for r in desired.resources if r.kind is Kind.FLEET}
    allowed = [name for name in rules.fleets if name in fleets]
    kinds = _previewed_kinds(rules)
    used: set[str] = set()
    runs: list[DesiredResource] = []
    notes: list[str] = []
    for resource in desired.resources:
        if not resource.kind.is_run:
            continue
        if resource.kind not in kinds:
            notes.append(
                f"{resource.kind.value} {resource.name}: not previewed (tasks run only with "
                "policy.previews.tasks: true)"
            )
            continue
        volumes = _network_volumes(resource.spec)
        if volumes:
            notes.append(
                f"{resource.kind.value} {resource.name}: not previewed: it mounts volume "
                f"{volumes[0]}, and previews never touch the project's volumes"
            )
            continue
        asked = _fleet_names(resource.spec)
        usable = [n for n in allowed if asked is None or n in asked]
        if not usable:
            names = ", ".join(asked) if asked else "any fleet of the repo"
            notes.append(
                f"policy: previews.fleets: {resource.kind.value} {resource.name} asks "
                f"{names}, previews may use {', '.join(rules.fleets) or 'no fleet'}"
            )
            continue
        used.update(usable)
        runs.append(replace(resource, project=preview_project))
    chosen = [replace(fleets[n], project=preview_project) for n in allowed if n in used]
    return PreviewSelection(tuple(chosen + runs), tuple(notes))


def budget_refusal(
    rules: PreviewRules, project: str, others: float, this: float, expensive: Sequence[str]
) -> str | None:
    """The rule's line when this preview ($/h `this`) brings the project's previews (the
    others cost `others`) over `policy.previews.budget.hourly`, else None."""
    limit = rules.budget.hourly
    total = round(others + this, 4)
    if limit is None or total <= limit:
        return None
    runs = f" (runs: {', '.join(expensive)})" if expensive else ""
    return (
        f"policy: previews.budget.hourly: this preview brings the previews of project "
        f"{project} to {_money(total)}, over their {_money(limit)} budget{runs}"
    )


def _money(value: float) -> str:
    return f"${value:,.2f}/h"


def cost_so_far(per_hour: float, since: datetime | None, now: datetime) -> float:
    """What a run priced `per_hour` cost from `since` to `now`."""
    if since is None or per_hour <= 0:
        return 0.0
    return per_hour * max(0.0, (now - since).total_seconds()) / 3600


def _status_cell(run: PreviewRunStatus) -> str:
    if run.kind == "service" and run.status == "running":
        return "running, ready" if run.ready else "running, not ready yet"
    return run.status


def render_section(
    preview: PreviewRun,
    runs: Iterable[PreviewRunStatus],
    *,
    base_url: str,
    now: datetime,
) -> str:
    """The preview comment (marker first): state, head, TTL, one row per run."""
    lines = [MARKER, "### 🔎 Dockyard preview runs", ""]
    head = preview.head[:12]
    who = f"@{preview.requested_by}"
    if preview.state is PreviewState.REFUSED:
        lines.append(f"**Not deployed** (head `{head}`, asked by {who}): {preview.reason}")
    elif preview.state in (PreviewState.STOPPING, PreviewState.CLOSED):
        done = "torn down" if preview.state is PreviewState.CLOSED else "being torn down"
        lines.append(f"**Preview {done}**: {preview.reason}")
    else:
        expires = preview.expires_at.strftime("%Y-%m-%d %H:%M UTC") if preview.expires_at else "?"
        lines.append(
            f"Project `{preview.preview_project}` runs head `{head}` (asked by {who}); "
            f"torn down at {expires} or when the PR closes or loses the `{LABEL}` label."
        )
    rows = list(runs) if preview.state is PreviewState.ACTIVE else []
    if rows:
        lines += ["", "| run | kind | status | URL | cost so far |", "|---|---|---|---|---|"]
        base = base_url.rstrip("/")
        for run in rows:
            url = (
                f"{base}/proxy/services/{preview.preview_project}/{run.name}/"
                if run.kind == "service"
                else "—"
            )
            spent = cost_so_far(preview.prices.get(run.name, 0.0), run.submitted_at, now)
            per_hour = preview.prices.get(run.name, 0.0)
            lines.append(
                f"| `{run.name}` | {run.kind} | {_status_cell(run)} | {url} | "
                f"${spent:,.2f} (at {_money(per_hour)}) |"
            )
        lines += [
            "",
            "Services answer with the bearer token of a member of the project "
            f"`{preview.project}` (`Authorization: Bearer <your token>`); no token is posted here.",
        ]
    if preview.notes and preview.state is not PreviewState.CLOSED:
        lines += ["", *[f"- {note}" for note in preview.notes]]
    return "\n".join(lines) + "\n"
