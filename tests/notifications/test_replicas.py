"""Two real servers on one PostgreSQL database (two replicas: each its own data dir,
engine and notifier, started by its web app's lifespan) and a real receiver on loopback:
each event reaches the receiver once, the first failed tries included, and either
replica lists the outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.notifications.receiver import local_receiver
from tests.services.postgres import PostgresServer
from tests.web.fakes import FakeController
from tests.web.serving import running_server, wait_until

SECRET = "replicas-webhook-secret-0123"
EVENTS = 30


def test_two_server_replicas_deliver_each_event_once(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    postgres: PostgresServer = request.getfixturevalue("postgres_server")
    url = postgres.create_database()
    with running_server(tmp_path / "a", lambda s, store: FakeController(store), db=url) as a:
        second = tmp_path / "b" / "data"
        second.mkdir(parents=True, mode=0o700)  # the first start wrote the admin's token
        (second / "admin-token").write_text(a.admin_token)
        with (
            running_server(tmp_path / "b", lambda s, store: FakeController(store), db=url) as b,
            local_receiver() as receiver,
        ):
            receiver.behaviour.statuses = [503, 503]  # the receiver is down at first
            body = {"name": "ops", "kind": "webhook", "url": receiver.url(), "secret": SECRET,
                    "events": ["run.failed"]}  # fmt: skip
            with a.client(a.admin_token) as http:
                assert http.post("/api/notifications/receivers/add", json=body).status_code == 200
            store = a.server.store
            main = store.get_or_create_project("main")
            for i in range(EVENTS):
                store.append_event(
                    project_id=main.id, target_type="run", target_id=f"r{i}",
                    target_name=f"run-{i}", message="run status running -> failed",
                )  # fmt: skip

            def outcomes() -> list[str]:
                with b.client(b.admin_token) as http:
                    listed = http.post("/api/notifications/list", json={"limit": 1000})
                return [n["status"] for n in listed.json()]

            wait_until(
                lambda: outcomes() == ["delivered"] * EVENTS, 90, "every notification delivered"
            )
            answered = receiver.requests[2:]  # the first two were answered 503
            names = [json.loads(r.body)["event"]["target_name"] for r in answered]
            assert sorted(names) == sorted(f"run-{i}" for i in range(EVENTS))
            assert len(receiver.requests) == EVENTS + 2
