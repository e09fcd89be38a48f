"""A source's runs get their `repos`/`files` from that source's own repository.

A real server following `--repo` (one repo) and a sources-file source (another repo):
the source's task brings a file of its own commit, which is in its own mirror only (with
one archive builder over the `--repo` mirror, the job failed: the commit is not there).
"""

from __future__ import annotations

import base64
from pathlib import Path

from tests.engine.fixtures import ConfigRepo
from tests.sources.test_source_loops import post, run_status, sources_file
from tests.web.serving import running_server, wait_until

TASK = """type: task
name: show
files: ["params.txt:conf/params.txt"]
commands:
  - cat conf/params.txt
"""


def test_a_sources_run_brings_files_of_its_own_commit(tmp_path: Path) -> None:
    main = ConfigRepo(tmp_path / "main-repo")
    main.commit({"README.md": "main\n"}, "first")
    team = ConfigRepo(tmp_path / "team-repo")
    team.commit({"params.txt": "lr=0.3 from team-f\n", "show.dstack.yml": TASK}, "a task")
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "team-f", "repo": str(team.path), "project": "filer"},
    )
    with running_server(
        tmp_path, None, repo=str(main.path), sources_config=config, fetch_interval=3600
    ) as server:
        wait_until(
            lambda: run_status(server, "filer", "show") in ("done", "failed"), 150, "show ends"
        )
        got = post(server, "/api/project/filer/logs/poll", {"run_name": "show"})
        log = base64.b64decode(got.json()["data"]).decode()
        assert run_status(server, "filer", "show") == "done", log
        assert "lr=0.3 from team-f" in log, log
