"""Which webhook deliveries concern preview runs (pure reading of payloads).

Called by `reconciler.pr.previews.PreviewBot.accept` for every verified, first-time
delivery of the GitHub and GitLab webhooks. A payload only says *which* pull request to
look at and why; who did it and whether they may is asked of the host's API afterwards
(`reconciler.pr.previews`).

- GitHub `pull_request`: `labeled` / `unlabeled` with `dockyard:preview`, `synchronize`
  (a push), `closed`, `reopened`; `issue_comment` `created` on a PR with a line
  `/dockyard preview`.
- GitLab `Merge Request Hook`: `dockyard:preview` added to or removed from `labels`
  (`changes.labels`), a push (`oldrev`), `close` / `merge`, `reopen`; `Note Hook` on a
  merge request with a line `/dockyard preview`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.core.previewruns import COMMAND, LABEL, is_preview_command
from reconciler.domain.previewruns import PullRef


@dataclass(frozen=True, slots=True)
class PreviewHint:
    """A delivery that may start, update or end a preview."""

    pull: PullRef
    cause: str
    """`label`, `unlabel`, `push`, `closed`, `reopened` or `comment`."""
    comment_id: int | None = None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def github_hint(event: str, payload: Mapping[str, Any]) -> PreviewHint | str:
    """The hint of a GitHub delivery, or why it concerns no preview."""
    repo = _map(payload.get("repository")).get("full_name")
    action = payload.get("action")
    if not isinstance(repo, str):
        return "the delivery has no repository"
    if event == "issue_comment":
        issue, comment = _map(payload.get("issue")), _map(payload.get("comment"))
        number, comment_id = issue.get("number"), comment.get("id")
        if action != "created" or not isinstance(issue.get("pull_request"), Mapping):
            return "not a new comment on a pull request"
        if not isinstance(number, int) or not isinstance(comment_id, int):
            return "the delivery has no PR number or comment id"
        if not is_preview_command(str(comment.get("body") or "")):
            return f"the comment is not {COMMAND}"
        return PreviewHint(PullRef("github", repo, number), "comment", comment_id)
    if event != "pull_request":
        return f"{event} is not about previews"
    number = _map(payload.get("pull_request")).get("number") or payload.get("number")
    if not isinstance(number, int):
        return "the delivery has no PR number"
    label = _map(payload.get("label")).get("name")
    causes = {"synchronize": "push", "closed": "closed", "reopened": "reopened"}
    if action in ("labeled", "unlabeled") and label == LABEL:
        cause = "label" if action == "labeled" else "unlabel"
    elif isinstance(action, str) and action in causes:
        cause = causes[action]
    else:
        return f"pull_request {action!r} is not about previews"
    return PreviewHint(PullRef("github", repo, number), cause)


def _titles(labels: Any) -> set[str]:
    return {str(_map(x).get("title") or _map(x).get("name")) for x in labels or ()}


def gitlab_hint(event: str, payload: Mapping[str, Any]) -> PreviewHint | str:
    """The hint of a GitLab delivery, or why it concerns no preview."""
    repo = _map(payload.get("project")).get("path_with_namespace")
    attributes = _map(payload.get("object_attributes"))
    if not isinstance(repo, str):
        return "the delivery has no project"
    if event == "Note Hook":
        number = _map(payload.get("merge_request")).get("iid")
        note_id = attributes.get("id")
        if attributes.get("noteable_type") != "MergeRequest" or not isinstance(number, int):
            return "the note is not on a merge request"
        if not isinstance(note_id, int):
            return "the delivery has no note id"
        if not is_preview_command(str(attributes.get("note") or "")):
            return f"the note is not {COMMAND}"
        return PreviewHint(PullRef("gitlab", repo, number), "comment", note_id)
    if event != "Merge Request Hook":
        return f"{event} is not about previews"
    number = attributes.get("iid")
    if not isinstance(number, int):
        return "the delivery has no merge request iid"
    labels = _map(_map(payload.get("changes")).get("labels"))
    before, after = _titles(labels.get("previous")), _titles(labels.get("current"))
    action = attributes.get("action")
    if LABEL in after - before or (action == "open" and LABEL in _titles(payload.get("labels"))):
        cause = "label"
    elif LABEL in before - after:
        cause = "unlabel"
    elif action in ("close", "merge"):
        cause = "closed"
    elif action == "reopen":
        cause = "reopened"
    elif action == "update" and attributes.get("oldrev"):
        cause = "push"
    else:
        return f"merge request {action!r} is not about previews"
    return PreviewHint(PullRef("gitlab", repo, number), cause)
