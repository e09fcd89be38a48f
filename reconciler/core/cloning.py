"""URL repos of a job (`repos: [{url, branch, hash, path, if_exists}]`): the git commands
the job runs first to fetch them (pure).

dstack's runner clones a URL repo into the job's repo directory before the commands. Here
the job does it itself, with the host's or the image's `git`: `git init` in the target,
then a shallow fetch of the branch, the commit (`hash`) or the remote's HEAD, and a
checkout — which works in a working dir that already holds uploaded `files`. `if_exists`
(dstack's): `error` (the default) fails the job when the target is already a git repo,
`skip` keeps it as it is. Credentials are whatever `git` on the host or in the image has
(an SSH agent, a credential helper); a token in the URL works but shows in the job's spec.

`render_agent_job` (`reconciler.core.jobspecs`) puts these ahead of the job's commands.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any


def url_repos(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in spec.get("repos") or () if isinstance(r, Mapping) and r.get("url")]


def clone_commands(spec: Mapping[str, Any]) -> list[str]:
    """One shell command per URL repo, in order; [] when the job has none."""
    return [_clone(repo) for repo in url_repos(spec)]


def _clone(repo: Mapping[str, Any]) -> str:
    target = shlex.quote(str(repo.get("path") or "."))
    url = shlex.quote(str(repo["url"]))
    ref = shlex.quote(str(repo.get("hash") or repo.get("branch") or "HEAD"))
    git = f"git -C {target}"
    fetch = (
        f"mkdir -p {target} && {git} init -q && {git} remote add origin {url} && "
        f"{git} fetch -q --depth 1 origin {ref} && {git} checkout -q FETCH_HEAD"
    )
    if repo.get("branch") and not repo.get("hash"):
        branch = shlex.quote(str(repo["branch"]))
        fetch += f" && {git} checkout -q -B {branch}"
    if repo.get("if_exists") == "skip":
        return f"{{ test -e {target}/.git || {{ {fetch}; }}; }}"
    exists = f"echo 'repos: {target} is already a git repo (if_exists: error)' >&2; false"
    return f"{{ if test -e {target}/.git; then {exists}; else {fetch}; fi; }}"
