"""`/api/files/{upload_archive,get_archive_by_hash}`: the archives `dockyard apply` brings.

As dstack's routes of the same names, for any signed-in user: the CLI packs a job's local
`repos`/`files` into tar.gz archives, asks whether the server has one by its sha256
(`get_archive_by_hash`, 404 if not), uploads it otherwise (`upload_archive`, the raw bytes
as the request body: no multipart parser needed), and names them in the apply request
(`file_archives: [{id, path}]`). dstack's client posts a plain tar as multipart form data
and reads a UUID id (`reconciler.core.dstack_files`): that is kept as a gzip tar too, and
answered `{id: <UUID>, hash}`. The server keeps them content-addressed
(`reconciler.adapters.blobs`); at most once an hour an upload also deletes the archives
that no run names any more and that are older than a day.

Bounded before anything is kept (docs/security.md, "Uploads"): the body is read only up
to `--upload-max-bytes` and to what the user's quota leaves, counted as it streams in;
past either, the answer is `413` with `Connection: close`, so the rest is never read. It
must be a gzip-compressed tar whose members extract to at most
`--archive-max-extracted-bytes` and number at most `--archive-max-files`
(`reconciler.core.archivecheck`, in a thread); and what each user has uploaded and the
server still keeps is at most `--upload-quota-bytes` (`files/.owners/<user id>/<digest>`
records who uploaded what). Uploads name no project in dstack's API: a project is charged
when its runs name archives (`attach_archives`, called by `runs/get_plan` and `apply`),
within `--project-upload-quota-bytes`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from reconciler.adapters.blobs import BlobStore
from reconciler.adapters.db.readmodels.runs import project_archives, referenced_archives
from reconciler.api import requests as req
from reconciler.core.archivecheck import archive_problem
from reconciler.core.dstack_files import (
    DstackArchiveError,
    archive_id,
    gzipped,
    is_multipart,
    multipart_file,
)
from reconciler.web.auth import Principal, require_user
from reconciler.web.context import WebContext, get_context
from reconciler.web.errors import InvalidError, NotFoundError, error_body

log = logging.getLogger(__name__)
MAX_ARCHIVE_BYTES = 24 * 1024 * 1024
"""One archive's size at most (`--upload-max-bytes` may only lower it): a job brings at
most 32 MiB of base64 (`agent.protocol`)."""


def blob_store(context: WebContext) -> BlobStore:
    return BlobStore(context.settings.data_dir / "files")


SWEEP_EVERY = 3600.0
KEEP_UNNAMED = 86400.0
"""An archive no run names is kept this long (an apply may still be on its way)."""


async def _sweep_now_and_then(store: BlobStore, context: WebContext) -> None:
    marker = store.root / ".swept"
    now = context.clock.now_ts()
    try:
        if now - marker.stat().st_mtime < SWEEP_EVERY:
            return
    except FileNotFoundError:
        pass
    marker.touch()
    os.utime(marker, (now, now))
    keep = await context.db.read(referenced_archives)
    deleted = await asyncio.to_thread(store.sweep, keep, now=now, grace=KEEP_UNNAMED)
    if deleted:
        log.info("deleted %d uploaded archive(s) no run names any more", deleted)


def _kept_sizes(store: BlobStore, owners: Path) -> dict[str, int]:
    """Sizes of the archives this user uploaded that the server still keeps, by digest;
    records of swept archives are dropped on the way."""
    if not owners.is_dir():
        return {}
    sizes: dict[str, int] = {}
    for record in owners.iterdir():
        try:
            sizes[record.name] = (store.root / record.name).stat().st_size
        except FileNotFoundError:
            record.unlink(missing_ok=True)
    return sizes


def _refused(message: str) -> JSONResponse:
    """413 in dstack's error shape, and the connection closed: the rest of the body is
    never read (uvicorn closes after a response that says `Connection: close`)."""
    return JSONResponse(
        status_code=413, content=error_body(message), headers={"Connection": "close"}
    )


async def _read_within(request: Request, limit: int) -> bytes | None:
    """The body, or None as soon as more than `limit` bytes are declared or have arrived."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            return None
    return bytes(data)


def _quota_message(used: int, this_one: str, quota: int) -> str:
    return (
        f"upload quota reached: you keep {used} bytes of archives and this one is "
        f"{this_one} (upload-quota-bytes is {quota}); archives no run names are deleted "
        "after a day, or ask an admin to raise DOCKYARD_UPLOAD_QUOTA_BYTES"
    )


