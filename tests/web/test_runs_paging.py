"""`/api/runs/list`: dstack's global runs list, its filters and its `prev_*` paging."""

from __future__ import annotations

from typing import Any

import httpx

from tests.web.serving import Running


def _task(name: str) -> dict[str, str]:
    return {"text": f"type: task\nname: {name}\ncommands: [ls]\n", "path": f"{name}.dstack.yml"}


def _pages(http: httpx.Client, **body: Any) -> list[list[str]]:
    """Every page of 2, following the cursor of each page's last run."""
    pages: list[list[str]] = []
    cursor: dict[str, Any] = {}
    while True:
        answer = http.post("/api/runs/list", json={**body, **cursor, "limit": 2})
        assert answer.status_code == 200, answer.text
        runs = answer.json()
        if not runs:
            return pages
        pages.append([r["run_spec"]["run_name"] for r in runs])
        last = runs[-1]
        cursor = {"prev_submitted_at": last["submitted_at"], "prev_run_id": last["id"]}


def test_pages_cover_every_run_once_in_order(server: Running) -> None:
    names = [f"run-{i}" for i in range(5)]
    with server.client(server.admin_token) as http:
        for name in names:
            assert http.post("/api/project/main/runs/apply", json=_task(name)).status_code == 200
        newest_first = _pages(http)
        oldest_first = _pages(http, ascending=True)
        only_main = _pages(http, project_name="main", username="admin")
        nobody = _pages(http, username="someone-else")
    flat = [name for page in newest_first for name in page]
    assert sorted(flat) == names and len(flat) == len(set(flat)), "each run exactly once"
    assert [len(p) for p in newest_first] == [2, 2, 1]
    assert [n for p in oldest_first for n in p] == flat[::-1]
    assert sorted(n for p in only_main for n in p) == names
    assert nobody == []


def test_a_member_sees_only_its_projects(server: Running) -> None:
    with server.client(server.admin_token) as http:
        applied = http.post("/api/project/main/runs/apply", json=_task("secret-run"))
        assert applied.status_code == 200
        made = http.post("/api/users/create", json={"username": "outsider"}).json()
        http.post("/api/projects/create", json={"project_name": "theirs"})
    with server.client(made["token"]) as outsider:
        answer = outsider.post("/api/runs/list", json={})
        assert answer.status_code == 200 and answer.json() == []
        too_many = outsider.post("/api/runs/list", json={"limit": 101})
        assert too_many.status_code == 422


def test_the_python_api_iterates_every_page(server: Running) -> None:
    from reconciler.api import Client

    with server.client(server.admin_token) as http:
        for i in range(5):
            assert http.post("/api/project/main/runs/apply", json=_task(f"api-{i}")).is_success
    with Client(server.url, server.admin_token) as dockyard:
        names = [run.run_spec["run_name"] for run in dockyard.iter_runs(page_size=2)]
        assert sorted(names) == [f"api-{i}" for i in range(5)] and len(set(names)) == 5
        assert list(dockyard.iter_runs(project="main", only_active=True, page_size=3))
