"""`dockyard plan`: what a commit of the config repo would change, and why.

    dockyard plan --repo PATH_OR_URL [--branch B] [--ref REF] [--path SUBDIR]
                  [--db URL] [--data-dir DIR] [--format table|markdown|json] [--base REF]

Without `--base` the commit is planned against what the state store says is deployed;
with `--base REF` it is planned against another commit instead (the offline PR preview:
no store needed). Exit code 0 for a clean plan, 1 when the plan has errors. A local
path is read in place; URLs are mirrored under `<data-dir>/git`. An https token is read
from `$DOCKYARD_GIT_TOKEN` (or the variable named by `--token-env`).

With `--server URL --token T` the commit's config files are posted to a Dockyard server,
which plans them against its live state with offers and $/h (docs/pull-requests.md).
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from reconciler.adapters.gitsource import GitSource, LoadedSnapshot, location_from_env
from reconciler.adapters.gitsource.remotes import DEFAULT_TOKEN_ENV
from reconciler.core.planning import plan as make_plan
from reconciler.core.rendering_json import render_json
from reconciler.core.rendering_markdown import render_markdown
from reconciler.core.rendering_table import render_table
from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import Plan
from reconciler.errors import TransientError


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
        typer.Option("--base", help="Plan against this commit instead of the store (offline)."),
    ] = None,
    db: Annotated[
        str | None, typer.Option("--db", envvar="DOCKYARD_DB", help="Database URL.")
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
        str, typer.Option("--token-env", help="Environment variable holding an https token.")
    ] = DEFAULT_TOKEN_ENV,
    server: Annotated[
        str | None,
        typer.Option("--server", help="Plan on this Dockyard server (live state, prices)."),
    ] = None,
    server_token: Annotated[
        str | None,
        typer.Option("--token", envvar="DOCKYARD_SERVER_TOKEN", help="Token for --server."),
    ] = None,
) -> None:
    """Plan a commit of the config repo against what is deployed (or against --base)."""
    from schemas import parse_config  # the config contract; imported when planning

    directory = _data_dir(data_dir)
    location = location_from_env(
        repo, branch=branch, subdir=path, ssh_key=ssh_key, environ=os.environ, token_env=token_env
    )
    source = GitSource(location, data_dir=directory, parse=parse_config)
    source.fetch()
    commit = source.resolve(ref)
    if server is not None:
        _plan_on_server(source, commit, server, server_token or "", path, output)
    if base is not None:
        base_commit = source.resolve(base)
        observed = ObservedState.from_desired(source.load(source.snapshot(base_commit)).desired)
        loaded = source.load(source.snapshot(commit))
        result = make_plan(loaded.desired, observed, loaded.policy, base=base_commit)
    else:
        loaded = source.load(source.snapshot(commit))
        result = _plan_against_store(loaded, db=db, data_dir=directory)
    _print(result, output)
    raise typer.Exit(1 if result.errors else 0)


def _data_dir(data_dir: Path | None) -> Path:
    from reconciler.adapters.db.connecting import default_data_dir

    return (data_dir or default_data_dir()).expanduser()


def _plan_against_store(loaded: LoadedSnapshot, *, db: str | None, data_dir: Path) -> Plan:
    from sqlalchemy.exc import SQLAlchemyError

    from reconciler.adapters.db import Store, redact_url, resolve_db_url

    url = resolve_db_url(db, data_dir)
    store = Store.from_url(url)
    try:
        project = loaded.policy.project
        observed = store.load_observed(project)
        row = store.get_project(project)
        base = store.last_applied_revision(row.id) if row is not None else None
    except SQLAlchemyError as exc:
        raise TransientError(
            f"cannot read the state store {redact_url(url)}: run `dockyard db upgrade`, "
            "or plan offline with --base REF"
        ) from exc
    finally:
        store.close()
    return make_plan(loaded.desired, observed, loaded.policy, base=base)


def _print(result: Plan, output: OutputFormat) -> None:
    if output is OutputFormat.JSON:
        sys.stdout.write(render_json(result))
    elif output is OutputFormat.MARKDOWN:
        sys.stdout.write(render_markdown(result) + "\n")
    else:
        Console().print(render_table(result))


# -- plan on a server: `--server URL --token T` (reconciler.pr.remote) ------------------------


def _plan_on_server(
    source: GitSource, commit: str, server: str, token: str, subdir: str, output: OutputFormat
) -> None:
    """Post the commit's config files to the server, print its plan (offers, $/h), exit."""
    from reconciler.pr.commenting import cost_line, plan_markdown
    from reconciler.pr.document import report_to_json
    from reconciler.pr.remote import commit_files, plan_on_server

    files, project = commit_files(source, commit)
    report = plan_on_server(
        server, token, project=project, commit=commit, files=files, subdir=subdir
    )
    if output is OutputFormat.JSON:
        import json

        sys.stdout.write(json.dumps(report_to_json(report), indent=2, ensure_ascii=False) + "\n")
    elif output is OutputFormat.MARKDOWN:
        sys.stdout.write(plan_markdown(report) + "\n")
    else:
        Console().print(render_table(report.plan))
        line = cost_line(report)
        if line:
            Console().print(line.replace("**", ""))
    raise typer.Exit(1 if report.plan.errors else 0)
