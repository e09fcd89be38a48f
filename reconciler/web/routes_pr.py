"""`POST /api/project/{project}/plan/files`: plan a commit's config files against live state.

`dockyard plan --server URL --token T` reads the config files of a commit in its own
checkout and posts them here, so a fork's PR is planned without giving the server access to
the fork. The answer is the PR plan JSON (`reconciler.pr.document`): the plan of docs/plan.md
against what is deployed, with each run's best offer and $/h and the total change. Members
of the project (role `user`) may ask; nothing is written.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, HTTPException
from pydantic import Field

from reconciler.adapters.db.store import Store
from reconciler.api.requests import Body
from reconciler.errors import UsageError
from reconciler.pr.document import report_to_json
from reconciler.pr.liveplan import plan_against_store
from reconciler.web.auth import ProjectAccess, project_access
from reconciler.web.context import WebContext, get_context

MAX_FILES = 5_000
MAX_FILE_CHARS = 1_000_000


class PlanFilesRequest(Body):
    commit: str = Field(min_length=1, max_length=200, description="the commit the files are from")
    path: str = Field(default="", max_length=500, description="subdirectory holding the configs")
    files: dict[str, str] = Field(
        max_length=MAX_FILES, description="repo-relative path → file text (UTF-8)"
    )


def build_pr_router() -> APIRouter:
    router = APIRouter(prefix="/api/project/{project_name}", tags=["plan"])

    @router.post("/plan/files")
    async def plan_files(
        body: PlanFilesRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        too_big = [p for p, text in body.files.items() if len(text) > MAX_FILE_CHARS]
        if too_big:
            raise HTTPException(413, f"{too_big[0]} is over {MAX_FILE_CHARS:,} characters")
        files = {path: text.encode() for path, text in body.files.items()}
        store = Store(context.db.engine)

        def plan() -> dict[str, Any]:
            report = plan_against_store(
                store, access.project_name, files, commit=body.commit, subdir=body.path.strip("/")
            )
            return report_to_json(report)

        try:
            return await anyio.to_thread.run_sync(plan)
        except UsageError as exc:
            raise HTTPException(400, str(exc)) from None

    return router
