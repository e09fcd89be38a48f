"""Content-addressed files of the server: the archives `dockyard apply` uploads.

`<data_dir>/files/<sha256>`, written once (atomically, 0600) and named by the hash of
their bytes, so the same working tree uploaded twice is stored once and a run's spec can
name its archives by hash (`file_archives`). The web routes (`routes_files`) put and look
up, and now and then `sweep` what no run names any more; the jobs worker reads them into
the job's archives (`workers.job_uploads`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from pathlib import Path

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class BlobStore:
    """See the module docstring."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def valid(digest: str) -> bool:
        return bool(_DIGEST.match(digest))

    def _path(self, digest: str) -> Path:
        if not self.valid(digest):
            raise ValueError(f"not a sha256 hex digest: {digest[:80]!r}")
        return self.root / digest

    def put(self, data: bytes) -> str:
        """Store `data` (if not stored yet); its sha256 hex digest."""
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if path.exists():
            return digest
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest

    def has(self, digest: str) -> bool:
        return self.valid(digest) and self._path(digest).is_file()

    def size(self, digest: str) -> int:
        """Bytes of the stored archive (0 when there is none, or `digest` is not one)."""
        try:
            return self._path(digest).stat().st_size if self.valid(digest) else 0
        except FileNotFoundError:
            return 0

    def get(self, digest: str) -> bytes:
        """The stored bytes; `FileNotFoundError` when there are none."""
        return self._path(digest).read_bytes()

    def sweep(self, keep: set[str], *, now: float, grace: float) -> int:
        """Delete stored files not in `keep` and older than `grace` seconds (an archive
        just uploaded for an apply not made yet stays); how many were deleted."""
        if not self.root.is_dir():
            return 0
        deleted = 0
        for path in self.root.iterdir():
            if not self.valid(path.name) or path.name in keep:
                continue
            try:
                if now - path.stat().st_mtime >= grace:
                    path.unlink()
                    deleted += 1
            except FileNotFoundError:  # another server process swept it first
                continue
        return deleted

    def prune(
        self, keep: set[str], *, now: float, max_age: float, max_count: int, limit: int
    ) -> int:
        """The retention sweep's rule: delete up to `limit` files not in `keep` that are
        older than `max_age` seconds or beyond the newest `max_count`; how many went."""
        if not self.root.is_dir():
            return 0
        stored: list[tuple[float, Path]] = []
        for path in self.root.iterdir():
            if self.valid(path.name):
                with contextlib.suppress(FileNotFoundError):
                    stored.append((path.stat().st_mtime, path))
        stored.sort(reverse=True)
        deleted = 0
        for rank, (mtime, path) in enumerate(stored):
            if deleted >= limit:
                break
            if path.name in keep or (rank < max_count and now - mtime < max_age):
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                deleted += 1
        return deleted
