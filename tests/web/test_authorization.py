"""The authorization matrix: every route of the app, with no token, a bad token, and a token
of a user who belongs to another project only. Routes are enumerated from the app, so a new
route is covered without touching this file; open routes are listed explicitly.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from tests.web.serving import Running

OPEN = {"/healthcheck", "/api/webhooks/github", "/api/webhooks/gitlab"}
OPEN |= {"/pages/{kind}/{ident}"}  # reconcile pages: signed links (tests/pr/test_server_bot.py)
# Routes any signed-in user may call; they must still show nothing of other projects.
ANY_USER = {
    "/api/server/get_info",
    "/api/users/get_my_user",
    "/api/projects/list",
    "/api/projects/create",
    "/openapi.json",
    "/api/files/upload_archive",  # content-addressed blobs, named only by their hash
    "/api/files/get_archive_by_hash",
    "/api/runs/list",  # across the caller's own projects only (tests/web/test_runs_paging.py)
    # dstack's: the caller alone / the caller's own projects only (tests/compat/)
    "/api/users/get_user",
    "/api/instances/list",
    "/api/events/list",
    # the sources of the caller's own projects only (tests/sources/test_source_api.py)
    "/api/sources/list",
    "/api/sources/get",
    # the notifications of the caller's own projects only (tests/web/test_notifications_api.py)
    "/api/notifications/list",
}


# The web console (reconciler/web/console) has its own session cookie: its routes are open at
# the token gate and checked by `test_every_console_route_needs_a_session` below.
CONSOLE_OPEN = {"/", "/console/login", "/console/static/{name}"}


def is_console(path: str) -> bool:
    return path == "/" or path.startswith("/console/")


def _walk(routes: list[Any]) -> list[Any]:
    """Every route, descending into included routers (FastAPI nests them)."""
    flat: list[Any] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        flat.extend(_walk(inner.routes) if inner is not None else [route])
    return flat


def _routes(server: Running) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for route in _walk(server.server.app.routes):
        if isinstance(route, APIRoute) or getattr(route, "path", "") == "/openapi.json":
            methods: set[str] = getattr(route, "methods", None) or {"GET"}
            for method in sorted(methods - {"HEAD"}):
                found.append((method, route.path))  # type: ignore[attr-defined]
    return found


def _call(http: httpx.Client, method: str, path: str) -> httpx.Response:
    url = path.replace("{project_name}", "main")
    return http.request(method, url, json={} if method == "POST" else None)


@pytest.fixture
def outsider(server: Running) -> str:
    """A token of a user who is admin of project `other` and nothing else."""
    with server.client(server.admin_token) as http:
        made = http.post("/api/users/create", json={"username": "outsider"}).json()
    with server.client(made["token"]) as http:
        assert http.post("/api/projects/create", json={"project_name": "other"}).status_code == 200
    token: str = made["token"]
    return token


def test_enumeration_finds_the_routes(server: Running) -> None:
    paths = {path for _, path in _routes(server)}
    assert len(paths) > 40
    assert {"/api/project/{project_name}/runs/get", "/metrics", "/openapi.json"} <= paths
    assert paths >= OPEN


def test_every_route_needs_a_valid_token(server: Running) -> None:
    checked = 0
    routes = [(m, p) for m, p in _routes(server) if p not in OPEN and not is_console(p)]
    for token in (None, "not-a-token", server.admin_token[:-2] + "xx"):
        with server.client(token) as http:
            for method, path in routes:
                answer = _call(http, method, path)
                assert answer.status_code == 401, (method, path, token, answer.text)
                checked += 1
    assert checked > 100


def test_another_projects_token_gets_nothing(server: Running, outsider: str) -> None:
    with server.client(outsider) as http:
        for method, path in _routes(server):
            if path in OPEN or is_console(path):
                continue
            answer = _call(http, method, path)
            if path in ANY_USER:
                # an upload that is not a tar.gz is refused for what it is, not for who sent it
                allowed = (200, 400, 422) if path == "/api/files/upload_archive" else (200, 422)
                assert answer.status_code in allowed, (path, answer.text)
                assert '"main"' not in answer.text, (path, answer.text)
            else:
                assert answer.status_code == 403, (method, path, answer.status_code, answer.text)


def test_open_routes_answer_without_token(server: Running) -> None:
    assert httpx.get(f"{server.url}/healthcheck").status_code == 200
    answer = httpx.post(f"{server.url}/api/webhooks/github", content=b"{}")
    assert answer.status_code == 401  # no signature: refused, but by the webhook itself


def _role_client(server: Running, role: str) -> httpx.Client:
    with server.client(server.admin_token) as http:
        made: dict[str, Any] = http.post("/api/users/create", json={"username": role}).json()
        body = {"members": [{"username": role, "project_role": role}]}
        assert http.post("/api/projects/main/add_members", json=body).status_code == 200
        assert (
            http.post(
                "/api/project/main/secrets/create_or_update",
                json={"name": "HF_TOKEN", "value": "s3"},
            ).status_code
            == 200
        )
    return server.client(made["token"])


def test_project_roles(server: Running) -> None:
    with _role_client(server, "user") as http:
        assert http.post("/api/project/main/runs/list", json={}).status_code == 200
        names = http.post("/api/project/main/secrets/list", json={}).json()
        assert names == [{"id": names[0]["id"], "name": "HF_TOKEN", "value": None}]
        assert (
            http.post("/api/project/main/secrets/get", json={"name": "HF_TOKEN"}).status_code == 403
        )
        body = {"name": "X", "value": "y"}
        assert http.post("/api/project/main/secrets/create_or_update", json=body).status_code == 403
        assert http.post("/metrics").status_code in (403, 405)
        assert http.get("/metrics").status_code == 403
    with _role_client(server, "manager") as http:
        body = {"name": "X", "value": "y"}
        assert http.post("/api/project/main/secrets/create_or_update", json=body).status_code == 200
        assert http.post("/api/project/main/secrets/get", json={"name": "X"}).status_code == 403
        grant = {"members": [{"username": "manager", "project_role": "admin"}]}
        assert http.post("/api/projects/main/add_members", json=grant).status_code == 403
    with server.client(server.admin_token) as http:
        secret = http.post("/api/project/main/secrets/get", json={"name": "HF_TOKEN"}).json()
        assert secret["value"] == "s3"


def _console_url(path: str) -> str:
    for param in ("{project}", "{run_name}", "{reconcile_id}", "{name}"):
        path = path.replace(param, "main" if param == "{project}" else "x")
    return path


def test_every_console_route_needs_a_session(server: Running, outsider: str) -> None:
    """No session (a bearer token is not one, a forged cookie neither) → the sign-in page;
    an outsider's session → 403 on every page of project `main`."""
    routes = [(m, p) for m, p in _routes(server) if is_console(p) and p not in CONSOLE_OPEN]
    assert len(routes) > 10
    for cookie in ({}, {"dockyard_console": "forged.value"}):
        with server.client(server.admin_token) as http:
            http.cookies.update(cookie)
            for method, path in routes:
                answer = http.request(method, _console_url(path))
                assert answer.status_code == 303, (method, path, answer.text)
                assert answer.headers["location"].startswith("/console/login")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.post("/console/login", data={"token": outsider}).status_code == 303
        for method, path in routes:
            answer = http.request(method, _console_url(path))
            # the projects and sources pages list only theirs (test_console_sources.py)
            expected = 200 if path in ("/console/", "/console/sources") else 403
            assert answer.status_code == expected, (method, path, answer.status_code)
