"""Notifications delivered to a real HTTP receiver on loopback, on SQLite and PostgreSQL.

Events are written as the server writes them (`Store.append_event`); the notifier follows
them, signs and sends; the receiver records what arrived. The clock is the store's fake
clock, so back-off is stepped, never slept.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import Engine

from reconciler.adapters.db import Store, create_db_engine
from reconciler.adapters.db.notifications import NotificationsStore
from reconciler.core.notifying import check_receiver
from reconciler.domain.notifications import Receiver
from reconciler.engine.notifier import Notifier, NotifierConfig
from tests.notifications.receiver import LocalReceiver, local_receiver
from tests.store.conftest import FakeClock

SECRET = "receiver-secret-0123456789"


def _stores(engine: Engine, clock: FakeClock) -> tuple[Store, NotificationsStore]:
    return Store(engine, clock=clock), NotificationsStore(engine, clock=clock)


def _add(
    notes: NotificationsStore, name: str, url: str, kind: str = "webhook", **kw: object
) -> None:
    fields: dict[str, object] = {"events": ("run.failed", "reconcile.failed")}
    fields.update(kw)
    secret = SECRET if kind == "webhook" else None
    receiver = Receiver(name=name, kind=kind, url=url, secret=secret, **fields)  # type: ignore[arg-type]
    notes.add_receiver(check_receiver(receiver), "admin")


def _run_failed(store: Store, project_id: str, name: str) -> None:
    store.append_event(
        project_id=project_id, target_type="run", target_id=name, target_name=name,
        message="run status running -> failed",
    )  # fmt: skip


def _verify(received_headers: dict[str, str], body: bytes) -> bool:
    """The receiver's own check: HMAC-SHA256 over "<timestamp>." + body, with its secret."""
    stamp = received_headers["x-dockyard-timestamp"]
    mac = hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(received_headers["x-dockyard-signature"], f"sha256={mac}")


async def _settle(*notifiers: Notifier) -> None:
    for notifier in notifiers:
        await notifier.pass_once()
    for notifier in notifiers:
        await notifier.drain()


async def test_webhook_is_signed_and_slack_text_is_escaped(
    engine: Engine, clock: FakeClock
) -> None:
    store, notes = _stores(engine, clock)
    project = store.get_or_create_project("main")
    with local_receiver() as receiver:
        _add(notes, "ops-hook", receiver.url("/hook"))
        _add(notes, "ops-slack", receiver.url("/slack"), kind="slack")
        store.append_event(
            project_id=project.id, target_type="reconcile", target_id="r1",
            target_name="abc123", message="reconcile failed at abc123: <!channel> & <x|y>",
        )  # fmt: skip
        notifier = Notifier(notes)
        await _settle(notifier)
        by_path = {r.path: r for r in receiver.requests}
        assert sorted(by_path) == ["/hook", "/slack"] and len(receiver.requests) == 2
        hook = by_path["/hook"]
        assert _verify(hook.headers, hook.body)
        sent = json.loads(hook.body)
        assert sent["event"]["kind"] == "reconcile.failed"
        assert sent["event"]["project"] == "main"
        assert sent["delivery"] == hook.headers["x-dockyard-delivery"]
        tampered = hook.body.replace(b"main", b"evil")
        assert not _verify(hook.headers, tampered)
        text = json.loads(by_path["/slack"].body)["text"]
        assert "&lt;!channel&gt; &amp; &lt;x|y&gt;" in text and "<!" not in text
        assert "x-dockyard-signature" not in by_path["/slack"].headers
        [delivered, other] = notes.list_deliveries(viewer=None)
        assert {delivered.status, other.status} == {"delivered"}
        await notifier.stop()


async def test_retries_with_back_off_then_fails_after_the_last_attempt(
    engine: Engine, clock: FakeClock
) -> None:
    store, notes = _stores(engine, clock)
    project = store.get_or_create_project("main")
    config = NotifierConfig(max_attempts=3, retry_base=10, retry_cap=100)
    with local_receiver() as receiver:
        receiver.behaviour.statuses = [503, 503]
        _add(notes, "ops", receiver.url())
        _run_failed(store, project.id, "train")
        notifier = Notifier(notes, config)
        await _settle(notifier)
        [view] = notes.list_deliveries(viewer=None)
        assert (view.status, view.attempts, view.last_status_code) == ("retrying", 1, 503)
        assert view.next_attempt_at == store.now() + _seconds(10)
        await _settle(notifier)  # not due yet: nothing sent
        assert len(receiver.requests) == 1
        clock.advance(10)
        await _settle(notifier)
        [view] = notes.list_deliveries(viewer=None)
        assert (view.status, view.attempts) == ("retrying", 2)
        assert view.next_attempt_at == store.now() + _seconds(20)
        clock.advance(20)
        await _settle(notifier)
        [view] = notes.list_deliveries(viewer=None)
        assert (view.status, view.attempts, view.last_status_code) == ("delivered", 3, 200)
        ids = {r.headers["x-dockyard-delivery"] for r in receiver.requests}
        assert len(receiver.requests) == 3 and ids == {view.id}  # one delivery, retried

        receiver.behaviour.statuses = [500, 500, 500, 500]
        _run_failed(store, project.id, "eval")
        for _ in range(4):
            await _settle(notifier)
            clock.advance(100)
        failed = [d for d in notes.list_deliveries(viewer=None) if d.target_name == "eval"]
        assert [(d.status, d.attempts, d.next_attempt_at) for d in failed] == [("failed", 3, None)]
        assert len(receiver.requests) == 6
        await notifier.stop()


