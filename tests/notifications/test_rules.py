"""The pure notification rules (`reconciler.core.notifying`): which events are notified
as what, who takes them, what an admin may define, the back-off, the bounded bodies."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from reconciler.core.notifying import (
    MAX_MESSAGE,
    bounded_event,
    check_receiver,
    event_kinds,
    retry_delay,
    shown_url,
    slack_request,
    takes,
    webhook_request,
)
from reconciler.domain.notifications import NotifiedEvent, Receiver
from reconciler.errors import UsageError


@pytest.mark.parametrize(
    ("target", "message", "kinds"),
    [
        ("reconcile", "reconcile failed at abc: fetch failed", ("reconcile.failed",)),
        ("reconcile", "reconcile succeeded at abc", ()),
        ("reconcile", "reconcile blocked at abc: 1 blocked: run x: policy", ("reconcile.blocked",)),
        ("run", "run status running -> failed", ("run.failed",)),
        ("run", "run status running -> terminating (retry_limit_exceeded)", ("run.retried_out",)),
        ("run", "run status running -> terminating (job_failed)", ()),
        ("run", "run status running -> done", ()),
        ("instance", "instance h: instance_unreachable: agent unreachable for 130s: x",
         ("instance.unreachable",)),
        ("instance", "instance h: agent unreachable: refused", ()),  # inside the grace window
        ("preview", "preview deployed at abc for ann (acme/cfg#7)", ("preview.started",)),
        ("preview", "preview torn down: the pull request was closed", ("preview.torn_down",)),
        ("job", "job status running -> failed", ()),
    ],
)  # fmt: skip
def test_event_kinds(target: str, message: str, kinds: tuple[str, ...]) -> None:
    assert event_kinds(target, message) == kinds


def _receiver(**kw: object) -> Receiver:
    fields: dict[str, object] = {
        "name": "ops", "kind": "webhook", "url": "https://hooks.example/x",
        "events": ("run.failed",), "secret": "k" * 16,
    }  # fmt: skip
    fields.update(kw)
    return Receiver(**fields)  # type: ignore[arg-type]


def test_takes_by_kind_project_and_source() -> None:
    anywhere = _receiver()
    assert takes(anywhere, "run.failed", "a", None)
    assert not takes(anywhere, "reconcile.failed", "a", None)
    assert not takes(_receiver(project="b"), "run.failed", "a", None)
    assert takes(_receiver(source="team-a"), "run.failed", "a", "team-a")
    assert not takes(_receiver(source="team-a"), "run.failed", "a", "team-b")
    assert not takes(_receiver(source="team-a"), "run.failed", "a", None)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"name": "no spaces"}, "receiver name"),
        ({"kind": "email"}, "use 'webhook' or 'slack'"),
        ({"url": "file:///etc/passwd"}, "http:// or https://"),
        ({"url": "gopher://x/"}, "http:// or https://"),
        ({"url": "http://user:pw@h/x"}, "credentials in the URL"),
        ({"url": "http://h/" + "x" * 2000}, "at most 2000"),
        ({"events": ("run.exploded",)}, "run.failed"),
        ({"events": ()}, "(none)"),
        ({"secret": "short"}, "at least 16"),
        ({"kind": "slack", "secret": "k" * 16}, "a slack receiver has none"),
        ({"project": "../x"}, "receiver project"),
    ],
)
def test_bad_receivers_are_refused_with_the_field(changes: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError, match="receiver") as refused:
        check_receiver(_receiver(**changes))
    assert says in str(refused.value)


def test_shown_url_hides_a_slack_path_and_any_query() -> None:
    slack = _receiver(kind="slack", secret=None, url="https://hooks.slack.com/services/T/B/X")
    assert shown_url(slack) == "https://hooks.slack.com/…"
    assert shown_url(_receiver(url="https://h/p?token=t")) == "https://h/p?…"


def test_retry_delay_doubles_to_the_cap() -> None:
    assert [retry_delay(n, base=5, cap=60) for n in (1, 2, 3, 4, 5, 50)] == [5, 10, 20, 40, 60, 60]


def _event(message: str, name: str = "train") -> NotifiedEvent:
    at = datetime(2026, 12, 6, tzinfo=UTC)
    return NotifiedEvent("e1", "run.failed", "main", "run", name, message, at)


def test_bodies_are_bounded_and_names_escaped() -> None:
    huge = bounded_event(_event("x" * 100_000, name="n" * 5000))
    assert len(huge.message) == MAX_MESSAGE and len(huge.target_name) == 200
    body, headers = webhook_request("d1", _receiver(), huge, 1_700_000_000)
    assert len(body) < 4 * MAX_MESSAGE and headers["X-Dockyard-Signature"].startswith("sha256=")
    slack, _ = slack_request(_event("<@U123> & <https://evil|click>", name="<!here>"))
    text = json.loads(slack)["text"]
    assert "<" not in text and ">" not in text.replace("-&gt;", "")
    assert "&lt;!here&gt;" in text and "&amp;" in text
