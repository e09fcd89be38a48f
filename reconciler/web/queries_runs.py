"""The API's read models of runs and jobs as dstack's Run JSON: they live in the store.

The queries are `reconciler.adapters.db.readmodels.runs` (each runs in the one transaction
`Database.read`/`.write` opens); the routes keep importing them by their names here.
"""

from __future__ import annotations

from reconciler.adapters.db.readmodels.runs import (
    FINISHED_JOB,
    FINISHED_RUN,
    find_job,
    find_run_ref,
    get_run,
    get_run_by_id,
    job_finished_at,
    list_runs,
)

__all__ = [
    "FINISHED_JOB",
    "FINISHED_RUN",
    "find_job",
    "find_run_ref",
    "get_run",
    "get_run_by_id",
    "job_finished_at",
    "list_runs",
]
