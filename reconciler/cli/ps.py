"""`dockyard ps [-a] [-v] [-w] [-n N] [--json]`: the project's runs, as dstack's `ps`.

Columns NAME, BACKEND, GPU, PRICE, STATUS, SUBMITTED (and with `-v` RESOURCES, INSTANCE
TYPE, ERROR). Active runs by default; `-a` all; `-n N` the last N (implies `-a`);
`-w` refreshes every 2 s until Ctrl-C; `--json` prints `{"project", "runs": [Run]}`.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from reconciler.api import models as wire
from reconciler.cli.console import JsonOption, ProjectOption, ago, open_client, out, print_json

WATCH_SECONDS = 2.0


def _gpu(resources: dict[str, Any] | None) -> str:
    gpus = (resources or {}).get("gpus") or []
    if isinstance(gpus, list) and gpus:
        first = gpus[0] if isinstance(gpus[0], dict) else {}
        return f"{first.get('name', 'gpu')}:{len(gpus)}"
    return "-"


def run_rows(runs: list[wire.Run], verbose: bool) -> Table:
    columns = ["NAME", "BACKEND", "GPU", "PRICE", "STATUS", "SUBMITTED"]
    if verbose:
        columns[3:3] = ["RESOURCES", "INSTANCE TYPE"]
        columns.append("ERROR")
    grid = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        grid.add_column(column)
    for run in runs:
        sub = run.latest_job_submission
        jpd = (sub.job_provisioning_data if sub else None) or {}
        backend = str(jpd.get("backend") or "-")
        if jpd.get("region"):
            backend += f" ({jpd['region']})"
        price = f"${jpd['price']:g}" if jpd.get("price") is not None else "-"
        status = (
            sub.status
            if sub and run.status not in ("terminated", "failed", "done")
            else (run.status)
        )
        row = [run.run_spec.get("run_name", ""), backend, _gpu(jpd.get("resources")), price]
        if verbose:
            row[3:3] = [str(jpd.get("resources") or "-"), str(jpd.get("instance_type") or "-")]
        row += [status, ago(run.submitted_at)]
        if verbose:
            row.append(run.error or run.termination_reason or "")
        grid.add_row(*row)
    return grid


def register(app: typer.Typer) -> None:
    @app.command("ps")
    def ps(
        all_runs: Annotated[
            bool, typer.Option("-a", "--all", help="Show finished runs too.")
        ] = False,
        verbose: Annotated[bool, typer.Option("-v", "--verbose", help="More columns.")] = False,
        watch: Annotated[bool, typer.Option("-w", "--watch", help="Refresh until Ctrl-C.")] = False,
        last: Annotated[
            int | None, typer.Option("-n", "--last", help="Only the last N runs.")
        ] = None,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """List runs."""
        with open_client(project) as client:

            def fetch() -> list[wire.Run]:
                if last is not None:
                    return client.list_runs(all=True, limit=max(1, last))
                return client.list_runs(all=all_runs)

            if json_:
                print_json({"project": client.project, "runs": fetch()})
                return
            if not watch:
                out().print(run_rows(fetch(), verbose))
                return
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
