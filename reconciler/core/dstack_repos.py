"""dstack's Git repo of a run, as a configuration Dockyard runs (pure; no I/O).

dstack 0.22.5 sends a repo (`repos: [{local_path: .}]`, `--repo PATH|URL`) as a remote
repo: `run_spec.repo_data` (`repo_type: remote`, the tracking branch and commit), the
clone URL by `repos/init`, and the uncommitted changes as a `git diff` by
`repos/upload_code` (`run_spec.repo_code_hash`). Dockyard's jobs clone URL repos
themselves (`reconciler.core.cloning`), so `with_dstack_repo` rewrites the first repo as
`{url, branch, hash, path}` and, when there is a diff, brings it as an archive
(`diff_archive`, extracted at `DIFF_DIR` in the working dir) and applies it with `git apply`
ahead of the commands (`init` of a dev environment). Called by `reconciler.web.dstack_repos`.
"""

from __future__ import annotations

import gzip
import io
import shlex
import tarfile
from typing import Any

DIFF_DIR = ".dockyard-code"
DIFF_NAME = "repo.diff"


def remote_repo_data(run_spec: dict[str, Any]) -> dict[str, Any] | None:
    """The run's remote repo data (None: a virtual repo, or none)."""
    data = run_spec.get("repo_data")
    if isinstance(data, dict) and data.get("repo_type") == "remote":
        return data
    return None


def _apply_diff(path: str) -> str:
    diff = f'"$PWD"/{DIFF_DIR}/{DIFF_NAME}'
    return f"git -C {shlex.quote(path)} apply --whitespace=nowarn {diff} && rm -rf {DIFF_DIR}"


def with_dstack_repo(
    configuration: dict[str, Any], repo_data: dict[str, Any], clone_url: str, *, has_diff: bool
) -> dict[str, Any]:
    """`configuration` with its first repo cloned from `clone_url` at dstack's commit."""
    repos = [dict(r) for r in configuration.get("repos") or [] if isinstance(r, dict)]
    first = repos[0] if repos else {}
    path = str(first.get("path") or ".")
    repo = {"url": clone_url, "path": path}
    for key, source in (("branch", "repo_branch"), ("hash", "repo_hash")):
        value = first.get(key) if first.get("url") else repo_data.get(source)
        if value:
            repo[key] = str(value)
    if first.get("if_exists"):
        repo["if_exists"] = first["if_exists"]
    result = {**configuration, "repos": [repo, *repos[1:]]}
    if has_diff:
        key = "init" if configuration.get("type") == "dev-environment" else "commands"
        result[key] = [_apply_diff(path), *(configuration.get(key) or [])]
    return result


def diff_archive(diff: bytes) -> bytes:
    """A gzip tar holding the diff as `DIFF_NAME` (extracted at `DIFF_DIR`)."""
    out = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        info = tarfile.TarInfo(DIFF_NAME)
        info.size, info.mode = len(diff), 0o644
        tar.addfile(info, io.BytesIO(diff))
    return out.getvalue()
