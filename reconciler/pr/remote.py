"""`dockyard plan --server URL --token T`: the CLI's side of planning against live state.

The CLI reads the config files of the commit in its own checkout (the git source's
snapshot: `.dockyard.yml` and every `*.dstack.yml`) and the commit's git tree (approvals
of a policy exception are keyed by it), posts them to
`POST {URL}/api/project/{project}/plan/files` and reads back the PR plan JSON with offers
and prices. The token goes in the `Authorization` header only; failures are one line.
"""

from __future__ import annotations

from typing import Any

import httpx

from reconciler.adapters.gitsource import GitSource
from reconciler.errors import DockyardError, UsageError
from reconciler.pr.document import read_report
from reconciler.pr.requesting import safe_url
from reconciler.pr.reviewing import PlanReport


def commit_files(source: GitSource, commit: str) -> tuple[dict[str, str], str]:
    """The snapshot files of `commit` as text, and the project its `.dockyard.yml` names."""
    snapshot = source.snapshot(commit)
    blobs = source.mirror.read_blobs(list(dict.fromkeys(snapshot.files.values())))
    files = {
        path: blobs[blob].decode("utf-8", errors="replace") for path, blob in snapshot.files.items()
    }
    project = source.load(snapshot).policy.project
    return files, project


def plan_on_server(
    server: str,
    token: str,
    *,
    project: str,
    commit: str,
    files: dict[str, str],
    subdir: str = "",
    tree: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> PlanReport:
    """Ask the server to plan `files` against project `project`; the PR plan it answers.
    `tree`: the commit's git tree, so approvals recorded for that content count."""
    if not token:
        raise UsageError("--server needs --token (or $DOCKYARD_SERVER_TOKEN): a member's token")
    url = f"{server.rstrip('/')}/api/project/{project}/plan/files"
    body: dict[str, Any] = {"commit": commit, "path": subdir, "files": files}
    if tree is not None:
        body["tree"] = tree
    try:
        with httpx.Client(transport=transport, timeout=120) as client:
            response = client.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise DockyardError(
            f"cannot reach the Dockyard server at {safe_url(server)} ({type(exc).__name__})"
        ) from None
    if response.status_code == 401:
        raise DockyardError(f"the server {safe_url(server)} refused the token (401): check --token")
    if not response.is_success:
        raise DockyardError(
            f"the server could not plan ({response.status_code}): {_detail(response)}"
        )
    return read_report(response.json(), source="the server's answer")


def _detail(response: httpx.Response) -> str:
    try:
        data: Any = response.json()
    except ValueError:
        return response.text[:200]
    detail = data.get("detail") if isinstance(data, dict) else data
    return str(detail)[:300]
