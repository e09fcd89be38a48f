"""Many sources on one real server: each source is followed by its own loop.

A real server over loopback HTTP (tests/web/serving.py), started with a sources file and
no `--repo`: one source's remote accepts the fetch's connection and never answers
(tests/sources/hanging.py), the other is a real local git repo whose task must reach
`running` meanwhile. With one reconciles worker for every source (before sources), the
hung fetch held it and the second source never reconciled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.errors import UsageError
from tests.engine.fixtures import ConfigRepo
from tests.sources.hanging import hanging_remote
from tests.web.serving import Running, running_server, wait_until

NAP = "type: task\nname: nap\ncommands:\n  - sleep 600\n"


def sources_file(path: Path, *entries: dict[str, Any]) -> Path:
    lines = ["sources:"]
    for entry in entries:
        first = True
        for key, value in entry.items():
            lines.append(f"  {'- ' if first else '  '}{key}: {value}")
            first = False
    path.write_text("\n".join(lines) + "\n")
    return path


def post(running: Running, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    with running.client(running.admin_token) as http:
        return http.post(path, json=body or {})


def run_status(running: Running, project: str, name: str) -> str | None:
    got = post(running, f"/api/project/{project}/runs/get", {"run_name": name})
    return str(got.json()["status"]) if got.status_code == 200 else None


def reconciles(running: Running, project: str) -> list[dict[str, Any]]:
    got = post(running, f"/api/project/{project}/reconciles/list")
    if got.status_code != 200:
        return []
    listed: list[dict[str, Any]] = got.json()
    return listed


def test_a_hung_fetch_never_delays_another_source(tmp_path: Path) -> None:
    repo = ConfigRepo(tmp_path / "team-b")
    repo.commit({"nap.dstack.yml": NAP}, "a task")
    with hanging_remote("team-a") as (url, accepted):
        config = sources_file(
            tmp_path / "sources.yml",
            {"name": "team-a", "repo": url, "project": "team-a"},
            {"name": "team-b", "repo": str(repo.path), "project": "team-b"},
        )
        with running_server(tmp_path, None, sources_config=config, fetch_interval=3600) as srv:
            wait_until(lambda: bool(accepted), 30, "team-a's fetch to connect")
            wait_until(lambda: run_status(srv, "team-b", "nap") == "running", 90, "nap running")
            hung = reconciles(srv, "team-a")
            assert [(r["status"], r["stage"]) for r in hung] == [("running", "fetch")]
            done = reconciles(srv, "team-b")
            assert done[0]["status"] == "succeeded", done[0]
            post(srv, "/api/project/team-b/runs/stop", {"runs_names": ["nap"], "abort": True})


def test_two_sources_for_one_project_stop_the_start(tmp_path: Path) -> None:
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "first", "repo": str(tmp_path / "a"), "project": "team-a"},
        {"name": "second", "repo": str(tmp_path / "b"), "project": "team-a"},
    )
    with pytest.raises(UsageError) as caught, running_server(tmp_path, None, sources_config=config):
        pass
    message = str(caught.value)
    assert f"{config}:7:14: sources[1].project: " in message, message
    assert "'first'" in message and "'second'" in message, message


def test_repo_flags_and_a_file_source_for_one_project_are_refused(tmp_path: Path) -> None:
    repo = ConfigRepo(tmp_path / "main-repo")
    repo.commit({"README.md": "x\n"}, "first")
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "other", "repo": str(repo.path), "project": "main"},
    )
    with (
        pytest.raises(UsageError) as caught,
        running_server(tmp_path, None, repo=str(repo.path), sources_config=config),
    ):
        pass
    message = str(caught.value)
    assert "'main'" in message and "'other'" in message, message


def test_a_sources_credentials_are_its_own(tmp_path: Path) -> None:
    """`credentials:` is the source's own: an `env:` token goes to git as a header (never
    in the URL), a `file:` key to ssh; a source without one gets no credentials at all
    (not the server's DOCKYARD_GIT_TOKEN)."""
    from reconciler.domain.sources import Source
    from reconciler.engine.sourceloops import source_location

    environ = {"TEAM_TOKEN": "tok-123", "DOCKYARD_GIT_TOKEN": "server-token"}
    https = Source(
        name="a",
        repo="https://git.example.com/a.git",
        project="a",
        credentials_ref="env:TEAM_TOKEN",
    )
    located = source_location(https, environ)
    assert located.token == "tok-123" and "tok-123" not in located.clone_url
    assert any("Authorization: Basic" in v for v in located.git_env().values())
    key = tmp_path / "key"
    key.write_text("not a real key\n")
    ssh = Source(name="b", repo="git@git.example.com:b.git", project="b",
                 credentials_ref=f"file:{key}", paths=("teams/b",))  # fmt: skip
    located = source_location(ssh, environ)
    assert located.ssh_key == key and located.subdir == "teams/b"
    assert f"-i {key}" in located.git_env()["GIT_SSH_COMMAND"]
    bare = source_location(Source(name="c", repo="https://git.example.com/c", project="c"), environ)
    assert bare.token is None and bare.ssh_key is None


def test_a_sources_fetch_interval_is_its_own(tmp_path: Path) -> None:
    """A source's `fetch_interval` times its own periodic fetch: the server's is an hour,
    the fast source's timer queues passes, the other source's does not."""
    fast, slow = ConfigRepo(tmp_path / "fast"), ConfigRepo(tmp_path / "slow")
    fast.commit({"README.md": "f\n"}, "f")
    slow.commit({"README.md": "s\n"}, "s")
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "fast", "repo": str(fast.path), "project": "fast", "fetch_interval": 0.5},
        {"name": "slow", "repo": str(slow.path), "project": "slow"},
    )
    with running_server(tmp_path, None, sources_config=config, fetch_interval=3600) as srv:

        def timed(project: str) -> int:
            rows = reconciles(srv, project)
            return sum(1 for r in rows if r["trigger"] == "timer")

        wait_until(lambda: timed("fast") >= 1, 30, "a timer pass of the fast source")
        assert timed("slow") == 0
