"""`dockyard logs NAME [-f] [--job N] [--replica N] [--since T]`: a job's output.

Logs are the job's raw output (stdout and stderr interleaved), read by byte offset, so
`-f` resumes exactly where it was after a dropped connection. Lines carry no timestamps:
`--since` (a duration such as `10m`, or RFC 3339) selects by the job's submission: a job
submission that finished before that time shows nothing.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from reconciler.cli.console import ProjectOption, open_client
from reconciler.cli.waiting import print_logs
from reconciler.errors import UsageError

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(value: str, now: datetime) -> datetime:
    match = _DURATION.match(value.strip())
    if match:
        return now - timedelta(seconds=int(match[1]) * _UNITS[match[2]])
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since {value!r}: use a duration (30s, 10m, 2h, 1d) or RFC 3339"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def register(app: typer.Typer) -> None:
    @app.command("logs")
    def logs(
        name: Annotated[str, typer.Argument(help="Run name.")],
        follow: Annotated[
            bool, typer.Option("-f", "--follow", help="Follow until the job ends.")
        ] = False,
        job: Annotated[int, typer.Option("--job", help="Job number.")] = 0,
        replica: Annotated[int, typer.Option("--replica", help="Replica number.")] = 0,
        since: Annotated[str | None, typer.Option("--since", help="Duration or RFC 3339.")] = None,
        project: ProjectOption = None,
    ) -> None:
        """Print a run's job logs."""
        with open_client(project) as client:
            if since is not None:
                cutoff = parse_since(since, datetime.now(UTC))
                run = client.get_run(name)
                sub = run.latest_job_submission
                if sub is not None and sub.finished_at is not None and sub.finished_at < cutoff:
                    return
            try:
                print_logs(client, name, job_num=job, replica_num=replica, follow=follow)
            except KeyboardInterrupt:
                return
