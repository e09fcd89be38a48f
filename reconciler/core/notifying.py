"""What a notification is: which events are notified, who takes them, what is sent.

Pure decisions for the notifier (`reconciler.engine.notifier`) and the notification store
(`reconciler.adapters.db.notifications`): `event_kinds` reads the kinds of an `events` row
(the outbox the notifier follows), `takes` says whether a receiver takes one, `check_receiver`
validates what an admin defines, `retry_delay` is the back-off, and `webhook_request` /
`slack_request` build the bounded, signed bodies. docs/notifications.md lists the kinds.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import replace
from urllib.parse import urlsplit

from reconciler.domain.notifications import NotifiedEvent, Receiver
from reconciler.errors import UsageError

EVENT_KINDS: dict[str, str] = {
    "reconcile.failed": "a reconcile failed (fetch, plan, preview or apply)",
    "reconcile.blocked": "a reconcile applied nothing of an action a budget, policy or "
    "approval rule blocked",
    "run.failed": "a run ended failed",
    "run.retried_out": "a run was ended because its retries ran out (retry_limit_exceeded)",
    "instance.unreachable": "a host's agent stayed unreachable past the grace window",
    "preview.started": "a pull request's preview was deployed",
    "preview.torn_down": "a pull request's preview was torn down",
}
"""Every kind a receiver may take, with what it means."""

NOTIFIED_TARGETS = ("reconcile", "run", "instance", "preview")
"""The `events.target_type`s any kind comes from: the follower reads only these."""

MAX_MESSAGE = 2000  # characters of an event's message a notification carries
MAX_NAME = 200
SIGNATURE_HEADER = "X-Dockyard-Signature"
_RUN_FAILED = re.compile(r"^run status \S+ -> failed\b")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_MIN_SECRET = 16
_MAX_URL = 2000


def event_kinds(target_type: str, message: str) -> tuple[str, ...]:
    """The notified kinds of an event row (none for most events)."""
    if target_type == "reconcile":
        if message.startswith("reconcile failed"):
            return ("reconcile.failed",)
        if message.startswith("reconcile blocked"):
            return ("reconcile.blocked",)
    elif target_type == "run":
        kinds = ["run.failed"] if _RUN_FAILED.match(message) else []
        if "(retry_limit_exceeded)" in message:
            kinds.append("run.retried_out")
        return tuple(kinds)
    elif target_type == "instance" and ": instance_unreachable:" in message:
        return ("instance.unreachable",)
    elif target_type == "preview":
        if message.startswith("preview deployed"):
            return ("preview.started",)
        if message.startswith("preview torn down"):
            return ("preview.torn_down",)
    return ()


def takes(receiver: Receiver, kind: str, project: str | None, source: str | None) -> bool:
    """Whether `receiver` takes an event of `kind` in `project` (fed by `source`)."""
    if kind not in receiver.events:
        return False
    if receiver.project is not None and receiver.project != project:
        return False
    return receiver.source is None or receiver.source == source


def check_receiver(receiver: Receiver) -> Receiver:
    """The receiver as stored, or a `UsageError` naming the field and what to do."""
    if not _NAME.match(receiver.name):
        raise UsageError(
            f"receiver name {receiver.name[:120]!r}: use 1-100 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    if receiver.kind not in ("webhook", "slack"):
        raise UsageError(f"receiver kind {receiver.kind!r}: use 'webhook' or 'slack'")
    _check_url(receiver.url)
    unknown = sorted(set(receiver.events) - set(EVENT_KINDS))
    if unknown or not receiver.events:
        raise UsageError(
            f"receiver events {unknown or '(none)'}: name one or more of {', '.join(EVENT_KINDS)}"
        )
    if receiver.kind == "webhook" and len(receiver.secret or "") < _MIN_SECRET:
        raise UsageError(
            f"receiver secret: a webhook receiver needs a secret of at least {_MIN_SECRET} "
            "characters (its requests are signed with it; see docs/notifications.md)"
        )
    if receiver.kind == "slack" and receiver.secret:
        raise UsageError("receiver secret: a slack receiver has none (its URL is its secret)")
    for field, value in (("project", receiver.project), ("source", receiver.source)):
        if value is not None and not _NAME.match(value):
            raise UsageError(f"receiver {field} {value[:120]!r}: not a valid {field} name")
    return replace(receiver, events=tuple(sorted(set(receiver.events))))


def _check_url(url: str) -> None:
    parts = urlsplit(url) if len(url) <= _MAX_URL else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"receiver url {url[:120]!r}: give an http:// or https:// URL with a host, "
            f"at most {_MAX_URL} characters"
        )
    if parts.username is not None or parts.password is not None:
        raise UsageError("receiver url: credentials in the URL are refused; use the secret")


def shown_url(receiver: Receiver) -> str:
    """The URL as the API shows it: a Slack URL's path is its secret, a query may hold one."""
    parts = urlsplit(receiver.url)
    path = "/…" if receiver.kind == "slack" else parts.path
    return f"{parts.scheme}://{parts.netloc}{path}" + ("?…" if parts.query else "")


