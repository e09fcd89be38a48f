"""dstack's `files:` in a run spec, read into the archives Dockyard's jobs bring.

`run_spec.file_archives` names dstack's archives by the UUID the upload answered
(`reconciler.core.dstack_files.archive_id`). Each is found again among the uploaded
archives by that id's digest prefix, re-packed so that it lands at its `path` (`placed`),
stored, and checked like `dockyard apply`'s references (`attach_archives`: uploaded, within
the project's upload quota). Called by `routes_dstack` for `runs/get_plan` and `runs/apply`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reconciler.adapters.blobs import BlobStore
from reconciler.core.dstack_files import DstackArchiveError, id_prefix, placed
from reconciler.web.auth import ProjectAccess
from reconciler.web.context import WebContext
from reconciler.web.errors import InvalidError
from reconciler.web.routes_files import attach_archives, blob_store

MAX_FILES_ENTRIES = 100


def _uploaded(store: BlobStore, prefix: str) -> str | None:
    """The digest of the uploaded archive whose digest starts with `prefix`."""
    if not store.root.is_dir():
        return None
    for path in store.root.iterdir():
        if path.name.startswith(prefix) and store.valid(path.name):
            return path.name
    return None


def _place(store: BlobStore, refs: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """(digest, where to extract) of each dstack archive, re-packed for its path."""
    placed_refs = []
    for archive, prefix, path in refs:
        digest = _uploaded(store, prefix)
        if digest is None:
            raise InvalidError(
                f"run_spec.file_archives: archive {archive} was not uploaded: upload it first "
                "(/api/files/upload_archive)"
            )
        try:
            target, packed = placed(store.get(digest), path)
        except DstackArchiveError as error:
            raise InvalidError(str(error)) from error
        placed_refs.append((store.put(packed), target))
    return placed_refs


async def dstack_file_archives(
    context: WebContext, access: ProjectAccess, run_spec: dict[str, Any]
) -> list[dict[str, str]]:
    """The `file_archives` references of dstack's `run_spec` (none: [])."""
    items = run_spec.get("file_archives") or []
    if not isinstance(items, list) or len(items) > MAX_FILES_ENTRIES:
        raise InvalidError(f"run_spec.file_archives: at most {MAX_FILES_ENTRIES} entries")
    refs = []
    for item in items:
        archive = str(item.get("id")) if isinstance(item, dict) else ""
        prefix = id_prefix(archive)
        path = item.get("path") if isinstance(item, dict) else None
        if prefix is None or not isinstance(path, str) or not path:
            raise InvalidError("run_spec.file_archives: expected [{id: <archive UUID>, path}]")
        refs.append((archive, prefix, path))
    if not refs:
        return []
    placed_refs = await asyncio.to_thread(_place, blob_store(context), refs)
    return await attach_archives(context, access.project_id, access.project_name, placed_refs)
