"""`GitSource`: one config repo as a sequence of snapshots (shell: git and the data dir).

Composition: a `GitMirror` (clone/fetch, errors), snapshots built incrementally from the
previous one, and a `DocumentCache` by blob SHA. Typical use:

    source = GitSource(location, data_dir=dir, parse=schemas.parse_config)
    head = source.fetch()
    loaded = source.load(source.snapshot(head))
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from reconciler.adapters.gitsource.documents import DocumentCache, LoadedSnapshot, load_snapshot
from reconciler.adapters.gitsource.mirror import GitMirror
from reconciler.adapters.gitsource.remotes import RepoLocation
from reconciler.adapters.gitsource.snapshots import Snapshot, advance_snapshot, list_snapshot
from reconciler.core.loading import ConfigParser
from schemas.limits import DEFAULT_LIMITS, ConfigLimits

_KEPT_SNAPSHOTS = 8


class GitSource:
    """Fetches a config repo and turns commits into desired states, incrementally."""

    def __init__(
        self,
        location: RepoLocation,
        *,
        data_dir: Path,
        parse: ConfigParser,
        limits: ConfigLimits = DEFAULT_LIMITS,
        mirror_root: Path | None = None,
        default_project: str | None = None,
    ) -> None:
        """`limits`: those `parse` reads within; a blob over `max_bytes` is never read.
        `mirror_root`: where the mirror lives (default `<data_dir>/git`; a source has its
        own, so two sources of one repo never fetch into one mirror at once).
        `default_project`: the project when `.dockyard.yml` names none (`load_snapshot`)."""
        self.location = location
        self.default_project = default_project
        self.mirror = GitMirror(location, root=mirror_root or data_dir / "git")
        self.cache = DocumentCache(parse, limits=limits)
        self._snapshots: OrderedDict[str, Snapshot] = OrderedDict()

    def fetch(self) -> str:
        """Update the mirror; return the head commit of the branch."""
        return self.mirror.fetch()

    def resolve(self, ref: str | None = None) -> str:
        """The commit a ref names (the branch head when `ref` is None)."""
        return self.mirror.branch_head() if ref is None else self.mirror.resolve(ref)

    def snapshot(self, commit: str) -> Snapshot:
        """The snapshot of `commit`, diffed from the most recent one when there is one."""
        known = self._snapshots.get(commit)
        if known is not None:
            self._snapshots.move_to_end(commit)
            return known
        if self._snapshots:
            import git  # here, not at the top: a server's start needs no GitPython

            previous = next(reversed(self._snapshots.values()))
            try:
                snap = advance_snapshot(self.mirror.repo, previous, commit)
            except git.GitCommandError:  # the previous commit is gone (force push + gc)
                snap = list_snapshot(
                    self.mirror.repo, commit, self.location.subdir, self.location.roots
                )
        else:
            snap = list_snapshot(
                self.mirror.repo, commit, self.location.subdir, self.location.roots
            )
        self._snapshots[commit] = snap
        while len(self._snapshots) > _KEPT_SNAPSHOTS:
            self._snapshots.popitem(last=False)
        return snap

    def tree(self, commit: str) -> str:
        """The SHA of `commit`'s root tree (the content an approval is keyed by)."""
        return str(self.mirror.repo.commit(commit).tree.hexsha)

    def load(self, snapshot: Snapshot) -> LoadedSnapshot:
        """The desired state of `snapshot`; parses only blobs not seen before."""
        mirror = self.mirror
        return load_snapshot(
            snapshot, mirror.read_blobs, self.cache, mirror.blob_sizes, self.default_project
        )
