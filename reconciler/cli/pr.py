"""`dockyard pr plan` and `dockyard pr comment`: a pull request's plan, posted on it.

    dockyard pr plan [--repo PATH_OR_URL] [--ref REF] (--base REF | --server URL [--token T])
                     [--path SUBDIR] [--format json|markdown] > plan.json
    dockyard pr comment --provider github|gitlab --repo OWNER/NAME --pr N
                        [--plan plan.json] [--sha SHA] [--key KEY] [--plan-url URL]

`pr plan` plans the PR head of a CI checkout (detached, no branch needed): offline against
its base commit, or on a server against live state; both price the runs with the offers
catalog, and a head with errors still shows what its valid files would do. Exit 1 when the
plan has errors, 3 when the repo policy blocks a run (as `dockyard plan`).

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
from enum import StrEnum
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
    group.command("plan")(plan_command)
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


class PlanFormat(StrEnum):
    JSON = "json"
    MARKDOWN = "markdown"


def plan_command(
    repo: Annotated[str, typer.Option("--repo", help="Config repo: a checkout or URL.")] = ".",
    ref: Annotated[str, typer.Option("--ref", help="The PR head.")] = "HEAD",
    base: Annotated[
        str | None, typer.Option("--base", help="The PR base commit (offline plan).")
    ] = None,
    server: Annotated[
        str | None, typer.Option("--server", help="Plan on this Dockyard server instead.")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="DOCKYARD_SERVER_TOKEN", help="Token for --server."),
    ] = None,
    path: Annotated[str, typer.Option("--path", help="Subdirectory holding the configs.")] = "",
    output: Annotated[PlanFormat, typer.Option("--format", help="json or markdown.")] = (
        PlanFormat.JSON
    ),
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", envvar="DOCKYARD_DATA_DIR", help="Where URLs are mirrored."),
    ] = None,
) -> None:
    """Plan a PR head (offline against --base, or on --server), with offers and $/h."""
    from reconciler.cli.plan import data_dir_or_default, plan_exit_code
    from reconciler.pr.checkout import open_checkout, plan_offline, plan_remotely
    from reconciler.pr.commenting import plan_markdown
    from reconciler.pr.document import report_to_json

    if (base is None) == (server is None):
        raise UsageError("give either --base REF (offline) or --server URL (live state)")
    directory = data_dir_or_default(data_dir)
    source = open_checkout(repo, subdir=path, data_dir=directory, environ=os.environ)
    if server is not None:
        report = plan_remotely(source, ref=ref, server=server, token=token or "", subdir=path)
    else:
        assert base is not None
        report = plan_offline(source, ref=ref, base=base)
    if output is PlanFormat.JSON:
        text = json.dumps(report_to_json(report), indent=2, ensure_ascii=False)
    else:
        text = plan_markdown(report)
    sys.stdout.write(text + "\n")
    raise typer.Exit(plan_exit_code(report.plan))


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