async def test_a_receiver_that_was_down_gets_it_once_back(engine: Engine, clock: FakeClock) -> None:
    store, notes = _stores(engine, clock)
    project = store.get_or_create_project("main")
    down = LocalReceiver()
    port = down.port
    down.close()  # nothing listens on the port now: connection refused
    _add(notes, "ops", f"http://127.0.0.1:{port}/hook")
    _run_failed(store, project.id, "train")
    notifier = Notifier(notes, NotifierConfig(retry_base=5))
    await _settle(notifier)
    [view] = notes.list_deliveries(viewer=None)
    assert view.status == "retrying" and "ConnectError" in (view.last_error or "")
    with local_receiver(port) as back:
        clock.advance(5)
        await _settle(notifier)
        clock.advance(600)
        await _settle(notifier)
        assert len(back.requests) == 1 and _verify(back.requests[0].headers, back.requests[0].body)
    [view] = notes.list_deliveries(viewer=None)
    assert (view.status, view.attempts) == ("delivered", 2)
    await notifier.stop()


async def test_a_receiver_that_never_answers_does_not_hold_back_another(
    engine: Engine, clock: FakeClock
) -> None:
    store, notes = _stores(engine, clock)
    project = store.get_or_create_project("main")
    with local_receiver() as slow, local_receiver() as quick:
        slow.behaviour.hold = True
        _add(notes, "slow", slow.url())
        _add(notes, "quick", quick.url())
        _run_failed(store, project.id, "train")
        notifier = Notifier(notes, NotifierConfig(timeout=1.0))
        assert await notifier.pass_once() == 2  # returns with both requests under way
        await _poll(lambda: len(quick.requests) == 1 and len(slow.requests) == 1)
        await _poll(lambda: _status(notes, "quick") == "delivered")
        assert _status(notes, "slow") == "pending"  # still held by the slow receiver
        await notifier.drain()  # the slow request ends at the notifier's timeout
        [view] = [d for d in notes.list_deliveries(viewer=None) if d.receiver == "slow"]
        assert view.status == "retrying" and "no answer within 1s" in (view.last_error or "")
        await notifier.stop()


@pytest.mark.parametrize("events", [40])
async def test_two_replicas_deliver_each_event_once_per_receiver(
    engine: Engine, notify_db_url: str, clock: FakeClock, events: int
) -> None:
    """Two servers' notifiers, each on its own engine of one database, follow and send at
    once; each (event, receiver) arrives exactly once, a failed first try included."""
    store, notes = _stores(engine, clock)
    other_engine = create_db_engine(notify_db_url)
    other = NotificationsStore(other_engine, clock=clock)
    project = store.get_or_create_project("main")
    config = NotifierConfig(concurrency=8, retry_base=1)
    try:
        with local_receiver() as receiver:
            receiver.behaviour.statuses = [503] * 5  # some first tries fail, then retried
            _add(notes, "a", receiver.url("/a"))
            _add(notes, "b", receiver.url("/b"))
            for i in range(events):
                _run_failed(store, project.id, f"run-{i}")
            first, second = Notifier(notes, config), Notifier(other, config)
            for _ in range(200):
                await asyncio.gather(first.pass_once(), second.pass_once())
                await asyncio.gather(first.drain(), second.drain())
                clock.advance(1)
                views = notes.list_deliveries(viewer=None, limit=1000)
                if len(views) == 2 * events and all(v.status == "delivered" for v in views):
                    break
            delivered = Counter(
                (r.path, json.loads(r.body)["event"]["id"])
                for r in receiver.requests
                if not _failed_try(r, receiver)
            )
            assert len(delivered) == 2 * events
            assert set(delivered.values()) == {1}
            assert len(receiver.requests) == 2 * events + 5
            await first.stop()
            await second.stop()
    finally:
        other_engine.dispose()


def _failed_try(request: object, receiver: LocalReceiver) -> bool:
    """The first five requests were answered 503 (the receiver answers in arrival order)."""
    return receiver.requests.index(request) < 5  # type: ignore[arg-type]


def _status(notes: NotificationsStore, receiver: str) -> str:
    return next(d.status for d in notes.list_deliveries(viewer=None) if d.receiver == receiver)


async def _poll(condition: Callable[[], bool], deadline: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while not condition():
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.02)


def _seconds(n: float) -> timedelta:
    return timedelta(seconds=n)
