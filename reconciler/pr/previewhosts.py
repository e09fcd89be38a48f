"""What preview runs ask of a code host beyond the plan comment (docs/previews.md).

`PreviewHost` is implemented by `GitHubPreviewHost` and `GitLabPreviewHost` (the REST
clients of `reconciler.pr.github` and `reconciler.pr.gitlab` with three more calls);
`reconciler.pr.previews` uses it. Every answer is the API's
word: who added a label comes from the PR's label events, whether someone may write from
the repository's permissions, never from a webhook payload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

from reconciler.pr.github import GitHub
from reconciler.pr.gitlab import GitLab
from reconciler.pr.hosting import CodeHost
from reconciler.pr.requesting import HostError


@dataclass(frozen=True, slots=True)
class PullInfo:
    """A pull (merge) request as the host's API says it is now."""

    state: str
    """`open`, `closed` or `merged`."""
    head: str
    labels: tuple[str, ...]
    fork: bool
    """The head lives in another repository (a fork); unknown counts as a fork."""


class PreviewHost(CodeHost, Protocol):
    def pull_info(self, number: int) -> PullInfo: ...

    def label_actor(self, number: int, label: str) -> str | None:
        """Who added `label` last to PR `number` (None: nobody, or it was removed since)."""

    def can_write(self, login: str) -> bool:
        """Whether `login` has write access (GitHub: write, maintain or admin; GitLab:
        Developer or more)."""


_WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})
_DEVELOPER = 30
_EVENT_PAGES = 10


class GitHubPreviewHost(GitHub):
    """GitHub with what previews ask: the PR, who labeled it, who may write."""

    def pull_info(self, number: int) -> PullInfo:
        pull = self._json("GET", f"/repos/{self.repo}/pulls/{number}")
        if not isinstance(pull, dict):
            raise HostError(f"GitHub did not describe pull request #{number}")
        head = pull.get("head") or {}
        head_repo = (head.get("repo") or {}).get("full_name")
        base_repo = ((pull.get("base") or {}).get("repo") or {}).get("full_name") or self.repo
        state = "merged" if pull.get("merged") else str(pull.get("state") or "closed")
        labels = tuple(str(x.get("name")) for x in pull.get("labels") or () if isinstance(x, dict))
        sha = head.get("sha")
        if not isinstance(sha, str):
            raise HostError(f"GitHub did not say the head commit of pull request #{number}")
        return PullInfo(state, sha, labels, fork=head_repo is None or head_repo != base_repo)

    def label_actor(self, number: int, label: str) -> str | None:
        actor: str | None = None
        for page in range(1, _EVENT_PAGES + 1):
            events = self._json(
                "GET",
                f"/repos/{self.repo}/issues/{number}/events",
                params={"per_page": 100, "page": page},
            )
            for event in events if isinstance(events, list) else []:
                name = (event.get("label") or {}).get("name")
                if name != label:
                    continue
                if event.get("event") == "labeled":
                    actor = (event.get("actor") or {}).get("login")
                elif event.get("event") == "unlabeled":
                    actor = None
            if not isinstance(events, list) or len(events) < 100:
                break
        return actor

    def can_write(self, login: str) -> bool:
        try:
            answer = self._json(
                "GET", f"/repos/{self.repo}/collaborators/{quote(login, safe='')}/permission"
            )
        except HostError as exc:
            if exc.status == 404:
                return False
            raise
        permission = answer.get("permission") if isinstance(answer, dict) else None
        role = answer.get("role_name") if isinstance(answer, dict) else None
        return permission in _WRITE_PERMISSIONS or role in _WRITE_PERMISSIONS


class GitLabPreviewHost(GitLab):
    """GitLab with what previews ask: the merge request, who labeled it, who may write."""

    def pull_info(self, number: int) -> PullInfo:
        request = self._json("GET", f"/merge_requests/{number}")
        if not isinstance(request, dict) or not isinstance(request.get("sha"), str):
            raise HostError(f"GitLab did not describe merge request !{number}")
        state = {"opened": "open", "merged": "merged"}.get(str(request.get("state")), "closed")
        labels = tuple(
            str(x.get("name") if isinstance(x, dict) else x) for x in request.get("labels") or ()
        )
        fork = request.get("source_project_id") != request.get("target_project_id")
        return PullInfo(state, str(request["sha"]), labels, fork=fork)

    def label_actor(self, number: int, label: str) -> str | None:
        actor: str | None = None
        for page in range(1, _EVENT_PAGES + 1):
            events = self._json(
                "GET",
                f"/merge_requests/{number}/resource_label_events",
                params={"per_page": 100, "page": page},
            )
            for event in events if isinstance(events, list) else []:
                if (event.get("label") or {}).get("name") != label:
                    continue
                user = (event.get("user") or {}).get("username")
                actor = user if event.get("action") == "add" else None
            if not isinstance(events, list) or len(events) < 100:
                break
        return actor

    def can_write(self, login: str) -> bool:
        users = self._api.request("GET", "/users", params={"username": login}).json()
        if not isinstance(users, list) or not users or not isinstance(users[0], dict):
            return False
        user_id = users[0].get("id")
        if not isinstance(user_id, int):
            return False
        try:
            member = self._json("GET", f"/members/all/{user_id}")
        except HostError as exc:
            if exc.status == 404:
                return False
            raise
        level = member.get("access_level") if isinstance(member, dict) else None
        return isinstance(level, int) and level >= _DEVELOPER
