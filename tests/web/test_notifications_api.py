"""The notification API on a real server: receivers are a global admin's alone, a secret is
never answered back, a member sees only their projects' deliveries.

The attacks are a project admin (not a global admin) pointing a receiver at an address
inside the server's network (SSRF), and a member reading, deleting or listing receivers
and other projects' notifications.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from reconciler.adapters.db.notifications import NotificationsStore
from reconciler.engine.notifier import Notifier
from tests.notifications.receiver import local_receiver
from tests.web.serving import Running

SECRET = "a-webhook-secret-of-enough-length"


def _user(server: Running, name: str, project: str) -> str:
    """A user who is admin of `project` (created by them) and nothing else."""
    with server.client(server.admin_token) as http:
        made: dict[str, Any] = http.post("/api/users/create", json={"username": name}).json()
    with server.client(made["token"]) as http:
        assert http.post("/api/projects/create", json={"project_name": project}).status_code == 200
    token: str = made["token"]
    return token


def _hook(url: str, name: str = "ops", **kw: Any) -> dict[str, Any]:
    return {"name": name, "kind": "webhook", "url": url, "secret": SECRET,
            "events": ["run.failed"], **kw}  # fmt: skip


def test_admin_adds_lists_and_deletes_a_receiver_without_its_secret(server: Running) -> None:
    with server.client(server.admin_token) as http:
        added = http.post(
            "/api/notifications/receivers/add", json=_hook("http://127.0.0.1:9/h?k=v")
        )
        assert added.status_code == 200, added.text
        slack = {"name": "chat", "kind": "slack", "events": ["run.failed"],
                 "url": "https://hooks.slack.example/services/T0/B0/XXXXSECRET"}  # fmt: skip
        assert http.post("/api/notifications/receivers/add", json=slack).status_code == 200
        listed = http.post("/api/notifications/receivers/list", json={})
        assert listed.status_code == 200
        text = listed.text
        assert SECRET not in text and "XXXXSECRET" not in text and "k=v" not in text
        by_name = {r["name"]: r for r in listed.json()}
        assert by_name["ops"]["has_secret"] is True and by_name["chat"]["has_secret"] is False
        assert SECRET not in added.text
        again = http.post("/api/notifications/receivers/add", json=_hook("http://127.0.0.1:9/h"))
        assert again.status_code == 400 and "receiver ops exists" in again.text
        weak = http.post(
            "/api/notifications/receivers/add", json=_hook("http://x/h", name="w", secret="short")
        )
        assert weak.status_code == 400 and "at least 16 characters" in weak.text
        unknown = http.post(
            "/api/notifications/receivers/add", json=_hook("http://x/h", name="u", events=["nope"])
        )
        assert unknown.status_code == 400 and "run.failed" in unknown.text
        assert http.post("/api/notifications/receivers/delete", json={"name": "ops"}).json() == {
            "deleted": "ops"
        }
        gone = http.post("/api/notifications/receivers/delete", json={"name": "ops"})
        assert gone.status_code == 400 and "receiver ops not found" in gone.text


def test_a_project_admin_cannot_point_a_receiver_inside_the_network(server: Running) -> None:
    """SSRF: only a global admin sets receiver URLs. A project's own admin who asks for a
    receiver at a loopback address is refused, nothing is stored, nothing is ever sent."""
    mallory = _user(server, "mallory", "team-m")
    store: NotificationsStore = server.server.app.state.notifications
    with local_receiver() as inside:
        with server.client(mallory) as http:
            for path, body in (
                ("add", _hook(inside.url("/admin/reset"), name="probe", project="team-m")),
                ("list", {}),
                ("delete", {"name": "probe"}),
            ):
                answer = http.post(f"/api/notifications/receivers/{path}", json=body)
                assert answer.status_code == 403, (path, answer.text)
        assert store.list_receivers() == []
        server.server.store.append_event(
            project_id=server.server.store.get_or_create_project("team-m").id,
            target_type="run", target_id="r", target_name="r",
            message="run status running -> failed",
        )  # fmt: skip
        asyncio.run(_one_pass(Notifier(store)))
        assert inside.requests == []


def test_members_see_only_their_projects_notifications(server: Running) -> None:
    alice = _user(server, "alice", "team-a")
    _user(server, "bob", "team-b")
    store: NotificationsStore = server.server.app.state.notifications
    with local_receiver() as receiver:
        with server.client(server.admin_token) as http:
            added = http.post("/api/notifications/receivers/add", json=_hook(receiver.url()))
            assert added.status_code == 200
        for project in ("team-a", "team-b"):
            server.server.store.append_event(
                project_id=server.server.store.get_or_create_project(project).id,
                target_type="run", target_id=project, target_name=f"train-{project}",
                message="run status running -> failed",
            )  # fmt: skip
        asyncio.run(_one_pass(Notifier(store)))
        assert len(receiver.requests) == 2
        assert {json.loads(r.body)["event"]["project"] for r in receiver.requests} == {
            "team-a", "team-b",
        }  # fmt: skip
    with server.client(alice) as http:
        mine = http.post("/api/notifications/list", json={}).json()
        assert [(n["project"], n["status"]) for n in mine] == [("team-a", "delivered")]
        asked = http.post("/api/notifications/list", json={"project": "team-b"}).json()
        assert asked == []
    with server.client(server.admin_token) as http:
        everything = http.post("/api/notifications/list", json={}).json()
        assert {n["project"] for n in everything} == {"team-a", "team-b"}


async def _one_pass(notifier: Notifier) -> None:
    await notifier.pass_once()
    await notifier.drain()
    await notifier.stop()
