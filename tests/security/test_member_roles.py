"""The API's project roles hold (dstack's rule), tried as a project manager would.

A real server (SQLite and PostgreSQL) and real tokens: a manager may add, re-role and
remove users and managers, but every way to grant admin or to change or remove an admin
(`add_members`, `set_members` replacing the whole list, `remove_members`) answers 403 with
the reason and changes nothing; an admin removing or demoting the last admin is refused
(400) with nothing changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Running]:
    overrides: dict[str, object] = {}
    if request.param == "postgres":
        pg: PostgresServer = request.getfixturevalue("postgres_server")
        overrides["db"] = pg.create_database()
    with running_server(tmp_path, lambda s, store: FakeController(store), **overrides) as running:
        yield running


def _user(admin: httpx.Client, name: str) -> str:
    made = admin.post("/api/users/create", json={"username": name})
    assert made.status_code == 200, made.text
    token: str = made.json()["token"]
    return token


def _members(http: httpx.Client, project: str = "team") -> dict[str, str]:
    got = http.post(f"/api/projects/{project}/get", json={})
    assert got.status_code == 200, got.text
    return {m["user"]["username"]: m["project_role"] for m in got.json()["members"]}


def _setting(members: dict[str, str]) -> dict[str, Any]:
    return {"members": [{"username": n, "project_role": r} for n, r in members.items()]}


@pytest.fixture
def team(server: Running) -> dict[str, str]:
    """Project `team`: owner (admin, a plain user globally), mia (manager), uma (user);
    bob exists but is not a member. Returns each one's token."""
    with server.client(server.admin_token) as admin:
        tokens = {name: _user(admin, name) for name in ("owner", "mia", "uma", "bob")}
    with server.client(tokens["owner"]) as owner:
        assert owner.post("/api/projects/create", json={"project_name": "team"}).status_code == 200
        body = _setting({"mia": "manager", "uma": "user"})
        assert owner.post("/api/projects/team/add_members", json=body).status_code == 200
    return tokens


def _refused(answer: httpx.Response, status: int, words: str) -> None:
    assert answer.status_code == status, answer.text
    assert words in answer.text, answer.text


START = {"owner": "admin", "mia": "manager", "uma": "user"}


def test_a_manager_cannot_grant_admin_nor_touch_an_admin(
    server: Running, team: dict[str, str]
) -> None:
    with server.client(team["mia"]) as mia:
        for body in (
            _setting({"mia": "admin"}),  # herself
            _setting({"bob": "admin"}),  # a newcomer
            _setting({"uma": "admin"}),  # a member promoted
        ):
            _refused(mia.post("/api/projects/team/add_members", json=body), 403, "admin")
        _refused(
            mia.post("/api/projects/team/add_members", json=_setting({"owner": "user"})),
            403,
            "may not change or remove admin owner",
        )
        _refused(
            mia.post("/api/projects/team/remove_members", json={"usernames": ["owner"]}),
            403,
            "may not change or remove admin owner",
        )
        # set_members replaces the whole list: leaving the admin out, demoting them, or
        # listing a new admin beside them are all changes of the admins
        for members in (
            {"mia": "manager", "uma": "user"},
            {"owner": "manager", "mia": "manager", "uma": "user"},
            {"owner": "admin", "mia": "admin", "uma": "user"},
            {"owner": "admin", "mia": "manager", "bob": "admin"},
        ):
            answer = mia.post("/api/projects/team/set_members", json=_setting(members))
            _refused(answer, 403, "a project manager may not")
        assert _members(mia) == START  # nothing changed


def test_a_manager_may_manage_users_and_managers(server: Running, team: dict[str, str]) -> None:
    with server.client(team["mia"]) as mia:
        added = mia.post("/api/projects/team/add_members", json=_setting({"bob": "manager"}))
        assert added.status_code == 200, added.text
        assert (
            mia.post("/api/projects/team/remove_members", json={"usernames": ["uma"]}).status_code
            == 200
        )
        # the whole list, the admin kept as is
        members = {"owner": "admin", "mia": "manager", "bob": "user", "uma": "manager"}
        answer = mia.post("/api/projects/team/set_members", json=_setting(members))
        assert answer.status_code == 200, answer.text
        assert _members(mia) == members


def test_no_call_leaves_a_project_without_an_admin(server: Running, team: dict[str, str]) -> None:
    with server.client(team["owner"]) as owner:
        for path, body in (
            ("remove_members", {"usernames": ["owner"]}),
            ("add_members", _setting({"owner": "manager"})),
            ("set_members", _setting({"mia": "manager", "uma": "user"})),
            ("set_members", _setting({})),
        ):
            answer = owner.post(f"/api/projects/team/{path}", json=body)
            _refused(answer, 400, "would leave the project without an admin")
        assert _members(owner) == START
        # with another admin first, the owner may step down
        promoted = owner.post("/api/projects/team/add_members", json=_setting({"mia": "admin"}))
        assert promoted.status_code == 200, promoted.text
        answer = owner.post("/api/projects/team/add_members", json=_setting({"owner": "user"}))
        assert answer.status_code == 200, answer.text
    with server.client(server.admin_token) as admin:  # a global admin is held to it too
        answer = admin.post("/api/projects/team/remove_members", json={"usernames": ["mia"]})
        _refused(answer, 400, "would leave the project without an admin")
        assert _members(admin) == {"owner": "user", "mia": "admin", "uma": "user"}


def test_deleting_the_last_admin_of_a_project_is_refused(
    server: Running, team: dict[str, str]
) -> None:
    """users/delete is another way to remove a member: a global admin deleting a project's
    only admin is refused (400) with the project named, and nothing is deleted."""
    with server.client(server.admin_token) as admin:
        answer = admin.post("/api/users/delete", json={"username": "owner"})
        _refused(answer, 400, "in project team, this would leave the project without an admin")
        assert _members(admin) == START
        assert admin.post("/api/users/get_user", json={"username": "owner"}).status_code == 200
        # deleting a manager is fine; with a second admin, deleting the first is fine too
        assert admin.post("/api/users/delete", json={"username": "mia"}).status_code == 200
        promoted = admin.post("/api/projects/team/add_members", json=_setting({"uma": "admin"}))
        assert promoted.status_code == 200, promoted.text
        answer = admin.post("/api/users/delete", json={"username": "owner"})
        assert answer.status_code == 200, answer.text
        assert _members(admin) == {"uma": "admin"}
