"""The archives a job brings (`repos`, `files`), built when the jobs worker submits it.

A run created by GitOps carries its origin (`git:<path>@<commit>`, on its resource): the
job gets the config repo's paths at that commit (`reconciler.core.uploads`), packed by the
`ArchiveBuilder` of `WorkerDeps` (the git source's `GitArchives`). A run from `dockyard
apply` (no git origin) gets the archives the CLI packed from the user's machine and
uploaded (`file_archives` in its spec, read from the server's `BlobStore`); a run with
neither gets none, and the job's status message says so.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.protocol import MAX_ARCHIVES_BYTES
from reconciler.adapters.blobs import BlobStore
from reconciler.adapters.db.store import Store
from reconciler.core.uploads import git_origin, uploads_of, wants_uploads
from reconciler.engine.workers import ArchiveBuilder
from reconciler.engine.workers.job_context import JobContext
from reconciler.errors import PermanentError


@dataclass(frozen=True, slots=True)
class JobArchives:
    archives: tuple[dict[str, str], ...] = ()
    note: str = ""  # why some or all of `repos`/`files` were not brought


def job_archives(
    store: Store,
    ctx: JobContext,
    builder: ArchiveBuilder | None,
    blobs: BlobStore | None = None,
) -> JobArchives:
    """The job's archives (blocking: reads git or files); `PermanentError` on a bad path."""
    spec = ctx.slot.spec
    if not wants_uploads(spec):
        return JobArchives()
    resource = store.resource_source(ctx.run.resource_id) if ctx.run.resource_id else None
    origin = git_origin(resource.origin if resource is not None else None)
    uploaded = spec.get("file_archives")
    if origin is None and uploaded and blobs is not None:
        return _checked(tuple(_uploaded(blobs, ref) for ref in uploaded), ())
    if origin is None or builder is None:
        why = "the run has no config repo origin" if origin is None else "no config repo"
        return JobArchives(note=f"repos/files not uploaded: {why} (`dockyard apply` runs)")
    assert resource is not None  # an origin comes from a resource
    path, commit = resource.path or origin[0], resource.commit or origin[1]
    uploads = uploads_of(spec, path)
    archives = tuple(builder(commit, upload) for upload in uploads.items)
    return _checked(archives, uploads.skipped)


def _uploaded(blobs: BlobStore, ref: Mapping[str, Any]) -> dict[str, str]:
    try:
        data = blobs.get(str(ref.get("id")))
    except (FileNotFoundError, ValueError):
        raise PermanentError(
            f"file_archives: archive {ref.get('id')} is not on this server any more: "
            "apply the configuration again"
        ) from None
    return {"path": str(ref.get("path") or "."), "data": base64.b64encode(data).decode()}


def _checked(archives: tuple[dict[str, str], ...], skipped: tuple[str, ...]) -> JobArchives:
    size = sum(len(archive["data"]) for archive in archives)
    if size > MAX_ARCHIVES_BYTES:
        raise PermanentError(
            f"repos/files: {size / 2**20:.1f} MiB to upload (base64), more than the "
            f"{MAX_ARCHIVES_BYTES // 2**20} MiB a job may bring: upload less (e.g. `files` "
            "instead of the whole repo)"
        )
    note = "; ".join(f"{skip}: not uploaded" for skip in skipped)
    return JobArchives(archives, note)