def retry_delay(attempts: int, *, base: float, cap: float) -> float:
    """Seconds before attempt `attempts + 1`: doubling from `base`, at most `cap`."""
    return float(min(cap, base * 2 ** max(0, min(attempts - 1, 30))))


def bounded_event(event: NotifiedEvent) -> NotifiedEvent:
    """The event with its message and name cut to what a notification carries."""
    return replace(
        event,
        message=_cut(event.message, MAX_MESSAGE),
        target_name=_cut(event.target_name, MAX_NAME),
    )


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex>` of HMAC-SHA256(secret, "<timestamp>." + body)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def webhook_request(
    delivery_id: str, receiver: Receiver, event: NotifiedEvent, timestamp: int
) -> tuple[bytes, dict[str, str]]:
    """The generic webhook's JSON body and headers, signed with the receiver's secret."""
    body = json.dumps(
        {"delivery": delivery_id, "receiver": receiver.name, "event": event.as_json()},
        separators=(",", ":"),
        sort_keys=True,
    ).encode()
    stamp = str(timestamp)
    headers = {
        "Content-Type": "application/json",
        "X-Dockyard-Delivery": delivery_id,
        "X-Dockyard-Event": event.kind,
        "X-Dockyard-Timestamp": stamp,
        SIGNATURE_HEADER: signature(receiver.secret or "", stamp, body),
    }
    return body, headers


def slack_request(event: NotifiedEvent) -> tuple[bytes, dict[str, str]]:
    """A Slack incoming webhook's `{"text": ...}`: every name from the event escaped."""
    where = f" in project {slack_escape(event.project)}" if event.project else ""
    text = (
        f"*{slack_escape(EVENT_TITLES.get(event.kind, event.kind))}*{where}: "
        f"{slack_escape(event.target_type)} `{slack_escape(event.target_name)}`\n"
        f"{slack_escape(event.message)}"
    )
    body = json.dumps({"text": text}, separators=(",", ":")).encode()
    return body, {"Content-Type": "application/json"}


EVENT_TITLES = {
    "reconcile.failed": "Reconcile failed",
    "reconcile.blocked": "Reconcile blocked",
    "run.failed": "Run failed",
    "run.retried_out": "Run out of retries",
    "instance.unreachable": "Host unreachable",
    "preview.started": "Preview started",
    "preview.torn_down": "Preview torn down",
}


def blocked_message(revision: str, blocked: tuple[str, ...]) -> str:
    """The event a reconcile records when a budget, policy or approval blocked actions
    (`reconcile.blocked`): how many, and each `key: reason`, bounded."""
    listed = "; ".join(blocked)
    return _cut(f"reconcile blocked at {revision}: {len(blocked)} blocked: {listed}", MAX_MESSAGE)


def slack_escape(text: str) -> str:
    """Slack's escaping of `&`, `<` and `>`: a name cannot become a link or a mention."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
