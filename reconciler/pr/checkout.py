"""Planning a PR from a checkout, as CI has it: `dockyard pr plan`.

CI checks out the PR as a detached commit, often with no local branch at all, so a local
checkout is read in place without asking for a branch head (a URL is fetched first). The
PR head is planned either offline against its base commit, with the same review rules and
catalog prices as on a server (the base's resources stand for what is deployed), or on a
Dockyard server against its live state (`reconciler.pr.remote`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from reconciler.adapters.gitsource import GitSource, location_from_env
from reconciler.domain.observed import ObservedState
from reconciler.pr.reviewing import PlanReport, review
from stacks.catalog import load_catalog


def open_checkout(
    repo: str, *, subdir: str, data_dir: Path, environ: Mapping[str, str]
) -> GitSource:
    """The config repo at `repo` (a path is read in place; a URL is mirrored and fetched)."""
    from schemas import parse_config

    location = location_from_env(repo, subdir=subdir, environ=environ)
    source = GitSource(location, data_dir=data_dir, parse=parse_config)
    if location.scheme != "local":
        source.fetch()
    return source


def plan_offline(source: GitSource, *, ref: str, base: str) -> PlanReport:
    """The PR plan of `ref` against `base` as if `base` were deployed, with prices."""
    head_commit, base_commit = source.resolve(ref), source.resolve(base)
    deployed = source.load(source.snapshot(base_commit)).desired
    loaded = source.load(source.snapshot(head_commit))
    observed = ObservedState.from_desired(deployed)
    return review(loaded, observed, base=base_commit, catalog=load_catalog())


def plan_remotely(
    source: GitSource, *, ref: str, server: str, token: str, subdir: str
) -> PlanReport:
    """The PR plan of `ref` made by the server at `server` against its live state."""
    from reconciler.pr.remote import commit_files, plan_on_server  # httpx: not offline

    commit = source.resolve(ref)
    files, project = commit_files(source, commit)
    tree = source.tree(commit)
    return plan_on_server(
        server, token, project=project, commit=commit, files=files, subdir=subdir, tree=tree
    )
