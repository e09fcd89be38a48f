"""What Dockyard asks of a code host (GitHub, GitLab) for one pull request.

`CodeHost` is the protocol `posting` and the server use; `reconciler.pr.github` and
`reconciler.pr.gitlab` implement it over REST. `CommitStatus` uses GitHub's states
(`pending`, `success`, `failure`, `error`); GitLab's client maps them to its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class StatusState(StrEnum):
    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"
    ERROR = "error"


STATUS_DESCRIPTION_LIMIT = 140
"""GitHub's limit for a commit status description."""


@dataclass(frozen=True, slots=True)
class CommitStatus:
    state: StatusState
    context: str
    description: str
    target_url: str | None = None


@dataclass(frozen=True, slots=True)
class Comment:
    id: int
    body: str


@dataclass(frozen=True, slots=True)
class AuthoredComment:
    """A comment as the host's API says it is: its text and who wrote it."""

    id: int
    body: str
    author: str


class CodeHost(Protocol):
    """One repository's PR comments and commit statuses on one host."""

    provider: str
    comment_limit: int
    """The longest comment body the host accepts (characters, exclusive)."""

    def find_comment(self, number: int, marker: str) -> Comment | None:
        """The PR's first comment whose body holds `marker`."""

    def create_comment(self, number: int, body: str) -> Comment: ...

    def update_comment(self, number: int, comment_id: int, body: str) -> Comment: ...

    def head_sha(self, number: int) -> str:
        """The SHA of the PR's head commit (where statuses go)."""

    def set_status(self, sha: str, status: CommitStatus) -> None: ...

    def read_files(self, sha: str, wanted: Callable[[str], bool]) -> Mapping[str, bytes]:
        """The files at commit `sha` whose path satisfies `wanted`."""

    def read_comment(self, number: int, comment_id: int) -> AuthoredComment:
        """A comment of PR `number` read back from the API (its author is the API's word)."""

    def commit_tree(self, sha: str) -> str:
        """The SHA of commit `sha`'s root tree (approvals are keyed by it)."""

    def close(self) -> None: ...