def _project_quota_problem(
    store: BlobStore, named: set[str], refs: Sequence[str], project: str, quota: int
) -> str | None:
    """Why attaching the archives `refs` to a run of `project` would take it over `quota`
    (the archives its runs already name count once), or None."""
    new = set(refs) - named
    if not new:
        return None
    used = sum(store.size(digest) for digest in named)
    adding = sum(store.size(digest) for digest in new)
    if used + adding <= quota:
        return None
    return (
        f"project upload quota reached: the runs of project {project} name {used} bytes of "
        f"uploaded archives and this adds {adding} (project-upload-quota-bytes is {quota}); "
        "delete runs whose files are no longer needed (`dockyard delete`), or ask an admin "
        "to raise DOCKYARD_PROJECT_UPLOAD_QUOTA_BYTES"
    )


async def attach_archives(
    context: WebContext, project_id: str, project: str, refs: Sequence[tuple[str, str]]
) -> list[dict[str, str]]:
    """The archive references `(id, path)` of a run being planned or applied in `project`:
    each must be uploaded, and what the project's runs name must stay within its quota
    (uploads name no project in dstack's API: the project is known once a run names them)."""
    store = blob_store(context)
    for digest, _ in refs:
        if not store.has(digest):
            raise InvalidError(
                f"file_archives: archive {digest} was not uploaded: upload it first "
                "(/api/files/upload_archive)"
            )
    if refs:
        named = await context.db.read(project_archives, project_id)
        quota = context.settings.project_upload_quota_bytes
        problem = await asyncio.to_thread(
            _project_quota_problem, store, named, [d for d, _ in refs], project, quota
        )
        if problem is not None:
            raise InvalidError(problem)
    return [{"id": digest, "path": path} for digest, path in refs]


async def _dstack_upload(request: Request, data: bytes) -> tuple[str | None, bytes]:
    """dstack's upload (multipart, a plain tar): (its hash, the archive as a gzip tar);
    ours (the raw body): (None, the body)."""
    content_type = request.headers.get("content-type", "")
    if not is_multipart(content_type):
        return None, data
    try:
        name, tar = multipart_file(data, content_type)
    except DstackArchiveError as error:
        raise InvalidError(str(error)) from error
    return name, await asyncio.to_thread(gzipped, tar)


def build_files_router() -> APIRouter:
    router = APIRouter(prefix="/api/files")

    @router.post("/upload_archive", tags=["files"], response_model=None)
    async def upload_archive(
        request: Request,
        principal: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any] | JSONResponse:
        settings = context.settings
        limit = min(settings.upload_max_bytes, MAX_ARCHIVE_BYTES)
        store = blob_store(context)
        store.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        await _sweep_now_and_then(store, context)  # first: swept archives count no more
        owners = store.root / ".owners" / principal.user_id
        kept = await asyncio.to_thread(_kept_sizes, store, owners)
        used, quota = sum(kept.values()), settings.upload_quota_bytes
        # read no more than the quota leaves (plus one archive of the user's own: sending
        # one again costs nothing), and never more than the upload limit
        room = max(quota - used + max(kept.values(), default=0), 0)
        data = await _read_within(request, min(limit, room))
        if data is None:
            if room < limit:
                return _refused(_quota_message(used, f"over the {room} bytes left", quota))
            return _refused(
                f"archive larger than {limit} bytes (upload-max-bytes): bring less "
                "(`files` instead of the whole repo, or a .gitignore)"
            )
        if not data:
            raise InvalidError("post the archive's bytes as the request body")
        dstack_hash, data = await _dstack_upload(request, data)
        problem = await asyncio.to_thread(
            archive_problem,
            data,
            max_bytes=settings.archive_max_extracted_bytes,
            max_files=settings.archive_max_files,
        )
        if problem is not None:
            raise InvalidError(problem)
        digest = hashlib.sha256(data).hexdigest()
        used -= kept.get(digest, 0)
        if used + len(data) > quota:
            return _refused(_quota_message(used, f"{len(data)} bytes", quota))
        store.put(data)
        owners.mkdir(mode=0o700, parents=True, exist_ok=True)
        (owners / digest).touch()
        if dstack_hash is not None:  # dstack's client reads a UUID id and its own hash
            return {"id": archive_id(digest), "hash": dstack_hash}
        return {"id": digest, "blob_hash": digest}

    @router.post("/get_archive_by_hash", tags=["files"])
    async def get_archive_by_hash(
        body: req.ArchiveByHashRequest,
        _: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        if not blob_store(context).has(body.hash):
            raise NotFoundError(f"no archive {body.hash}")
        return {"id": body.hash, "blob_hash": body.hash}

    return router
