"""Job archives from the config repo's git objects: `repos` and `files` at a commit.

`GitArchives.build(commit, upload)` returns the agent's `Archive` body (`{path, data}`,
data = base64 of a tar.gz) for one `reconciler.core.uploads.Upload`, read from the mirror's
objects (never from a work tree, so what runs is exactly the reconciled commit):

- a tree (a repo, or a `files` directory): `git archive <commit>:<path>`, extracted into
  the target directory;
- a blob (a `files` file): a tar with one member named after the target's last part,
  extracted into the target's parent (the executable bit is kept).

Archives are cached per (commit, source, target, kind), bounded in count and bytes: every
job of a run, and every retry, reuses them.
"""

from __future__ import annotations

import base64
import io
import posixpath
import subprocess
import tarfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from reconciler.core.uploads import Upload
from reconciler.errors import PermanentError

MAX_CACHED_ARCHIVES = 32
MAX_CACHED_BYTES = 256 * 1024 * 1024


class GitArchives:
    """Builds (and caches) job archives from the git objects of one repo."""

    def __init__(self, git_dir: Callable[[], Path]) -> None:
        self._git_dir = git_dir
        self._cache: OrderedDict[tuple[str, str, str, str], dict[str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def build(self, commit: str, upload: Upload) -> dict[str, str]:
        key = (commit, upload.source, upload.target, upload.kind)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        archive = self._build(commit, upload)
        with self._lock:
            self._cache[key] = archive
            while len(self._cache) > MAX_CACHED_ARCHIVES or (
                len(self._cache) > 1
                and sum(len(a["data"]) for a in self._cache.values()) > MAX_CACHED_BYTES
            ):
                self._cache.popitem(last=False)
        return archive

    def _build(self, commit: str, upload: Upload) -> dict[str, str]:
        spec = f"{commit}:{upload.source}" if upload.source else f"{commit}^{{tree}}"
        what = "repos" if upload.kind == "repo" else "files"
        kind = self._git("cat-file", "-t", spec, missing=f"{what}: {upload.source or '.'}")
        kind_name = kind.decode().strip()
        if kind_name == "tree":
            data = self._git("archive", "--format=tar.gz", spec, missing=what)
            return {"path": upload.target, "data": base64.b64encode(data).decode()}
        if kind_name != "blob" or upload.kind == "repo":
            raise PermanentError(
                f"{what}: {upload.source} is a {kind_name} at {commit[:12]}, not a "
                + ("directory" if upload.kind == "repo" else "file or directory")
            )
        return self._single_file(commit, upload, spec)

    def _single_file(self, commit: str, upload: Upload, spec: str) -> dict[str, str]:
        content = self._git("cat-file", "blob", spec, missing="files")
        mode = self._git("ls-tree", commit, "--", upload.source, missing="files").split()[:1]
        target = upload.target.rstrip("/") or posixpath.basename(upload.source)
        parent, name = posixpath.split(target)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o755 if mode == [b"100755"] else 0o644
            tar.addfile(info, io.BytesIO(content))
        return {"path": parent or ".", "data": base64.b64encode(buffer.getvalue()).decode()}

    def _git(self, *args: str, missing: str) -> bytes:
        command = ["git", "--git-dir", str(self._git_dir()), *args]
        done = subprocess.run(command, capture_output=True, check=False)
        if done.returncode != 0:
            detail = done.stderr.decode(errors="replace").strip().splitlines()
            raise PermanentError(
                f"{missing}: cannot read it from the config repo "
                f"({detail[-1] if detail else 'git failed'})"
            )
        return done.stdout
