"""`/api/files/{upload_archive,get_archive_by_hash}`: the archives `dockyard apply` brings.

As dstack's routes of the same names, for any signed-in user: the CLI packs a job's local
`repos`/`files` into tar.gz archives, asks whether the server has one by its sha256
(`get_archive_by_hash`, 404 if not), uploads it otherwise (`upload_archive`, the raw bytes
as the request body: no multipart parser needed), and names them in the apply request
(`file_archives: [{id, path}]`). The server keeps them content-addressed
(`reconciler.adapters.blobs`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from reconciler.adapters.blobs import BlobStore
from reconciler.api import requests as req
from reconciler.web.auth import Principal, require_user
from reconciler.web.context import WebContext, get_context
from reconciler.web.errors import InvalidError, NotFoundError

MAX_ARCHIVE_BYTES = 24 * 1024 * 1024
"""One archive's size; a job brings at most 32 MiB of base64 (`agent.protocol`)."""


def blob_store(context: WebContext) -> BlobStore:
    return BlobStore(context.settings.data_dir / "files")


def build_files_router() -> APIRouter:
    router = APIRouter(prefix="/api/files")

    @router.post("/upload_archive", tags=["files"])
    async def upload_archive(
        request: Request,
        _: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_ARCHIVE_BYTES:
                raise InvalidError(
                    f"archive larger than {MAX_ARCHIVE_BYTES // 2**20} MiB: bring less "
                    "(`files` instead of the whole repo, or a .gitignore)"
                )
            chunks.append(chunk)
        if size == 0:
            raise InvalidError("post the archive's bytes as the request body")
        digest = blob_store(context).put(b"".join(chunks))
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
