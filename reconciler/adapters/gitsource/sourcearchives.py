"""Job archives for runs of any followed source: from the mirror that has the commit.

The jobs worker has one archive builder (`WorkerDeps.archives`: `(commit, upload)`); with
many sources a run's commit is in its own source's mirror only. `SourceArchives` keeps
one `GitArchives` per mirror (the `--repo` one and each source's, added as its loop
starts: `reconciler.engine.sourceloops`) and builds from the first whose repository
has the commit. It asks `git cat-file -e` of the mirror's directory, never opens or
clones a mirror that is not there (a source whose fetch hangs holds no other's archive).
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from reconciler.adapters.gitsource.archives import GitArchives
from reconciler.adapters.gitsource.source import GitSource
from reconciler.core.uploads import Upload
from reconciler.errors import PermanentError

MAX_REMEMBERED = 10_000


class SourceArchives:
    """`build(commit, upload)` over every followed repo's mirror (see the module doc)."""

    def __init__(self) -> None:
        self._mirrors: dict[str, tuple[Path, GitArchives]] = {}
        self._found: dict[str, str] = {}  # commit → the mirror that has it (commits stay)
        self._lock = threading.Lock()

    def add(self, name: str, source: GitSource) -> None:
        """Build archives from `source`'s mirror too (replacing one of the same name)."""
        git_dir: Callable[[], Path] = lambda: Path(source.mirror.repo.git_dir)  # noqa: E731
        with self._lock:
            self._mirrors[name] = (source.mirror.path, GitArchives(git_dir))

    def build(self, commit: str, upload: Upload) -> dict[str, str]:
        with self._lock:
            mirrors = dict(self._mirrors)
            known = self._found.get(commit)
        if known in mirrors:
            return mirrors[known][1].build(commit, upload)
        if len(mirrors) == 1:  # one repo (the --repo shorthand alone): as before sources
            return next(iter(mirrors.values()))[1].build(commit, upload)
        for name, (path, archives) in mirrors.items():
            if _has_commit(path, commit):
                with self._lock:
                    if len(self._found) >= MAX_REMEMBERED:
                        self._found.clear()
                    self._found[commit] = name
                return archives.build(commit, upload)
        raise PermanentError(
            f"repos/files: commit {commit[:12]} is in no followed repository's mirror"
        )


def _has_commit(path: Path, commit: str) -> bool:
    if not path.exists():
        return False
    done = subprocess.run(
        ["git", "-C", str(path), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0
