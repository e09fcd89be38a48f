"""Planning a PR head's files against the live state of a project (the server's side).

`plan_files` is what `POST /api/project/{p}/plan/files` (hence `dockyard plan --server`)
and the `pull_request` webhook run: parse the files as the git source would, then plan them
with `reconciler.engine.planning.plan_live` — the function the reconcile pass plans with,
previews included — keeping the errors and the valid files' actions, and price the runs
with the offers catalog the caller holds (the PR bot's and the web context's, loaded when
the server starts). A server without engines (a test's fake runtime) gives no
`previewer`; its plan then says the stack previews were not checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from reconciler.adapters.db.store import Store
from reconciler.core.jobusers import JobUserRule
from reconciler.domain.observed import ObservedState
from reconciler.engine.deployedpolicy import RulesAt
from reconciler.engine.planning import OFFLINE_UNCHECKED, plan_live
from reconciler.engine.previewing import Previewer
from reconciler.errors import UsageError
from reconciler.pr.reviewing import PlanReport, load_files, priced
from schemas import parse_config
from stacks.catalog import CatalogRow


async def plan_files(
    store: Store,
    project: str,
    files: Mapping[str, bytes],
    *,
    commit: str,
    previewer: Previewer | None,
    catalog: Sequence[CatalogRow],
    subdir: str = "",
    tree: str | None = None,
    deployed: RulesAt | None = None,
    job_users: JobUserRule | None = None,
    default_project: str | None = None,
) -> PlanReport:
    """The PR plan of `files` (at `commit`) against project `project`'s live state, runs
    priced with `catalog` (the caller's, loaded once); with `tree` (the commit's git tree),
    approvals recorded for that content count when the `deployed` rules (the last applied
    revision's, never `files`') name their approver. `default_project`: the project when
    the files' `.dockyard.yml` names none (a source's; None: `main`)."""
    loaded = load_files(
        files, commit=commit, parse=parse_config, subdir=subdir, default_project=default_project
    )
    declared = loaded.policy.project
    if declared != project:
        raise UsageError(
            f".dockyard.yml at {commit[:12]} declares project {declared!r}, but the plan was "
            f"asked for project {project!r}: plan with --project {declared}, or fix `project:`"
        )
    planned = await plan_live(
        store,
        project,
        loaded.desired,
        loaded.policy,
        previewer=previewer,
        catalog=catalog,
        partial=True,
        tree=tree,
        deployed=deployed,
        job_users=job_users,
    )
    plan = planned.plan
    if previewer is None:
        plan = replace(plan, unchecked=OFFLINE_UNCHECKED[:1])
    observed = planned.observed or ObservedState(project)
    return priced(plan, loaded.desired, observed, catalog)
