"""Which job's log the web reads: a run and the latest submission of one of its jobs.

`JobRef` is what the log routes (`web.routes_logs`) and the console's run page read from
the store (`readmodels.runs.find_job` / `find_run_ref`) to find a job's log file and say
whether it is finished. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobRef:
    """A run's name and status, and its job's submission id and status (None: no
    submission of that job yet, or not asked)."""

    run_name: str
    run_status: str
    job_id: str | None = None
    job_status: str | None = None
