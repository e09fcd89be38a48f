"""Managing sources: `dockyard source …` and `POST /api/sources/…` on a real server.

The real controller (no `--repo`; a sources file declares one source): a source added
through the CLI is followed at once (its commit's task is planned and applied), the one
source per project rule names both sources, declared sources are refused to update and
delete, and secrets are references that are shown, never values. The trust boundaries in
the attack's own form: a member lists and reads another project's source, a non-admin
adds, suspends or deletes one, a literal secret posted is not echoed back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from reconciler.cli.main import build_app
from tests.engine.fixtures import ConfigRepo
from tests.sources.test_source_loops import reconciles, sources_file
from tests.web.serving import Running, running_server, wait_until

HELLO = "type: task\nname: hello\ncommands:\n  - echo hi\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "declared", "repo": str(tmp_path / "no-such-repo"), "project": "gamma"},
    )
    with running_server(tmp_path, None, sources_config=config, fetch_interval=3600) as running:
        yield running


def dockyard(server: Running, *args: str) -> tuple[int, str]:
    env = {
        "DOCKYARD_CONFIG": str(server.settings.cli_config),
        "DOCKYARD_PROJECT": "",
        "COLUMNS": "200",
    }
    result = CliRunner().invoke(build_app(), list(args), env=env)
    text = result.stdout + (str(result.exception) if result.exception else "")
    return result.exit_code, text


def member(server: Running, name: str, project: str) -> httpx.Client:
    """A user who is a member of `project` only (the project is created by the admin)."""
    with server.client(server.admin_token) as http:
        http.post("/api/projects/create", json={"project_name": project})
        made: dict[str, Any] = http.post("/api/users/create", json={"username": name}).json()
        body = {"members": [{"username": name, "project_role": "admin"}]}
        assert http.post(f"/api/projects/{project}/add_members", json=body).status_code == 200
    return server.client(made["token"])


def test_an_admin_manages_sources_with_the_cli(server: Running, tmp_path: Path) -> None:
    repo = ConfigRepo(tmp_path / "team-a")
    repo.commit({"hello.dstack.yml": HELLO}, "a task")
    code, text = dockyard(
        server, "source", "add", "team-a", "--repo", str(repo.path), "--for-project", "alpha",
        "--webhook-secret", "env:TEAM_A_HOOK",
    )  # fmt: skip
    assert code == 0, text
    assert "env:TEAM_A_HOOK" in text
    wait_until(
        lambda: any(r["status"] == "succeeded" for r in reconciles(server, "alpha")),
        60,
        "team-a's first reconcile",
    )
    code, text = dockyard(server, "source", "list")
    assert code == 0, text
    assert "team-a" in text and "alpha" in text and "following" in text
    assert "declared" in text and "file" in text
    # the declared source's repo does not exist: its state says so, with the pass's error

    def declared() -> dict[str, Any]:
        shown: dict[str, Any] = json.loads(
            dockyard(server, "source", "get", "declared", "--json")[1]
        )
        return shown

    wait_until(lambda: declared()["state"] == "failing", 60, "the declared source to fail")
    last = declared()["last_reconcile"]
    assert last["status"] in ("failed", "aborted") and "no-such-repo" in last["error"], last
    assert "failing" in dockyard(server, "source", "list")[1]

    code, text = dockyard(
        server, "source", "add", "team-a2", "--repo", str(repo.path), "--for-project", "alpha"
    )
    assert code != 0 and "'team-a'" in text and "'team-a2'" in text, text

    code, text = dockyard(server, "source", "update", "team-a", "--branch", "dev")
    assert code == 0 and "dev" in text, text
    code, text = dockyard(server, "source", "get", "team-a", "--json")
    assert code == 0 and '"branch": "dev"' in text and '"project": "alpha"' in text, text

    for verb in ("update", "delete"):
        code, text = dockyard(server, "source", verb, "declared")
        assert code != 0 and "--sources-config" in text, text

    assert dockyard(server, "source", "delete", "team-a")[0] == 0
    code, text = dockyard(server, "source", "list")
    assert "team-a" not in text and "declared" in text, text


def test_a_member_sees_only_their_projects_sources(server: Running) -> None:
    with server.client(server.admin_token) as http:
        for name, project in (("alpha-src", "alpha"), ("beta-src", "beta")):
            body = {"name": name, "repo": f"/srv/{name}-secret-path", "project": project}
            assert http.post("/api/sources/create", json=body).status_code == 200
    with member(server, "mallory", "alpha") as http:
        listed = http.post("/api/sources/list", json={}).json()
        assert [s["name"] for s in listed] == ["alpha-src"]
        other = http.post("/api/sources/get", json={"name": "beta-src"})
        missing = http.post("/api/sources/get", json={"name": "no-such"})
        assert other.status_code == missing.status_code == 400
        assert "beta-src-secret-path" not in other.text and "beta" not in other.text.replace(
            "beta-src", ""
        )
        assert http.post("/api/sources/get", json={"name": "alpha-src"}).status_code == 200
        # a non-admin (even the project's admin) manages no source
        body = {"name": "mine", "repo": "/srv/x", "project": "alpha"}
        assert http.post("/api/sources/create", json=body).status_code == 403
        for verb in ("suspend", "resume", "delete", "update"):
            answer = http.post(f"/api/sources/{verb}", json={"name": "alpha-src"})
            assert answer.status_code == 403, (verb, answer.text)
    with server.client(server.admin_token) as http:
        assert [s["name"] for s in http.post("/api/sources/list", json={}).json()] == [
            "alpha-src",
            "beta-src",
            "declared",
        ]


def test_a_literal_secret_is_refused_and_not_echoed(server: Running) -> None:
    body = {"name": "leaky", "repo": "/srv/x", "project": "alpha"}
    with server.client(server.admin_token) as http:
        for field in ("webhook_secret", "credentials"):
            answer = http.post("/api/sources/create", json={**body, field: "hunter2-literal"})
            assert answer.status_code == 400, answer.text
            assert field in answer.text and "hunter2" not in answer.text, answer.text
        assert http.post("/api/sources/get", json={"name": "leaky"}).status_code == 400
