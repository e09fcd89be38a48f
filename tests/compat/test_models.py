"""Our answers validate against dstack 0.22.5's own pydantic models (the installed package is
the contract), errors come in dstack's shape, and a Git-owned run is refused to dstack's CLI
with the message `dockyard apply` gets.

One server watches a config repo that holds a task (Git-owned once the first reconcile
applies it); the answers are read with dstack's `APIClient`, which validates each one with
`validate_extra_ignore` exactly as the CLI does.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.conftest import Dstack, _real, short_home
from tests.web.serving import running_server, wait_until

pytestmark = pytest.mark.slow

OWNED = "type: task\nname: gitowned\ncommands:\n  - echo from git\n"


def _config_repo(path: Path) -> Path:
    path.mkdir()
    (path / "owned.dstack.yml").write_text(OWNED)
    (path / "fleet.dstack.yml").write_text("type: fleet\nname: local\nnodes: 1\n")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "."],
        ["-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", "c"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True)
    return path


@pytest.fixture(scope="module")
def gitops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dstack]:
    from agent.local import stop_local_agent

    tmp = tmp_path_factory.mktemp("gitops")
    repo = _config_repo(tmp / "configs")
    workdir = tmp / "work"
    workdir.mkdir()
    try:
        with short_home(tmp / "home") as home, running_server(tmp, _real, repo=str(repo)) as server:
            client = Dstack(server, home, workdir)
            url, token = server.url, server.admin_token
            client.ok("project", "add", "--name", "main", "--url", url, "--token", token, "-y")
            client.wait_status("gitowned", "done", timeout=180)
            yield client
    finally:
        stop_local_agent(tmp / "data")


def _api(dstack: Dstack) -> Any:
    from dstack.api.server import APIClient

    return APIClient(dstack.server.url, dstack.server.admin_token)


def test_answers_validate_against_dstacks_models(gitops: Dstack) -> None:
    from dstack._internal.core.models.common import validate_extra_ignore
    from dstack._internal.core.models.instances import Instance

    api = _api(gitops)
    project = api.projects.get("main")
    assert project.owner.username == "admin" and project.members[0].permissions
    assert api.users.get_my_user().creds.token == gitops.server.admin_token
    assert api.users.get_user("admin").active
    assert api.users.list()[0].permissions.can_create_projects
    runs = api.runs.list(project_name="main", repo_id=None, include_jobs=True)
    (run,) = [r for r in runs if r.run_spec.run_name == "gitowned"]
    assert run.user == "gitops"
    assert api.runs.get("main", run_id=run.id).id == run.id
    jpd = run.latest_job_submission.job_provisioning_data
    assert jpd.backend.value == "remote" and jpd.instance_type.resources.cpus > 0
    assert run.jobs[0].job_spec.commands == ["echo from git"]
    (fleet,) = api.fleets.list("main")
    assert api.fleets.get("main", fleet_id=fleet.id).spec.configuration.name == "local"
    assert fleet.instances[0].project_name == "main"
    with gitops.server.client(gitops.server.admin_token) as http:
        raw = http.post("/api/instances/list", json={"project_names": ["main"]}).json()
    (instance,) = validate_extra_ignore(list[Instance], raw)
    assert instance.fleet_name == "local" and instance.backend.value == "remote"
    events = api.events.list()
    assert any(t.name == "gitowned" for e in events for t in e.targets)
    assert api.secrets.list("main") == []
    assert api.volumes.list("main") == []
    assert api.gateways.list("main") == []
    metrics = api.metrics.get_job_metrics("main", "gitowned")
    assert metrics.metrics == []


def test_logs_poll_pages_by_next_token(gitops: Dstack) -> None:
    from dstack._internal.server.schemas.logs import PollLogsRequest

    api = _api(gitops)
    run = api.runs.get("main", run_name="gitowned")
    body = PollLogsRequest(
        run_name="gitowned",
        job_submission_id=run.latest_job_submission.id,
        start_time=None,
        end_time=None,
        descending=False,
        limit=1000,
    )
    logs = api.logs.poll("main", body)
    assert logs.next_token is None
    assert b"".join(base64.b64decode(e.message) for e in logs.logs) == b"from git\n"


def test_errors_are_dstacks_server_client_errors(gitops: Dstack) -> None:
    from dstack._internal.core.errors import ResourceNotExistsError

    api = _api(gitops)
    with pytest.raises(ResourceNotExistsError, match="run nope not found"):
        api.runs.get("main", run_name="nope")
    with pytest.raises(ResourceNotExistsError):
        api.fleets.get("main", name="nope")
    with pytest.raises(ResourceNotExistsError):
        api.projects.get("nope")


def test_a_git_owned_run_is_refused_with_dockyards_message(gitops: Dstack) -> None:
    gitops.write("mine.dstack.yml", OWNED.replace("from git", "from me"))
    refused = gitops("apply", "-f", "mine.dstack.yml", "-y", "-d")
    assert refused.returncode == 1
    out = " ".join((refused.stdout + refused.stderr).split())
    assert "task 'gitowned' is managed by Git (owned.dstack.yml): change it there" in out
    wait_until(lambda: gitops.run_status("gitowned") == "done", what="the Git-owned run")


def test_a_git_owned_run_may_be_stopped_with_a_warning_but_not_deleted(gitops: Dstack) -> None:
    """Stopping is an operation (allowed, with what the next reconcile does); deleting the
    record would make GitOps run it again as new, so it is refused with dockyard's message,
    as deleting a Git-owned fleet is."""
    gitops.write("mine.dstack.yml", OWNED)
    refused = gitops("delete", "-f", "mine.dstack.yml", "-y")
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    out = " ".join((refused.stdout + refused.stderr).split())
    assert "task 'gitowned' is managed by Git (owned.dstack.yml): remove it there" in out
    assert gitops.run_status("gitowned") == "done"
    stopped = gitops("stop", "gitowned", "-y")
    assert stopped.returncode == 0, (stopped.stdout, stopped.stderr)
    with gitops.server.client(gitops.server.admin_token) as http:
        answer = http.post("/api/project/main/runs/stop", json={"runs_names": ["gitowned"]})
    assert answer.status_code == 200
    (warning,) = answer.json()["warnings"]
    assert "managed by Git (owned.dstack.yml): it stays stopped until its spec changes" in warning
    fleet = gitops("fleet", "delete", "local", "-y")
    assert fleet.returncode == 1, (fleet.stdout, fleet.stderr)
    said = " ".join((fleet.stdout + fleet.stderr).split())
    assert "fleet 'local' is managed by Git (fleet.dstack.yml): remove it there" in said
