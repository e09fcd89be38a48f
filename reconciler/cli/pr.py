"""`dockyard pr comment`: post a plan on a pull request (one sticky comment + a status).

    dockyard pr comment --provider github|gitlab --repo OWNER/NAME --pr N
                        [--plan plan.json] [--sha SHA] [--key KEY] [--plan-url URL]

The plan is the JSON of `dockyard plan --format json` (with `--server`, it carries offers
and $/h); `--plan -` (the default) reads it from stdin. The comment is found by its hidden
marker and edited in place; `dockyard/plan` is set on `--sha` or else on the PR's head.
Tokens come from the environment (`GITHUB_TOKEN` / `GITLAB_TOKEN`, see `reconciler.pr.hosts`)
and never appear in any output. Exit 0 once posted, whatever the plan says (the status
says it); 1 with one clear line when the host refuses.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.cli.console import out
from reconciler.errors import UsageError
from reconciler.pr.document import read_report
from reconciler.pr.hosts import Provider, open_host
from reconciler.pr.posting import post_plan
from reconciler.pr.reviewing import PlanReport


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Pull requests: post the plan as a comment and a commit status.")
    group.command("comment")(comment_command)
    app.add_typer(group, name="pr")


def comment_command(
    provider: Annotated[Provider, typer.Option("--provider", help="github or gitlab.")],
    repo: Annotated[str, typer.Option("--repo", help="OWNER/NAME (GitLab: group/project).")],
    number: Annotated[int, typer.Option("--pr", help="Pull (merge) request number.", min=1)],
    plan: Annotated[str, typer.Option("--plan", help="Plan JSON file (`-`: stdin).")] = "-",
    sha: Annotated[
        str | None, typer.Option("--sha", help="Commit for the status (default: the PR head).")
    ] = None,
    key: Annotated[
        str, typer.Option("--key", help="Tells apart several plan comments on one PR.")
    ] = "",
    plan_url: Annotated[
        str | None, typer.Option("--plan-url", help="Link to the full plan (e.g. the CI run).")
    ] = None,
) -> None:
    """Create or update the PR's plan comment and set the `dockyard/plan` status."""
    report = _read_plan(plan)
    host = open_host(provider, repo, os.environ)
    try:
        posted = post_plan(host, number, report, sha=sha, key=key.strip(), full_plan_url=plan_url)
    finally:
        host.close()
    verb = "created" if posted.created else "updated"
    status = posted.status
    out().print(
        f"{verb} the plan comment {posted.comment_id} on {provider.value} {repo} #{number} "
        f"({posted.characters:,} characters); {status.context} on {posted.sha[:12]}: "
        f"{status.state.value} ({status.description})"
    )


def _read_plan(plan: str) -> PlanReport:
    if plan == "-":
        if sys.stdin.isatty():
            raise UsageError("give --plan FILE, or pipe `dockyard plan --format json` into it")
        text, source = sys.stdin.read(), "stdin"
    else:
        try:
            text, source = Path(plan).read_text(encoding="utf-8"), plan
        except OSError as exc:
            raise UsageError(f"cannot read --plan {plan}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source} is not JSON (line {exc.lineno}): {exc.msg}") from None
    return read_report(data, source=source)
