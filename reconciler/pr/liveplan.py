"""Planning a PR head's files against the live state of a project (the server's side).

`plan_against_store` is what `POST /api/project/{p}/plan/files` and the `pull_request`
webhook run: parse the files as the git source would, read what the store says is deployed
and the last applied revision, plan (errors plus the valid files' actions), and price the
run actions with the offers catalog. Synchronous: callers run it in a worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.adapters.db.store import Store
from reconciler.errors import UsageError
from reconciler.pr.reviewing import PlanReport, load_files, review
from schemas import parse_config
from stacks.catalog import load_catalog


def plan_against_store(
    store: Store, project: str, files: Mapping[str, bytes], *, commit: str, subdir: str = ""
) -> PlanReport:
    """The PR plan of `files` (at `commit`) against project `project`'s live state."""
    loaded = load_files(files, commit=commit, parse=parse_config, subdir=subdir)
    declared = loaded.policy.project
    if declared != project:
        raise UsageError(
            f".dockyard.yml at {commit[:12]} declares project {declared!r}, but the plan was "
            f"asked for project {project!r}: plan with --project {declared}, or fix `project:`"
        )
    observed = store.load_observed(project)
    row = store.get_project(project)
    base = store.last_applied_revision(row.id) if row is not None else None
    return review(loaded, observed, base=base, catalog=load_catalog())
