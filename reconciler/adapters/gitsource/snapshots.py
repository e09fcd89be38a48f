"""Immutable snapshots of a config repo at a commit: which config files, at which blobs.

A `Snapshot` maps repo-relative paths of config files (`*.dstack.yml`, `*.dstack.yaml`
and `.dockyard.yml`, under the optional subdirectory, or in any of several directories
of a source that names several, its `roots`) to their blob SHAs; contents are
read (and parsed) only for blobs not seen before. The first snapshot lists the commit's
tree once (`git ls-tree`); the next ones apply `git diff-tree` between the two commits to
the previous snapshot, so a one-file commit costs one small diff.

A config file committed as a symbolic link is never read (its target could be any file
of the server, e.g. `/etc/passwd`): its path is kept in `links`, and loading reports it as
an error of the commit (docs/security.md, "Config inputs").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from reconciler.core.policy import CONFIG_SUFFIXES, POLICY_FILE

if TYPE_CHECKING:  # only annotations: the repo is GitMirror's (GitPython loads where git runs)
    import git


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The config files of one commit: path → blob SHA (read-only)."""

    commit: str
    files: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    subdir: str = ""
    links: frozenset[str] = frozenset()
    """Config paths committed as symbolic links: reported, never read."""
    roots: tuple[str, ...] = ()
    """The directories a config must be in (none: anywhere under `subdir`)."""

    @property
    def policy_path(self) -> str:
        return f"{self.subdir}/{POLICY_FILE}" if self.subdir else POLICY_FILE

    def relative(self, path: str) -> str:
        """`path` relative to the subdirectory (what `.dockyard.yml` `paths` refer to)."""
        return path[len(self.subdir) + 1 :] if self.subdir else path


def is_snapshot_file(path: str, subdir: str, roots: tuple[str, ...] = ()) -> bool:
    """A config under `subdir` (and in one of `roots`, when named), or the policy file
    at `subdir`'s top (with `roots`, the repo's root: `subdir` is then empty)."""
    if path == (f"{subdir}/{POLICY_FILE}" if subdir else POLICY_FILE):
        return True
    if subdir and not path.startswith(subdir + "/"):
        return False
    if roots and not any(path.startswith(root + "/") for root in roots):
        return False
    return path.endswith(CONFIG_SUFFIXES)


def _pathspec(subdir: str, roots: tuple[str, ...]) -> list[str]:
    """What git is asked to list (a narrowing only: `is_snapshot_file` decides)."""
    if roots:
        return ["--", *roots, POLICY_FILE]
    return ["--", subdir] if subdir else []


def list_snapshot(
    repo: git.Repo, commit: str, subdir: str = "", roots: tuple[str, ...] = ()
) -> Snapshot:
    """The snapshot of `commit`, from one `git ls-tree` of its whole tree."""
    args = ["-r", "-z", "--full-tree", commit, *_pathspec(subdir, roots)]
    out = repo.git.ls_tree(*args)
    files: dict[str, str] = {}
    links: set[str] = set()
    for entry in out.split("\0"):
        if not entry:
            continue
        meta, _, path = entry.partition("\t")
        mode, kind, sha = meta.split()
        if kind != "blob" or not is_snapshot_file(path, subdir, roots):
            continue
        if mode == _LINK:
            links.add(path)
        else:
            files[path] = sha
    return Snapshot(
        commit=commit,
        files=MappingProxyType(dict(sorted(files.items()))),
        subdir=subdir,
        links=frozenset(links),
        roots=roots,
    )


_LINK = "120000"


def advance_snapshot(repo: git.Repo, previous: Snapshot, commit: str) -> Snapshot:
    """The snapshot of `commit`, from `previous` and `git diff-tree` between the two."""
    if commit == previous.commit:
        return previous
    where = _pathspec(previous.subdir, previous.roots)
    args = ["-r", "-z", "--no-renames", "--no-commit-id", previous.commit, commit, *where]
    out = repo.git.diff_tree(*args)
    files = dict(previous.files)
    links = set(previous.links)
    parts = out.split("\0")
    for meta, path in zip(parts[0::2], parts[1::2], strict=False):
        if not meta.startswith(":"):
            continue
        _old_mode, new_mode, _old_sha, new_sha, status = meta[1:].split()
        files.pop(path, None)
        links.discard(path)
        if status.startswith("D") or new_mode in ("000000", "160000"):
            continue
        if is_snapshot_file(path, previous.subdir, previous.roots):
            if new_mode == _LINK:
                links.add(path)
            else:
                files[path] = new_sha
    return Snapshot(
        commit=commit,
        files=MappingProxyType(dict(sorted(files.items()))),
        subdir=previous.subdir,
        links=frozenset(links),
        roots=previous.roots,
    )
