"""Files a job brings along (``JobSpec.archives``): checked, staged, then placed per executor.

At submit time the job manager *stages* every archive: decodes the base64, and extracts the
tar.gz with ``tarfile``'s ``data`` filter (no absolute members, no ``..``, no links or
devices leading out, no setuid bits) into ``<job dir>/archives/<n>/``. A bad archive is
refused there (``invalid_request``) and nothing of the job is kept. Extraction is bounded
before anything is written: at most ``ArchiveLimits`` (the agent's
``--max-extracted-bytes``, 4 GiB, and ``--max-extracted-files``, 200 000) per job,
counted from each member's header (a decompression bomb stops at its first big member),
and a job's archives are extracted once: concurrent submits of the same job (the
server's retries) wait on one lock file and find the staged tree. The stored spec keeps
the archives' paths but not their data, so ``job.json`` stays small.

Before the job starts, each executor puts the staged trees at their targets (``path``,
absolute or relative to the job's working dir): the process executor writes them into one
tar (`write_files_tar`) that the job's wrapper extracts as the job's user, inside the job's
sandbox (so a target resolves in the job's view, with the job's rights); the docker
executor sends them into the created container before it starts (`container_tar`), so
an archive at ``/etc/app`` adds files beside the image's instead of hiding them.

``JobSpec.path_env`` is resolved against the same working dir (`resolve_path_env`).
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import io
import os
import posixpath
import shutil
import tarfile
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from agent.protocol import MAX_ARCHIVES_BYTES, Archive, JobSpec

MAX_EXTRACTED_BYTES = 4 * 2**30
"""Bytes a job's archives may extract to, all together (the server checks each upload
against its own, lower `--archive-max-extracted-bytes` first)."""
MAX_EXTRACTED_FILES = 200_000
"""Members a job's archives may have, all together."""


@dataclass(frozen=True)
class ArchiveLimits:
    """What a job's archives may extract to (the agent's settings; defaults above)."""

    max_bytes: int = MAX_EXTRACTED_BYTES  # --max-extracted-bytes
    max_files: int = MAX_EXTRACTED_FILES  # --max-extracted-files


DEFAULT_ARCHIVE_LIMITS = ArchiveLimits()


class ArchiveError(ValueError):
    """An archive the agent refuses (the message says which and why)."""


def archives_problem(archives: list[Archive]) -> str | None:
    """Why these archives are refused before decoding them, or None."""
    total = sum(len(archive.data) for archive in archives)
    if total > MAX_ARCHIVES_BYTES:
        return (
            f"archives: {total} bytes of base64 in all, more than the limit of "
            f"{MAX_ARCHIVES_BYTES}: upload fewer or smaller files"
        )
    for index, archive in enumerate(archives):
        if "\0" in archive.path:
            return f"archives[{index}].path: contains a NUL byte"
    return None


def staged_root(job_root: Path) -> Path:
    """Where the staged archives of the job whose directory is ``job_root`` live."""
    return job_root / "archives"


