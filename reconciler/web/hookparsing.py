"""Checking and reading GitHub and GitLab webhook deliveries (no I/O).

`is_gitlab_token_valid` checks the plain-text `X-Gitlab-Token` in constant time (GitHub's
`X-Hub-Signature-256` is checked as the body streams in: `hookbodies`). `read_github` /
`read_gitlab` turn a verified delivery into a `HookEvent`, and `decide` says whether it
queues a reconcile of the watched branch or is answered with a reason.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import Any

ZERO_SHA = "0" * 40


@dataclass(frozen=True, slots=True)
class HookEvent:
    """What a delivery asks for, reduced to what the reconciler needs."""

    provider: str
    event: str  # push | pull_request | ping | merge_request | other
    ref: str | None = None
    revision: str | None = None
    deleted: bool = False
    action: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    queue: bool
    outcome: str  # queued | ignored | pong
    reason: str | None = None


class PayloadError(ValueError):
    """The body is not the JSON object the event promises."""


def is_gitlab_token_valid(secret: str, header: str | None) -> bool:
    if header is None:
        return False
    return hmac.compare_digest(secret.encode(), header.encode())


def load_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise PayloadError("the body is not JSON") from None
    except RecursionError:  # the decoder stops at the interpreter's recursion limit
        raise PayloadError("the body's JSON nests too deeply (about 1000 levels at most)") from None
    if not isinstance(data, dict):
        raise PayloadError("the body is not a JSON object")
    return data


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def read_github(event: str, body: bytes) -> HookEvent:
    if event == "ping":
        return HookEvent("github", "ping")
    data = load_object(body)
    if event == "push":
        after = _str_or_none(data.get("after"))
        return HookEvent(
            "github",
            "push",
            ref=_str_or_none(data.get("ref")),
            revision=after,
            deleted=bool(data.get("deleted")) or after == ZERO_SHA,
        )
    if event == "pull_request":
        pr = data.get("pull_request")
        head = pr.get("head") if isinstance(pr, dict) else None
        sha = head.get("sha") if isinstance(head, dict) else None
        base = pr.get("base") if isinstance(pr, dict) else None
        base_ref = base.get("ref") if isinstance(base, dict) else None
        return HookEvent(
            "github",
            "pull_request",
            ref=_str_or_none(base_ref),
            revision=_str_or_none(sha),
            action=_str_or_none(data.get("action")),
        )
    return HookEvent("github", event or "other")


def read_gitlab(event: str, body: bytes) -> HookEvent:
    data = load_object(body)
    if event == "Push Hook":
        after = _str_or_none(data.get("after"))
        return HookEvent(
            "gitlab",
            "push",
            ref=_str_or_none(data.get("ref")),
            revision=_str_or_none(data.get("checkout_sha")) or after,
            deleted=after == ZERO_SHA,
        )
    if event == "Merge Request Hook":
        attrs = data.get("object_attributes")
        attrs = attrs if isinstance(attrs, dict) else {}
        last = attrs.get("last_commit")
        sha = last.get("id") if isinstance(last, dict) else None
        target = _str_or_none(attrs.get("target_branch"))
        return HookEvent(
            "gitlab",
            "merge_request",
            ref=f"refs/heads/{target}" if target else None,
            revision=_str_or_none(sha),
            action=_str_or_none(attrs.get("action")),
        )
    return HookEvent("gitlab", event or "other")


def decide(hook: HookEvent, branch: str) -> Decision:
    """Queue a reconcile only for a push that moves the watched branch."""
    watched = f"refs/heads/{branch}"
    if hook.event == "ping":
        return Decision(False, "pong", "ping received; the webhook works")
    if hook.event in ("pull_request", "merge_request"):
        return Decision(
            False,
            "ignored",
            f"{hook.event.replace('_', ' ')} events are planned by CI; "
            "the merge's push triggers the reconcile",
        )
    if hook.event != "push":
        return Decision(False, "ignored", f"event {hook.event!r} is not handled")
    if hook.ref != watched:
        return Decision(False, "ignored", f"push to {hook.ref}; the server watches {watched}")
    if hook.deleted:
        return Decision(False, "ignored", f"{watched} was deleted; nothing to apply")
    return Decision(True, "queued", None)
