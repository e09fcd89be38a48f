"""`/api/files/{upload_archive,get_archive_by_hash}`: the archives `dockyard apply` brings.

As dstack's routes of the same names, for any signed-in user: the CLI packs a job's local
`repos`/`files` into tar.gz archives, asks whether the server has one by its sha256
(`get_archive_by_hash`, 404 if not), uploads it otherwise (`upload_archive`, the raw bytes
as the request body: no multipart parser needed), and names them in the apply request
(`file_archives: [{id, path}]`). The server keeps them content-addressed
(`reconciler.adapters.blobs`); at most once an hour an upload also deletes the archives
that no run names any more and that are older than a day.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy import select
from sqlalchemy.orm import Session

from reconciler.adapters.blobs import BlobStore
from reconciler.adapters.db.models import Run
from reconciler.api import requests as req
from reconciler.web.auth import Principal, require_user
from reconciler.web.context import WebContext, get_context
from reconciler.web.errors import InvalidError, NotFoundError
from reconciler.web.webhooks import BodyTooLargeError, read_limited

log = logging.getLogger(__name__)
MAX_ARCHIVE_BYTES = 24 * 1024 * 1024
"""One archive's size; a job brings at most 32 MiB of base64 (`agent.protocol`)."""


def blob_store(context: WebContext) -> BlobStore:
    return BlobStore(context.settings.data_dir / "files")


SWEEP_EVERY = 3600.0
KEEP_UNNAMED = 86400.0
"""An archive no run names is kept this long (an apply may still be on its way)."""


def referenced_archives(session: Session) -> set[str]:
    """Every archive id a run's spec names (runs of any status: a finished run's
    archives are kept until the run itself is deleted or re-applied)."""
    named: set[str] = set()
    for spec in session.scalars(select(Run.spec)):
        refs = spec.get("file_archives") if isinstance(spec, dict) else None
        for ref in refs or ():
            if isinstance(ref, dict) and isinstance(ref.get("id"), str):
                named.add(ref["id"])
    return named


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


def build_files_router() -> APIRouter:
    router = APIRouter(prefix="/api/files")

    @router.post("/upload_archive", tags=["files"])
    async def upload_archive(
        request: Request,
        _: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        try:
            data = await read_limited(request, MAX_ARCHIVE_BYTES)
        except BodyTooLargeError:
            raise InvalidError(
                f"archive larger than {MAX_ARCHIVE_BYTES // 2**20} MiB: bring less "
                "(`files` instead of the whole repo, or a .gitignore)"
            ) from None
        if not data:
            raise InvalidError("post the archive's bytes as the request body")
        store = blob_store(context)
        digest = store.put(data)
        await _sweep_now_and_then(store, context)
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