def stage_archives(
    archives: list[Archive], job_root: Path, limits: ArchiveLimits = DEFAULT_ARCHIVE_LIMITS
) -> None:
    """Extract every archive into ``<job_root>/archives/<n>``; ``ArchiveError`` if one is bad.

    Extracts into a fresh temporary directory and renames it at the end, so a half-staged
    job never shows (and two submits of the same id never write into one tree).
    """
    created = not job_root.exists()
    job_root.mkdir(mode=0o711, parents=True, exist_ok=True)
    target = staged_root(job_root)
    with open(job_root / ".archives.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one extraction per job, whatever the retries
        if target.exists():
            return  # staged already by an earlier submit of this id
        scratch = job_root / f".archives-{uuid.uuid4().hex}"
        scratch.mkdir(mode=0o700)
        try:
            budget = _Budget(limits)
            for index, archive in enumerate(archives):
                _extract(index, archive, scratch / str(index), budget)
            scratch.rename(target)
        except BaseException:
            shutil.rmtree(job_root if created else scratch, ignore_errors=True)
            raise


class _Budget:
    """What a job's archives have extracted so far, refused past the limits."""

    def __init__(self, limits: ArchiveLimits) -> None:
        self.limits = limits
        self.bytes = 0
        self.files = 0

    def take(self, index: int, member: tarfile.TarInfo) -> None:
        self.files += 1
        self.bytes += max(member.size, 0)
        if self.files > self.limits.max_files:
            raise ArchiveError(
                f"archives[{index}]: more than {self.limits.max_files} files in the job's "
                "archives (the agent's limit, --max-extracted-files): bring fewer files, or "
                "start the host's agent with a higher --max-extracted-files "
                "(DOCKYARD_AGENT_MAX_EXTRACTED_FILES)"
            )
        if self.bytes > self.limits.max_bytes:
            raise ArchiveError(
                f"archives[{index}]: extracts to more than {self.limits.max_bytes} bytes "
                f"(the agent's limit, --max-extracted-bytes; {member.name[:200]!r} alone is "
                f"{member.size}): bring less, or start the host's agent with a higher "
                "--max-extracted-bytes (DOCKYARD_AGENT_MAX_EXTRACTED_BYTES)"
            )


def _extract(index: int, archive: Archive, dest: Path, budget: _Budget) -> None:
    try:
        raw = base64.b64decode(archive.data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ArchiveError(f"archives[{index}].data: not base64: {error}") from error
    dest.mkdir(mode=0o755)
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
            tar.extractall(dest, filter=_counted(index, budget))
    except ArchiveError:
        raise
    except tarfile.FilterError as error:
        raise ArchiveError(f"archives[{index}]: unsafe member refused: {error}") from error
    except (tarfile.TarError, EOFError, OSError, ValueError) as error:
        raise ArchiveError(f"archives[{index}]: not a readable tar.gz: {error}") from error


def _counted(
    index: int, budget: _Budget
) -> Callable[[tarfile.TarInfo, str], tarfile.TarInfo | None]:
    """The extraction filter: counts each member against `budget`, then `_safe_member`."""

    def check(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        budget.take(index, member)
        return _safe_member(member, dest)

    return check


def _safe_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """``tarfile``'s ``data`` filter, which also refuses absolute names (it would strip
    the ``/``: an archive meant for somewhere else is a mistake worth saying)."""
    if member.name.startswith("/"):
        raise tarfile.AbsolutePathError(member)
    return tarfile.data_filter(member, dest)


def without_data(spec: JobSpec) -> JobSpec:
    """``spec`` with its archives' data dropped (staged on disk by now)."""
    if not spec.archives:
        return spec
    kept = [archive.model_copy(update={"data": ""}) for archive in spec.archives]
    return spec.model_copy(update={"archives": kept})


def resolve_target(path: str, work_dir: str) -> str:
    """An archive's (or a path variable's) absolute path in the job's file system."""
    joined = path if posixpath.isabs(path) else posixpath.join(work_dir, path)
    return posixpath.normpath(joined)


def resolve_path_env(path_env: Mapping[str, str], work_dir: str) -> dict[str, str]:
    """``JobSpec.path_env`` with relative paths under ``work_dir``."""
    return {name: resolve_target(value, work_dir) for name, value in path_env.items()}


def write_files_tar(spec: JobSpec, job_root: Path, work_dir: str, dest: Path) -> bool:
    """Process executor: one tar of every staged tree under its target in the job's view
    (names relative to `/`), written to `dest`; False (and no file) when none is staged.
    Root only reads its own staged trees here: the job's wrapper extracts the tar as the
    job's user, inside its sandbox, so nothing lands where the job may not write."""
    # 0644: the job's user opens it through its fd (/dev/fd/N); by path, only root
    # reaches it (the data dir is 0700)
    with os.fdopen(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "wb") as out:
        os.fchmod(out.fileno(), 0o644)
        added = _add_trees(out, spec, job_root, work_dir, None)
    if not added:
        dest.unlink()
    return added


def _add_trees(
    out: BinaryIO,
    spec: JobSpec,
    job_root: Path,
    work_dir: str,
    owner_filter: Callable[[tarfile.TarInfo], tarfile.TarInfo] | None,
) -> bool:
    added = False
    with tarfile.open(fileobj=out, mode="w") as tar:
        for index, archive in enumerate(spec.archives):
            source = staged_root(job_root) / str(index)
            if not source.is_dir():
                continue
            target = resolve_target(archive.path, work_dir).lstrip("/")
            for entry in sorted(source.rglob("*")):
                name = posixpath.join(target, entry.relative_to(source).as_posix())
                tar.add(entry, arcname=name, recursive=False, filter=owner_filter)
                added = True
    return added


def container_tar(spec: JobSpec, job_root: Path, work_dir: str) -> bytes | None:
    """Docker executor: one tar of every staged tree under its absolute target, to be put
    at ``/`` of the created container (the engine creates missing parents); None if none."""
    buffer = io.BytesIO()
    added = _add_trees(buffer, spec, job_root, work_dir, _as_root)
    return buffer.getvalue() if added else None


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info
