"""The plan a pull request gets: from the head's files, against what is deployed, with costs.

`load_files` reads config files given as bytes (posted by `dockyard plan --server`, or read
from the host's API at the PR head) exactly as the git source reads a commit: the
`.dockyard.yml` policy, its `paths`, the same parser and cross-file checks.

`review` plans them offline (the engine's `plan_offline`; the server plans them with
`reconciler.engine.planning.plan_live`, see `liveplan`) and `priced` adds the runs'
prices. A commit with errors is never applied, and the planner then gives no actions; a
reviewer still wants to see what the rest of the PR does, so the PR plan keeps the errors
*and* adds the actions of the valid files (resources deployed from an invalid file are
left out: their fate is unknown until the file parses). The markdown says so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.adapters.gitsource.documents import DocumentCache, LoadedSnapshot, load_snapshot
from reconciler.adapters.gitsource.snapshots import Snapshot, is_snapshot_file
from reconciler.core.loading import ConfigParser
from reconciler.domain.desired import DesiredState
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import Plan
from reconciler.engine.costing import PlanCost, estimate
from reconciler.engine.planning import plan_offline
from stacks.catalog import CatalogRow


@dataclass(frozen=True, slots=True)
class PlanReport:
    """A PR's plan and what it costs (`cost` is None when prices were not computed)."""

    plan: Plan
    cost: PlanCost | None = None


def wanted_path(subdir: str = "") -> Callable[[str], bool]:
    """A predicate for the files a snapshot reads (configs and `.dockyard.yml`)."""

    def wanted(path: str) -> bool:
        return is_snapshot_file(path, subdir)

    return wanted


def load_files(
    files: Mapping[str, bytes],
    *,
    commit: str,
    parse: ConfigParser,
    subdir: str = "",
    default_project: str | None = None,
) -> LoadedSnapshot:
    """The desired state of a commit whose files are given (path → content);
    `default_project`: the project when `.dockyard.yml` names none (a source's)."""
    chosen = {path: text for path, text in files.items() if is_snapshot_file(path, subdir)}
    blobs = {path: hashlib.sha1(text).hexdigest() for path, text in chosen.items()}
    texts = {blobs[path]: text for path, text in chosen.items()}

    def read(wanted: Sequence[str]) -> Mapping[str, bytes]:
        return {blob: texts[blob] for blob in wanted}

    snapshot = Snapshot(commit=commit, files=blobs, subdir=subdir)
    return load_snapshot(snapshot, read, DocumentCache(parse), default_project=default_project)


def review(
    loaded: LoadedSnapshot,
    observed: ObservedState,
    *,
    base: str | None,
    catalog: Iterable[CatalogRow] | None,
) -> PlanReport:
    """The offline PR plan of `loaded` against `observed` (the engine's `plan_offline`,
    errors plus the valid files' actions), priced with `catalog` (None: no prices)."""
    rows = tuple(catalog) if catalog is not None else ()
    result = plan_offline(
        loaded.desired, loaded.policy, observed, base=base, catalog=rows, partial=True
    )
    return priced(result, loaded.desired, observed, rows if catalog is not None else None)


def priced(
    result: Plan,
    desired: DesiredState,
    observed: ObservedState,
    catalog: Iterable[CatalogRow] | None,
) -> PlanReport:
    """`result` with each changed run's best offer and $/h (None catalog: no prices)."""
    if catalog is None:
        return PlanReport(result)
    fleets = [r.spec for r in desired.resources if r.kind is Kind.FLEET]
    old_fleets = [r.spec for r in observed.resources if r.kind is Kind.FLEET]
    old_specs = {r.key: r.spec for r in observed.resources}
    cost = estimate(
        result.actions, fleets=fleets, old_fleets=old_fleets, old_specs=old_specs, catalog=catalog
    )
    return PlanReport(result, cost)
