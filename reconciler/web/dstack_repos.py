"""dstack's `repos/{init,get,list,upload_code}` and the repo of a posted run spec.

- `repos/init` keeps the repo's clone URL (`repo_creds.clone_url`; the credentials are not
  kept: jobs clone with the host's git credentials) in `DstackRepos`;
- `repos/get` says the repo does not exist, so dstack's client always sends `init` (and
  the credentials check it makes itself) before a run;
- `repos/upload_code` keeps the uploaded `git diff` (multipart, named by its sha256) as an
  archive, within `--upload-max-bytes`;
- `dstack_repo` turns a run spec's remote repo into what Dockyard runs
  (`reconciler.core.dstack_repos`): the first repo cloned from the URL at dstack's commit,
  and the diff as an archive applied before the commands. Called by `routes_dstack`.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import Field

from reconciler.adapters.dstack_repos import DstackRepos
from reconciler.api import requests as req
from reconciler.core.dstack_files import DstackArchiveError, is_multipart, multipart_file
from reconciler.core.dstack_repos import DIFF_DIR, diff_archive, remote_repo_data, with_dstack_repo
from reconciler.web.auth import ProjectAccess, project_access
from reconciler.web.context import WebContext, get_context
from reconciler.web.errors import InvalidError, NotFoundError
from reconciler.web.routes_files import MAX_ARCHIVE_BYTES, attach_archives, blob_store

NO_DIFF = hashlib.sha256(b"").hexdigest()  # what dstack names an empty diff


class InitRepoRequest(req.Body):
    """dstack's `repos/init`: the repo id, and its clone URL inside the credentials."""

    repo_id: str = Field(min_length=1, max_length=512)
    repo_creds: dict[str, Any] | None = None


def _repos(context: WebContext) -> DstackRepos:
    return DstackRepos(context.settings.data_dir)


async def _body_within(request: Request, limit: int) -> bytes:
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise InvalidError(f"code diff larger than {limit} bytes (upload-max-bytes)")
    return bytes(data)


def add_repo_routes(router: APIRouter) -> None:
    @router.post("/repos/init", tags=["dstack"])
    async def init_repo(
        body: InitRepoRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        url = (body.repo_creds or {}).get("clone_url")
        if isinstance(url, str) and url:
            repos = _repos(context)
            await asyncio.to_thread(repos.register, access.project_id, body.repo_id, url)
        return {}

    @router.post("/repos/get", tags=["dstack"])
    async def get_repo(_: ProjectAccess = Depends(project_access("user"))) -> dict[str, Any]:
        raise NotFoundError("repos are registered again before each run (repos/init)")

    @router.post("/repos/list", tags=["dstack"])
    async def list_repos(
        _: ProjectAccess = Depends(project_access("user")),
    ) -> list[dict[str, Any]]:
        return []

    @router.post("/repos/upload_code", tags=["dstack"])
    async def upload_code(
        request: Request,
        repo_id: str = Query(min_length=1, max_length=512),
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        limit = min(context.settings.upload_max_bytes, MAX_ARCHIVE_BYTES)
        data = await _body_within(request, limit)
        content_type = request.headers.get("content-type", "")
        if not is_multipart(content_type):
            raise InvalidError("post the code diff as multipart form data (dstack's client)")
        try:
            code_hash, diff = multipart_file(data, content_type)
        except DstackArchiveError as error:
            raise InvalidError(str(error)) from error
        if not diff:
            return {}
        digest = await asyncio.to_thread(blob_store(context).put, diff_archive(diff))
        repos = _repos(context)
        await asyncio.to_thread(repos.add_code, access.project_id, repo_id, code_hash, digest)
        return {}


async def dstack_repo(
    context: WebContext,
    access: ProjectAccess,
    run_spec: dict[str, Any],
    configuration: dict[str, Any],
    *,
    applying: bool,
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The configuration to run for `run_spec`'s repo, and the diff's archive reference.
    dstack uploads the diff after asking for the plan: a plan goes without it."""
    repo_data = remote_repo_data(run_spec)
    repos = [r for r in configuration.get("repos") or [] if isinstance(r, dict)]
    if repo_data is None or (repos and repos[0].get("url")):
        return configuration, []  # a virtual repo, or a URL the job clones as it is
    repo_id = str(run_spec.get("repo_id") or "")
    known = await asyncio.to_thread(_repos(context).get, access.project_id, repo_id)
    if known is None or not known.clone_url:
        raise InvalidError(
            "repos: the server has no clone URL for this repo: dstack's client registers "
            "it (repos/init) before the run; apply again"
        )
    code_hash = str(run_spec.get("repo_code_hash") or "").replace(NO_DIFF, "")
    digest = known.codes.get(code_hash) if code_hash else None
    if applying and code_hash and digest is None:
        raise InvalidError(f"repos: the code diff {code_hash[:12]} was not uploaded; apply again")
    changed = with_dstack_repo(configuration, repo_data, known.clone_url, has_diff=bool(code_hash))
    if digest is None:
        return changed, []
    refs = [(digest, DIFF_DIR)]
    return changed, await attach_archives(context, access.project_id, access.project_name, refs)
