"""What `dockyard apply` brings from the user's machine: a job's local `repos` and `files`.

`apply` calls `upload_local(client, spec, config_dir)` before asking for the plan: each
upload of `reconciler.core.uploads.local_uploads_of` is packed into a tar.gz here and
stored on the server (`Client.upload_archive`, skipped when the server already has those
bytes), and the plan and the apply carry the references (`file_archives`). The archives
are deterministic (sorted names, no times or owners), so an unchanged tree is the same
archive and applying again detects no changes; changed code is a new spec and re-runs.

- a directory of a git work tree brings what git would: tracked and untracked files,
  without what `.gitignore` ignores; any other directory brings everything but `.git`;
- a file lands at its `path` (under the working dir when relative).
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from reconciler.api import Client
from reconciler.core.uploads import Upload, local_uploads_of
from reconciler.errors import UsageError

MAX_UPLOAD_BYTES = 24 * 1024 * 1024
"""A job may bring 32 MiB of base64, about 24 MiB of archives."""


def upload_local(client: Client, spec: Mapping[str, Any], config_dir: Path) -> list[dict[str, str]]:
    """Pack and upload the job's local uploads; the `file_archives` references."""
    uploads = local_uploads_of(spec)
    packed = [pack(upload, config_dir) for upload in uploads.items]
    total = sum(len(data) for _, data in packed)
    if total > MAX_UPLOAD_BYTES:
        raise UsageError(
            f"repos/files: {total / 2**20:.1f} MiB to upload, more than the "
            f"{MAX_UPLOAD_BYTES // 2**20} MiB a job may bring: ignore build outputs and data "
            "in .gitignore, or bring `files` instead of the whole repo"
        )
    return [{"id": client.upload_archive(data), "path": target} for target, data in packed]


def pack(upload: Upload, config_dir: Path) -> tuple[str, bytes]:
    """(where the archive is extracted in the job, the tar.gz bytes)."""
    source = _resolve(upload.source, config_dir)
    what = "repos" if upload.kind == "repo" else "files"
    if source.is_dir():
        return upload.target, _archive(_tree(source))
    if upload.kind == "repo" or not source.is_file():
        kind = "not a directory" if source.exists() else "no such file or directory"
        raise UsageError(f"{what}: {upload.source}: {kind} ({source})")
    parent, name = os.path.split(upload.target.rstrip("/") or source.name)
    return parent or ".", _archive(iter([(name or source.name, source)]))


def _resolve(local: str, config_dir: Path) -> Path:
    path = Path(local).expanduser()
    return path if path.is_absolute() else (config_dir / path)


def _tree(root: Path) -> Iterator[tuple[str, Path]]:
    """(name in the archive, file) of every file `root` brings, sorted."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=False,
    )
    if listed.returncode == 0:
        names = sorted({n for n in listed.stdout.decode().split("\0") if n})
    else:  # not a git work tree: everything but git's own directory
        names = sorted(_walk(root))
    for name in names:
        path = root / name
        if path.is_file() or path.is_symlink():  # deleted but still tracked: skipped
            yield name, path


def _walk(root: Path) -> Iterator[str]:
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in files:
            yield str(Path(dirpath, name).relative_to(root))


def _archive(entries: Iterator[tuple[str, Path]]) -> bytes:
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name, path in entries:
            info = tar.gettarinfo(str(path), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.isfile():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return buffer.getvalue()
