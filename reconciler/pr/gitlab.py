"""GitLab's REST API (v4) for one project: merge-request notes, commit statuses, files.

The project is addressed by its URL-encoded path (`group%2Fname`). Notes:
`/projects/:id/merge_requests/:iid/notes` (created with POST, edited with PUT); the MR head
is the `sha` of `/projects/:id/merge_requests/:iid`; statuses are
`POST /projects/:id/statuses/:sha` with GitLab's states (`failure` and `error` are
`failed`) and `name` for the context. Files come from the repository tree and raw blobs;
a commit's tree id (approvals are keyed by it) is hashed from its root listing. The token
goes in `PRIVATE-TOKEN`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from reconciler.pr.gittrees import TreeListingError, entry_of, tree_id
from reconciler.pr.hosting import (
    STATUS_DESCRIPTION_LIMIT,
    AuthoredComment,
    Comment,
    CommitStatus,
    StatusState,
)
from reconciler.pr.requesting import HostApi, HostError

DEFAULT_API_URL = "https://gitlab.com/api/v4"
COMMENT_LIMIT = 1_000_000
_PAGE = 100
_MAX_PAGES = 100
_STATES = {
    StatusState.PENDING: "pending",
    StatusState.SUCCESS: "success",
    StatusState.FAILURE: "failed",
    StatusState.ERROR: "failed",
}


class GitLab:
    """`CodeHost` for one GitLab project."""

    provider = "gitlab"
    comment_limit = COMMENT_LIMIT

    def __init__(
        self,
        repo: str,
        *,
        token: str,
        api_url: str = DEFAULT_API_URL,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.repo = repo
        self._project = quote(repo, safe="")
        self._api = HostApi(
            name="GitLab",
            base_url=api_url or DEFAULT_API_URL,
            headers={"PRIVATE-TOKEN": token, "User-Agent": "dockyard"},
            token_hint="GITLAB_TOKEN",
            transport=transport,
        )

    def close(self) -> None:
        self._api.close()

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._api.request(method, f"/projects/{self._project}{path}", **kwargs)
        try:
            return response.json()
        except ValueError:
            raise HostError(f"GitLab answered {method} {path} with something not JSON") from None

    def find_comment(self, number: int, marker: str) -> Comment | None:
        for page in range(1, _MAX_PAGES + 1):
            notes = self._json(
                "GET",
                f"/merge_requests/{number}/notes",
                params={"per_page": _PAGE, "page": page, "sort": "asc"},
            )
            for note in notes if isinstance(notes, list) else []:
                body = note.get("body") or ""
                if marker in body and not note.get("system"):
                    return Comment(int(note["id"]), body)
            if not isinstance(notes, list) or len(notes) < _PAGE:
                return None
        return None

    def create_comment(self, number: int, body: str) -> Comment:
        note = self._json("POST", f"/merge_requests/{number}/notes", json={"body": body})
        return Comment(int(note["id"]), str(note.get("body", body)))

    def update_comment(self, number: int, comment_id: int, body: str) -> Comment:
        note = self._json(
            "PUT", f"/merge_requests/{number}/notes/{comment_id}", json={"body": body}
        )
        return Comment(int(note["id"]), str(note.get("body", body)))

    def read_comment(self, number: int, comment_id: int) -> AuthoredComment:
        note = self._json("GET", f"/merge_requests/{number}/notes/{comment_id}")
        author = note.get("author") if isinstance(note, dict) else None
        name = author.get("username") if isinstance(author, dict) else None
        if not isinstance(name, str):
            raise HostError(f"GitLab did not say who wrote note {comment_id}")
        return AuthoredComment(int(note["id"]), str(note.get("body") or ""), name)

    def commit_tree(self, sha: str) -> str:
        """The id of commit `sha`'s root tree: GitLab's API does not say it, so it is
        hashed from the root's listing (`reconciler.pr.gittrees`), as git would."""
        listed: list[Any] = []
        for page in range(1, _MAX_PAGES + 1):
            items = self._json(
                "GET", "/repository/tree", params={"ref": sha, "per_page": _PAGE, "page": page}
            )
            if not isinstance(items, list):
                raise HostError(f"GitLab did not list the tree of commit {sha[:12]}")
            listed.extend(items)
            if len(items) < _PAGE:
                break
        else:
            raise HostError(
                f"the root of commit {sha[:12]} has over {_PAGE * _MAX_PAGES} entries: "
                "too many to hash its tree"
            )
        try:
            return tree_id(entry_of(item) for item in listed if isinstance(item, dict))
        except TreeListingError as exc:
            raise HostError(f"GitLab listed the tree of {sha[:12]} oddly: {exc}") from None

    def head_sha(self, number: int) -> str:
        request = self._json("GET", f"/merge_requests/{number}")
        sha = request.get("sha") if isinstance(request, dict) else None
        if not isinstance(sha, str):
            raise HostError(f"GitLab did not say the head commit of merge request !{number}")
        return sha

    def set_status(self, sha: str, status: CommitStatus) -> None:
        payload: dict[str, str] = {
            "state": _STATES[status.state],
            "name": status.context,
            "description": status.description[:STATUS_DESCRIPTION_LIMIT],
        }
        if status.target_url:
            payload["target_url"] = status.target_url
        self._json("POST", f"/statuses/{sha}", json=payload)

    def read_files(self, sha: str, wanted: Callable[[str], bool]) -> Mapping[str, bytes]:
        files: dict[str, bytes] = {}
        for page in range(1, _MAX_PAGES + 1):
            entries = self._json(
                "GET",
                "/repository/tree",
                params={"ref": sha, "recursive": "true", "per_page": _PAGE, "page": page},
            )
            for entry in entries if isinstance(entries, list) else []:
                path = entry.get("path", "")
                if entry.get("type") == "blob" and wanted(path):
                    raw = self._api.request(
                        "GET", f"/projects/{self._project}/repository/blobs/{entry['id']}/raw"
                    )
                    files[path] = raw.content
            if not isinstance(entries, list) or len(entries) < _PAGE:
                break
        return files
