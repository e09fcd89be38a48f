"""A suspended source fetches and plans, applies nothing, and says so; resumed, it applies.

The real server and controller with a sources file declaring a suspended source whose
commit has a task: its reconcile ends `aborted` with "suspended: …" and the plan recorded
(the task's create), no run is made, `dockyard source list` shows it suspended; resuming
it through the API queues a pass that applies the task.
"""

from __future__ import annotations

from pathlib import Path

from tests.engine.fixtures import ConfigRepo
from tests.sources.test_source_api import dockyard
from tests.sources.test_source_loops import post, reconciles, run_status, sources_file
from tests.web.serving import running_server, wait_until

HELLO = "type: task\nname: hello\ncommands:\n  - echo hi\n"


def test_a_suspended_source_plans_and_applies_nothing_until_resumed(tmp_path: Path) -> None:
    repo = ConfigRepo(tmp_path / "repo")
    repo.commit({"hello.dstack.yml": HELLO}, "a task")
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "team-s", "repo": str(repo.path), "project": "sus", "suspended": "true"},
    )
    with running_server(tmp_path, None, sources_config=config, fetch_interval=3600) as server:
        wait_until(
            lambda: any(r["status"] == "aborted" for r in reconciles(server, "sus")),
            60,
            "the suspended source's first pass",
        )
        (held,) = reconciles(server, "sus")
        assert held["error"].startswith("suspended: source 'team-s' is suspended"), held
        assert "dockyard source resume team-s" in held["error"]
        assert ("create", "hello") in [(a["action"], a["name"]) for a in held["plan"]["actions"]]
        assert run_status(server, "sus", "hello") is None
        code, text = dockyard(server, "source", "list")
        assert code == 0 and "suspended" in text, text

        assert post(server, "/api/sources/resume", {"name": "team-s"}).status_code == 200
        wait_until(
            lambda: any(r["status"] == "succeeded" for r in reconciles(server, "sus")),
            60,
            "the pass after resume",
        )
        assert run_status(server, "sus", "hello") is not None
        code, text = dockyard(server, "source", "list")
        assert "following" in text, text
