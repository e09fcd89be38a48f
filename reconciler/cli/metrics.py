"""`dockyard metrics RUN [--job N] [--replica N] [-w] [--json]`: what a run's jobs use now.

As dstack's `metrics`: every job of the run by default (`--job`, `--replica` narrow it),
from the server's `metrics/job/{run}` (dstack's `JobMetrics`, sampled from the job's agent
when asked). One row per job: CPU (% of one CPU), MEMORY, and per GPU its utilization and
memory; `-` for a job that is not running. `-w` refreshes every 10 s until Ctrl-C;
`--json` prints `[{"replica_num", "job_num", "metrics": [...]}]`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from reconciler.api import Client
from reconciler.api import models as wire
from reconciler.cli.console import JsonOption, ProjectOption, grid, open_client, out, print_json
from reconciler.errors import UsageError

WATCH_SECONDS = 10.0
GIB = 1024**3


def _jobs(run: wire.Run, job: int | None, replica: int | None) -> list[tuple[int, int]]:
    """(replica_num, job_num) of the run's jobs, narrowed by `--replica` and `--job`."""
    found = []
    for info in run.jobs:
        spec = info.job_spec
        pair = (int(spec.get("replica_num") or 0), int(spec.get("job_num") or 0))
        if (replica is None or pair[0] == replica) and (job is None or pair[1] == job):
            found.append(pair)
    return sorted(set(found)) or ([(replica or 0, job or 0)] if not run.jobs else [])


def _latest(metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        m["name"]: m["values"][-1]
        for m in metrics.get("metrics") or []
        if isinstance(m, dict) and m.get("values")
    }


def _gb(value: Any) -> str:
    return f"{float(value) / GIB:.1f}GB"


def metrics_row(replica: int, job: int, metrics: dict[str, Any]) -> tuple[str, ...]:
    values = _latest(metrics)
    label = f"replica={replica} job={job}"
    if "cpu_usage_percent" not in values:
        return (label, "-", "-", "-")
    gpus = [
        f"gpu{i}: {values.get(f'gpu_util_percent_gpu{i}', 0)}% "
        f"{_gb(values.get(f'gpu_memory_usage_bytes_gpu{i}', 0))}"
        for i in range(int(values.get("gpus_detected_num") or 0))
    ]
    memory = values.get("memory_working_set_bytes", values.get("memory_usage_bytes", 0))
    return (label, f"{values['cpu_usage_percent']}%", _gb(memory), ", ".join(gpus) or "-")


def _table(rows: list[tuple[str, ...]]) -> Table:
    return grid(("JOB", "CPU", "MEMORY", "GPU"), rows)


def _collect(
    client: Client, name: str, job: int | None, replica: int | None
) -> list[tuple[int, int, dict[str, Any]]]:
    run = client.get_run(name)
    jobs = _jobs(run, job, replica)
    if not jobs:
        raise UsageError(f"run {name} has no job with --replica {replica} --job {job}")
    return [(r, j, client.job_metrics(name, job_num=j, replica_num=r)) for r, j in jobs]


def _watch(render: Callable[[], Table]) -> None:
    try:
        with Live(render(), console=out(), auto_refresh=False) as live:
            while True:
                time.sleep(WATCH_SECONDS)
                live.update(render(), refresh=True)
    except KeyboardInterrupt:
        return


def register(app: typer.Typer) -> None:
    @app.command("metrics")
    def metrics(
        name: Annotated[str, typer.Argument(help="Run name.")],
        job: Annotated[int | None, typer.Option("--job", help="Only this job number.")] = None,
        replica: Annotated[int | None, typer.Option("--replica", help="Only this replica.")] = None,
        watch: Annotated[bool, typer.Option("-w", "--watch", help="Refresh until Ctrl-C.")] = False,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """Show a run's metrics: CPU, memory and GPUs of each job."""
        with open_client(project) as client:

            def render() -> Table:
                return _table([metrics_row(*row) for row in _collect(client, name, job, replica)])

            if json_:
                print_json(
                    [
                        {"replica_num": r, "job_num": j, **m}
                        for r, j, m in _collect(client, name, job, replica)
                    ]
                )
                return
            if watch:
                _watch(render)
                return
            out().print(render())
