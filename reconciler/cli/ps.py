"""`dockyard ps [-a] [-v] [-w] [-n N] [--format plain|json] [--json]`: runs, as dstack's `ps`.

Columns NAME, BACKEND, GPU, PRICE, STATUS, SUBMITTED; with `-v` RESOURCES and INSTANCE
TYPE instead of GPU, and ERROR (a failed run's error; empty for runs that succeeded).
Active runs by default; `-a` every run, paged through the server's keyset-paged
`/api/runs/list` (so no run is cut off); `-n N` the last N (implies `-a`); `-w` refreshes
every 2 s until Ctrl-C; `--format json` (or `--json`) prints `{"project", "runs": [Run]}`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.table import Table

from reconciler.api import Client
from reconciler.api import models as wire
from reconciler.cli.console import (
    JsonOption,
    ProjectOption,
    ago,
    grid,
    open_client,
    out,
    print_json,
)
from reconciler.cli.describing import (
    backend_label,
    describe_resources,
    instance_resources,
    instance_type_name,
    price_label,
)

WATCH_SECONDS = 2.0
PAGE_SIZE = 100


class OutputFormat(StrEnum):
    plain = "plain"
    json = "json"


def _row(run: wire.Run, verbose: bool) -> list[str]:
    sub = run.latest_job_submission
    jpd: dict[str, Any] = (sub.job_provisioning_data if sub else None) or {}
    resources = instance_resources(jpd.get("instance_type")) or jpd.get("resources")
    spot = bool(resources.get("spot")) if isinstance(resources, dict) else False
    finished = run.status in ("terminated", "failed", "done")
    name = str(run.run_spec.get("run_name") or "")
    row = [name, backend_label(jpd.get("dockyard_backend"), jpd.get("backend"), jpd.get("region"))]
    if verbose:
        row += [describe_resources(resources), instance_type_name(jpd.get("instance_type"))]
    else:
        row.append(describe_resources(resources, gpu_only=True))
    row.append(price_label(jpd.get("price"), spot=spot) if jpd else "-")
    row += [sub.status if sub and not finished else run.status, ago(run.submitted_at)]
    if verbose:
        failed = run.status == "failed"
        row.append(run.error or (run.termination_reason or "" if failed else ""))
    return row


def run_rows(runs: list[wire.Run], verbose: bool) -> Table:
    columns = ["NAME", "BACKEND", "GPU", "PRICE", "STATUS", "SUBMITTED"]
    if verbose:
        columns = ["NAME", "BACKEND", "RESOURCES", "INSTANCE TYPE", "PRICE", "STATUS"]
        columns += ["SUBMITTED", "ERROR"]
    return grid(columns, (_row(run, verbose) for run in runs))


def fetch_runs(client: Client, *, all_runs: bool, last: int | None) -> list[wire.Run]:
    """Active runs; with `all_runs` every run (page by page); with `last` the newest N."""
    if last is None and not all_runs:
        return client.list_runs(all=False)
    size = PAGE_SIZE if last is None else max(1, min(last, PAGE_SIZE))
    runs = client.iter_runs(project=client.project, page_size=size)
    return list(runs if last is None else itertools.islice(runs, max(1, last)))


def register(app: typer.Typer) -> None:
    @app.command("ps")
    def ps(
        all_runs: Annotated[
            bool, typer.Option("-a", "--all", help="Show finished runs too (every run).")
        ] = False,
        verbose: Annotated[bool, typer.Option("-v", "--verbose", help="More columns.")] = False,
        watch: Annotated[bool, typer.Option("-w", "--watch", help="Refresh until Ctrl-C.")] = False,
        last: Annotated[
            int | None, typer.Option("-n", "--last", help="Only the last N runs (implies -a).")
        ] = None,
        output: Annotated[
            OutputFormat, typer.Option("--format", help="Output format.")
        ] = OutputFormat.plain,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """List runs."""
        with open_client(project) as client:

            def fetch() -> list[wire.Run]:
                return fetch_runs(client, all_runs=all_runs, last=last)

            if json_ or output is OutputFormat.json:
                print_json({"project": client.project, "runs": fetch()})
                return
            if not watch:
                out().print(run_rows(fetch(), verbose))
                return
            _watch(fetch, verbose)


def _watch(fetch: Callable[[], list[wire.Run]], verbose: bool) -> None:
    from rich.live import Live  # only here: the plain listing starts without it

    try:
        console = out()
        if not console.is_terminal:  # piped: print a fresh table every interval
            while True:
                console.print(run_rows(fetch(), verbose))
                console.file.flush()
                time.sleep(WATCH_SECONDS)
        with Live(run_rows(fetch(), verbose), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(WATCH_SECONDS)
                live.update(run_rows(fetch(), verbose), refresh=True)
    except KeyboardInterrupt:
        return
