"""GitHub's REST API for one repository: PR comments, commit statuses, files at a commit.

Comments go through the issue API (`/repos/{repo}/issues/{n}/comments`, edited at
`/repos/{repo}/issues/comments/{id}`); statuses are `POST /repos/{repo}/statuses/{sha}`;
the PR head comes from `/repos/{repo}/pulls/{n}`; files from the git trees and blobs API
(which also serves a fork's PR head, as it lives in the base repository's network).
Every request sends `Accept: application/vnd.github+json` and `X-GitHub-Api-Version`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from reconciler.pr.hosting import (
    STATUS_DESCRIPTION_LIMIT,
    AuthoredComment,
    Comment,
    CommitStatus,
)
from reconciler.pr.requesting import HostApi, HostError

DEFAULT_API_URL = "https://api.github.com"
COMMENT_LIMIT = 65_536
_PAGE = 100
_MAX_PAGES = 100


def check_repo(repo: str) -> str:
    owner, _, name = repo.partition("/")
    if not owner or not name or "/" in name:
        from reconciler.errors import UsageError

        raise UsageError(f"--repo must be OWNER/NAME, got {repo!r}")
    return repo


class GitHub:
    """`CodeHost` for one GitHub (or GitHub Enterprise) repository."""

    provider = "github"
    comment_limit = COMMENT_LIMIT

    def __init__(
        self,
        repo: str,
        *,
        token: str,
        api_url: str = DEFAULT_API_URL,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.repo = check_repo(repo)
        self._api = HostApi(
            name="GitHub",
            base_url=api_url or DEFAULT_API_URL,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": "dockyard",
            },
            token_hint="GITHUB_TOKEN",
            transport=transport,
        )

    def close(self) -> None:
        self._api.close()

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._api.request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise HostError(f"GitHub answered {method} {path} with something not JSON") from None

    def find_comment(self, number: int, marker: str) -> Comment | None:
        for page in range(1, _MAX_PAGES + 1):
            items = self._json(
                "GET",
                f"/repos/{self.repo}/issues/{number}/comments",
                params={"per_page": _PAGE, "page": page},
            )
            for item in items if isinstance(items, list) else []:
                body = item.get("body") or ""
                if marker in body:
                    return Comment(int(item["id"]), body)
            if not isinstance(items, list) or len(items) < _PAGE:
                return None
        return None

    def create_comment(self, number: int, body: str) -> Comment:
        item = self._json(
            "POST", f"/repos/{self.repo}/issues/{number}/comments", json={"body": body}
        )
        return Comment(int(item["id"]), str(item.get("body", body)))

    def update_comment(self, number: int, comment_id: int, body: str) -> Comment:
        del number  # GitHub addresses a comment by its id alone
        item = self._json(
            "PATCH", f"/repos/{self.repo}/issues/comments/{comment_id}", json={"body": body}
        )
        return Comment(int(item["id"]), str(item.get("body", body)))

    def read_comment(self, number: int, comment_id: int) -> AuthoredComment:
        del number  # GitHub addresses a comment by its id alone
        item = self._json("GET", f"/repos/{self.repo}/issues/comments/{comment_id}")
        user = item.get("user") if isinstance(item, dict) else None
        login = user.get("login") if isinstance(user, dict) else None
        if not isinstance(login, str):
            raise HostError(f"GitHub did not say who wrote comment {comment_id}")
        return AuthoredComment(int(item["id"]), str(item.get("body") or ""), login)

    def commit_tree(self, sha: str) -> str:
        commit = self._json("GET", f"/repos/{self.repo}/git/commits/{sha}")
        tree = (commit.get("tree") or {}).get("sha") if isinstance(commit, dict) else None
        if not isinstance(tree, str):
            raise HostError(f"GitHub did not say the tree of commit {sha[:12]}")
        return tree

    def head_sha(self, number: int) -> str:
        pull = self._json("GET", f"/repos/{self.repo}/pulls/{number}")
        sha = (pull.get("head") or {}).get("sha") if isinstance(pull, dict) else None
        if not isinstance(sha, str):
            raise HostError(f"GitHub did not say the head commit of pull request #{number}")
        return sha

    def set_status(self, sha: str, status: CommitStatus) -> None:
        payload: dict[str, str] = {
            "state": status.state.value,
            "context": status.context,
            "description": status.description[:STATUS_DESCRIPTION_LIMIT],
        }
        if status.target_url:
            payload["target_url"] = status.target_url
        self._api.request("POST", f"/repos/{self.repo}/statuses/{sha}", json=payload)

    def read_files(self, sha: str, wanted: Callable[[str], bool]) -> Mapping[str, bytes]:
        tree = self._json("GET", f"/repos/{self.repo}/git/trees/{sha}", params={"recursive": "1"})
        if tree.get("truncated"):
            raise HostError(
                f"the tree of {sha[:12]} is too large for GitHub's trees API; "
                "plan this PR in CI with `dockyard plan --server`"
            )
        files: dict[str, bytes] = {}
        for entry in tree.get("tree", []):
            path = entry.get("path", "")
            if entry.get("type") != "blob" or not wanted(path):
                continue
            blob = self._json("GET", f"/repos/{self.repo}/git/blobs/{entry['sha']}")
            files[path] = base64.b64decode(blob.get("content", ""))
        return files
