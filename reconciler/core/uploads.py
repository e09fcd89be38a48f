"""Which parts of the config repo a job brings along: `repos` and `files` (pure).

For a run created by GitOps (resource origin `git:<path>@<commit>`), dstack's local paths
are paths of the config repo at that commit, relative to the config file's directory:

- `repos: ["."]` (or `{local_path: "."}`, `"..:/repo"`): the tree at that path (the whole
  repo when it is the repo's root) lands at the repo's `path` (default `.`, the working
  dir);
- `files: [{local_path, path}]`: a file or directory of the repo lands at `path`
  (relative: under the working dir).

`uploads_of` says what to pack (`Upload`); the engine builds the archives from git objects
(`reconciler.adapters.gitsource.archives`). Local paths that leave the repo are config
errors; URL repos are fetched by the job itself (`reconciler.core.cloning`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from reconciler.errors import PermanentError

_ORIGIN_RE = re.compile(r"^git:(?P<path>.+)@(?P<commit>[0-9a-fA-F]{7,64})$")


@dataclass(frozen=True, slots=True)
class Upload:
    """One thing to pack: `source` in the repo ("" = its root) to `target` in the job."""

    kind: Literal["repo", "file"]
    source: str
    target: str  # absolute, or relative to the job's working dir


@dataclass(frozen=True, slots=True)
class Uploads:
    items: tuple[Upload, ...] = ()
    skipped: tuple[str, ...] = field(default=())  # what could not be brought, and why


def git_origin(origin: str | None) -> tuple[str, str] | None:
    """(config path, commit) of a `git:<path>@<commit>` origin; None for other origins."""
    match = _ORIGIN_RE.match(origin or "")
    return (match["path"], match["commit"]) if match else None


def wants_uploads(spec: Mapping[str, Any]) -> bool:
    return bool(spec.get("repos") or spec.get("files"))


def uploads_of(spec: Mapping[str, Any], config_path: str) -> Uploads:
    """What a job of `spec` (from the config file at `config_path`) brings from the repo."""
    base = posixpath.dirname(config_path)
    items: list[Upload] = []
    for index, repo in enumerate(spec.get("repos") or ()):
        if not isinstance(repo, Mapping):
            continue
        if repo.get("url"):  # the job fetches it itself (`reconciler.core.cloning`)
            continue
        source = _in_repo(base, str(repo.get("local_path") or "."), f"repos[{index}].local_path")
        items.append(Upload("repo", source, str(repo.get("path") or ".")))
    for index, item in enumerate(spec.get("files") or ()):
        if not isinstance(item, Mapping):
            continue
        where = f"files[{index}].local_path"
        source = _in_repo(base, str(item.get("local_path") or ""), where)
        items.append(Upload("file", source, str(item.get("path") or item.get("local_path"))))
    return Uploads(tuple(items))


def local_uploads_of(spec: Mapping[str, Any]) -> Uploads:
    """What `dockyard apply` packs from the user's machine for a job of `spec`.

    Sources are local paths as written (relative to the configuration file's directory,
    absolute, or `~`); the CLI resolves and packs them, uploads the archives, and the run
    carries them (`file_archives`). URL repos are left to the job (`cloning`).
    """
    items: list[Upload] = []
    for repo in spec.get("repos") or ():
        if not isinstance(repo, Mapping):
            continue
        if repo.get("url"):  # the job fetches it itself (`reconciler.core.cloning`)
            continue
        items.append(Upload("repo", str(repo.get("local_path") or "."), _target(repo, ".")))
    for item in spec.get("files") or ():
        if isinstance(item, Mapping) and item.get("local_path"):
            local = str(item["local_path"])
            items.append(Upload("file", local, _target(item, local)))
    return Uploads(tuple(items))


def _target(item: Mapping[str, Any], default: str) -> str:
    return str(item.get("path") or default)


def _in_repo(base: str, local_path: str, where: str) -> str:
    if not local_path or local_path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", local_path):
        raise PermanentError(
            f"{where}: {local_path!r} is not a path of the config repo: use a path relative "
            "to the configuration file's directory"
        )
    joined = posixpath.normpath(posixpath.join(base, local_path))
    if joined == ".." or joined.startswith("../"):
        raise PermanentError(
            f"{where}: {local_path!r} leads out of the config repo (from {base or '/'})"
        )
    return "" if joined == "." else joined


def repo_dir(spec: Mapping[str, Any], working_dir: str) -> str:
    """Where the repo lands (`DSTACK_REPO_DIR`): its `path` under the working dir."""
    repos = [r for r in spec.get("repos") or () if isinstance(r, Mapping)]
    target = str(repos[0].get("path") or ".") if repos else "."
    return posixpath.normpath(posixpath.join(working_dir, target))
