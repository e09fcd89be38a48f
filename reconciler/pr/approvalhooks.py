"""Reading a `/dockyard approve` request out of a webhook payload (pure, no I/O).

Called by the PR bot (`reconciler.pr.bot`) for a GitHub `issue_comment` delivery and a
GitLab `Note Hook` delivery. Only what says *which* comment to read back is taken from the
payload (repository, PR number, comment id; GitLab's note also says the MR head the author
saw): the author and the text that count are read back from the host's API by
`reconciler.pr.approving`. Returns the request, or why the delivery asks for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.pr.approving import COMMAND, ApprovalRequest, is_approve_command


def github_comment_request(
    payload: Mapping[str, Any], project: str, subdir: str
) -> ApprovalRequest | str:
    """The request of an `issue_comment` delivery: a new comment on a pull request."""
    issue = payload.get("issue")
    comment = payload.get("comment")
    repo = (payload.get("repository") or {}).get("full_name")
    if payload.get("action") != "created":
        return "only new comments are read"
    if not isinstance(issue, Mapping) or not isinstance(issue.get("pull_request"), Mapping):
        return "the comment is not on a pull request"
    number = issue.get("number")
    if not isinstance(comment, Mapping) or not isinstance(repo, str):
        return "the delivery has no comment or repository"
    comment_id = comment.get("id")
    if not isinstance(number, int) or not isinstance(comment_id, int):
        return "the delivery has no PR number or comment id"
    if not is_approve_command(str(comment.get("body") or "")):
        return f"the comment is not {COMMAND}"
    return ApprovalRequest(repo, number, comment_id, project, subdir=subdir)


def gitlab_note_request(
    payload: Mapping[str, Any], project: str, subdir: str
) -> ApprovalRequest | str:
    """The request of a `Note Hook` delivery: a new note on a merge request."""
    note = payload.get("object_attributes")
    request = payload.get("merge_request")
    repo = (payload.get("project") or {}).get("path_with_namespace")
    if not isinstance(note, Mapping) or note.get("noteable_type") != "MergeRequest":
        return "the note is not on a merge request"
    if note.get("action", "create") != "create" or note.get("system"):
        return "only new notes people write are read"
    if not isinstance(request, Mapping) or not isinstance(repo, str):
        return "the delivery has no merge request or project"
    number, note_id = request.get("iid"), note.get("id")
    if not isinstance(number, int) or not isinstance(note_id, int):
        return "the delivery has no merge request iid or note id"
    if not is_approve_command(str(note.get("note") or "")):
        return f"the note is not {COMMAND}"
    last = request.get("last_commit")
    seen = last.get("id") if isinstance(last, Mapping) else None
    return ApprovalRequest(
        repo,
        number,
        note_id,
        project,
        subdir=subdir,
        seen_head=seen if isinstance(seen, str) and seen else None,
    )
