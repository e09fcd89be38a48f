"""`dockyard plan`: what a commit of the config repo would change, and why.

    dockyard plan --repo PATH_OR_URL [--branch B] [--ref REF] [--path SUBDIR]
                  [--server URL --token T | --base REF] [--format table|markdown|json]

The plan is made by the one plan function (`reconciler.engine.planning`), as the
reconcile will make it:

- on a server (default): the commit's config files are posted to the Dockyard server
  (`--server URL --token T`, else the CLI's configured project, `dockyard project add`),
  which plans them against its live state with stack previews, blocked actions, drift,
  offers and $/h (docs/pull-requests.md). The CLI never opens a server's database;
- offline with `--base REF`: against another commit as if it were deployed (no server);
  the plan then says which checks it could not make (stack previews, capacity, prices).

Exit code 0 for a clean plan, 1 when the plan has errors, 3 when the repo policy blocks a
run (`plan_exit_code`; 2 is a usage error). A local path is read in place;
URLs are mirrored under `<data-dir>/git`. An https token is read from
`$DOCKYARD_GIT_TOKEN` (or the variable named by `--token-env`).
"""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    # `dockyard plan --help` imports this module only: what planning needs (the config
    # models, git, the planner) is imported when a plan is made, and the offline plan
    # never imports the server's side (tests/cli/test_plan_imports.py, bench/cli.py).
    from reconciler.adapters.gitsource import GitSource
    from reconciler.domain.plan import Plan
    from reconciler.pr.reviewing import PlanReport


class OutputFormat(StrEnum):
    TABLE = "table"
    MARKDOWN = "markdown"
    JSON = "json"


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)


def plan_command(
    repo: Annotated[str, typer.Option("--repo", help="Config repo: local path or URL.")] = ".",
    branch: Annotated[str, typer.Option("--branch", help="Branch to follow.")] = "main",
    ref: Annotated[
        str | None, typer.Option("--ref", help="Commit to plan (default: the branch head).")
    ] = None,
    path: Annotated[str, typer.Option("--path", help="Subdirectory holding the configs.")] = "",
    base: Annotated[
        str | None,
        typer.Option("--base", help="Plan offline, against this commit (no server)."),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", envvar="DOCKYARD_DATA_DIR", help="Data directory."),
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option("--format", help="table, markdown or json.")
    ] = OutputFormat.TABLE,
    ssh_key: Annotated[
        Path | None, typer.Option("--ssh-key", help="Private key for an SSH repo URL.")
    ] = None,
    token_env: Annotated[
        str | None,
        typer.Option(
            "--token-env",
            help="Environment variable holding an https token (default: DOCKYARD_GIT_TOKEN).",
            show_default=False,
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option("--server", help="Plan on this Dockyard server (default: the CLI's project)."),
    ] = None,
    server_token: Annotated[
        str | None,
        typer.Option("--token", envvar="DOCKYARD_SERVER_TOKEN", help="Token for --server."),
    ] = None,
) -> None:
    """Plan a commit of the config repo on the server (live state) or offline (--base)."""
    from reconciler.adapters.gitsource import GitSource, location_from_env
    from reconciler.adapters.gitsource.remotes import DEFAULT_TOKEN_ENV
    from reconciler.cli.validate import config_limits
    from schemas import parse_config  # the config contract; imported when planning

    directory = data_dir_or_default(data_dir)
    location = location_from_env(
        repo,
        branch=branch,
        subdir=path,
        ssh_key=ssh_key,
        environ=os.environ,
        token_env=token_env or DEFAULT_TOKEN_ENV,
    )
    limits = config_limits(os.environ)  # DOCKYARD_CONFIG_MAX_*, as on the server
    source = GitSource(
        location,
        data_dir=directory,
        parse=lambda text, name: parse_config(text, name, limits),
        limits=limits,
    )
    source.fetch()
    commit = source.resolve(ref)
    if base is not None:
        from reconciler.pr.checkout import plan_offline

        report = plan_offline(source, ref=commit, base=base)
    else:
        report = _plan_on_server(source, commit, server, server_token, path.strip("/"))
    _print(report, output)
    raise typer.Exit(plan_exit_code(report.plan))


EXIT_ERRORS = 1
"""The plan has errors: nothing would be applied."""
EXIT_BLOCKED = 3
"""A run breaks the repo policy (`.dockyard.yml` `policy`) with no approved exception: the
reconcile would not apply it, so CI fails the pull request (2 is a usage error)."""


def plan_exit_code(plan: Plan) -> int:
    """0 for a clean plan, `EXIT_ERRORS`, else `EXIT_BLOCKED` when the policy blocks a run
    (what fails the `dockyard/plan` status, `reconciler.pr.commenting.policy_blocked`)."""
    from reconciler.pr.commenting import policy_blocked

    if plan.errors:
        return EXIT_ERRORS
    return EXIT_BLOCKED if policy_blocked(plan) else 0


# The server's default data dir (`reconciler.adapters.db.connecting.DEFAULT_DATA_DIR`,
# which a plan must not import: it loads SQLAlchemy); tests/cli/test_plan_imports.py
# checks that the two agree.
DEFAULT_DATA_DIR = Path("~/.dockyard/data")


def data_dir_or_default(data_dir: Path | None) -> Path:
    """Where URL repos are mirrored: `--data-dir`, else the server's default data dir."""
    return (data_dir or DEFAULT_DATA_DIR).expanduser()


def _plan_on_server(
    source: GitSource, commit: str, server: str | None, token: str | None, subdir: str
) -> PlanReport:
    """Post the commit's config files to the server; the plan it answers (offers, $/h)."""
    from reconciler.pr.remote import commit_files, plan_on_server

    files, project = commit_files(source, commit)
    if server is None:
        from reconciler.api.config import resolve_project

        configured = resolve_project(None)
        server, token = configured.url, token or configured.token
    return plan_on_server(
        server,
        token or "",
        project=project,
        commit=commit,
        files=files,
        subdir=subdir,
        tree=source.tree(commit),
    )


def _print(report: PlanReport, output: OutputFormat) -> None:
    from reconciler.pr.commenting import cost_line, plan_markdown
    from reconciler.pr.document import report_to_json

    if output is OutputFormat.JSON:
        sys.stdout.write(json.dumps(report_to_json(report), indent=2, ensure_ascii=False) + "\n")
    elif output is OutputFormat.MARKDOWN:
        sys.stdout.write(plan_markdown(report) + "\n")
    else:
        from rich.console import Console  # rich's tables: only the table needs them

        from reconciler.core.rendering_table import render_table

        Console().print(render_table(report.plan))
        line = cost_line(report)
        if line:
            Console().print(line.replace("**", ""))
