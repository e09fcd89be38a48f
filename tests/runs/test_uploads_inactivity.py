"""`repos`/`files` from the config repo and dev environments' `inactivity_duration` (pure
core), the agent body they render to, and the git archives built from a real repo."""

from __future__ import annotations

import base64
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from agent.protocol import JobSpec
from reconciler.adapters.gitsource.archives import GitArchives
from reconciler.core.cloning import clone_commands
from reconciler.core.inactivity import Activity, inactivity_limit, inactivity_verdict
from reconciler.core.jobspecs import ClusterInfo, JobSlot, render_agent_job
from reconciler.core.uploads import Upload, git_origin, repo_dir, uploads_of
from reconciler.errors import PermanentError
from schemas import parse_config


def _spec(text: str) -> dict[str, object]:
    return parse_config(text, "jobs/x.dstack.yml").normalized()


def test_git_origin_is_parsed_and_other_origins_are_none() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert git_origin(f"git:jobs/a@b.dstack.yml@{sha}") == ("jobs/a@b.dstack.yml", sha)
    assert git_origin("cli:alice") is None
    assert git_origin(None) is None


def test_local_paths_are_relative_to_the_config_files_directory() -> None:
    spec = _spec(
        "type: task\ncommands: [x]\nrepos: ['..:/repo']\n"
        "files: ['data/a.txt', 'cfg:/etc/app', {local_path: ../README.md, path: r.md}]\n"
    )
    uploads = uploads_of(spec, "jobs/x.dstack.yml")
    assert uploads.items == (
        Upload("repo", "", "/repo"),
        Upload("file", "jobs/data/a.txt", "data/a.txt"),
        Upload("file", "jobs/cfg", "/etc/app"),
        Upload("file", "README.md", "r.md"),
    )
    assert uploads.skipped == ()
    assert uploads_of(_spec("type: task\ncommands: [x]\nrepos: ['.']\n"), "x.dstack.yml").items == (
        Upload("repo", "", "."),
    )


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        ("['../../etc/passwd:p']", "leads out of the config repo"),
        ("['/etc/passwd:p']", "not a path of the config repo"),
        ("['~/.ssh/id_rsa:k']", "not a path of the config repo"),
    ],
)
def test_paths_outside_the_repo_are_refused(files: str, needle: str) -> None:
    spec = _spec(f"type: task\ncommands: [x]\nfiles: {files}\n")
    with pytest.raises(PermanentError, match=needle):
        uploads_of(spec, "jobs/x.dstack.yml")


def test_url_repos_are_fetched_by_the_job_not_uploaded() -> None:
    spec = _spec("type: task\ncommands: [x]\nrepos: ['https://github.com/o/r.git']\n")
    uploads = uploads_of(spec, "x.dstack.yml")
    assert uploads.items == () and uploads.skipped == ()
    (command,) = clone_commands(spec)
    assert "fetch -q --depth 1 -- origin HEAD" in command
    assert "https://github.com/o/r.git" in command


def test_repo_dir_follows_the_repos_path() -> None:
    assert repo_dir({"repos": [{"local_path": ".", "path": "/repo"}]}, "/w") == "/repo"
    assert repo_dir({"repos": [{"local_path": ".", "path": "src"}]}, ".") == "src"
    assert repo_dir({}, "/workflow") == "/workflow"


def test_rendered_body_has_archives_path_env_and_connection_watch() -> None:
    spec = _spec("type: dev-environment\nide: vscode\ninactivity_duration: 30m\nrepos: ['.:sub']\n")
    body = render_agent_job(
        job_id="j1",
        run_name="dev",
        slot=JobSlot(0, 0, None, 1, spec),
        gpus=[],
        cluster=ClusterInfo((), 0),
        secrets={},
        executor="process",
        working_dir=None,
        labels={},
        archives=[{"path": "sub", "data": "eA=="}],
    )
    assert body["archives"] == [{"path": "sub", "data": "eA=="}]
    assert body["path_env"] == {
        "DSTACK_WORKING_DIR": ".",
        "DSTACK_REPO_DIR": "sub",
        "DSTACK_MPI_HOSTFILE": ".dstack/mpi-hostfile",
    }
    assert "DSTACK_WORKING_DIR" not in body["env"] and body["watch_connections"] is True
    JobSpec.model_validate(body)  # the agent accepts it


def test_inactivity_limit_only_for_dev_environments_with_a_duration() -> None:
    assert inactivity_limit(_spec("type: dev-environment\nide: vscode\ninactivity_duration: 2h\n"))
    assert inactivity_limit(_spec("type: dev-environment\nide: vscode\n")) is None
    off = _spec("type: dev-environment\nide: vscode\ninactivity_duration: off\n")
    assert inactivity_limit(off) is None
    assert inactivity_limit({"type": "task", "inactivity_duration": 60}) is None


def test_inactivity_verdict_with_an_injected_clock() -> None:
    started = 1000.0

    def verdict(activity: Activity, now: float) -> tuple[bool, float | None]:
        result = inactivity_verdict(60, activity, running_since=started, now=now)
        return result.exceeded, result.idle_seconds

    assert verdict(Activity(None), now=5000.0) == (False, None)  # the agent cannot tell
    assert verdict(Activity(1), now=5000.0) == (False, 0.0)  # someone is connected
    assert verdict(Activity(0), now=1059.0) == (False, 59.0)  # since it started running
    assert verdict(Activity(0), now=1060.0) == (True, 60.0)
    assert verdict(Activity(0, last_connection_at=1050.0), now=1100.0) == (False, 50.0)
    assert verdict(Activity(0, last_connection_at=1050.0), now=1110.0) == (True, 60.0)
    # the agent's own count wins (no clock skew between hosts)
    assert verdict(Activity(0, 1050.0, no_connections_secs=61.0), now=1051.0) == (True, 61.0)


def _members(archive: dict[str, str]) -> dict[str, bytes]:
    raw = base64.b64decode(archive["data"])
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def test_git_archives_read_objects_at_the_commit_and_cache(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    (repo / "jobs").mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (repo / "jobs" / "run.sh").write_text("echo v1\n")
    (repo / "jobs" / "run.sh").chmod(0o755)
    git("add", "-A")
    git("commit", "-q", "-m", "v1")
    first = git("rev-parse", "HEAD")
    (repo / "jobs" / "run.sh").write_text("echo v2\n")  # not committed
    calls: list[int] = []
    archives = GitArchives(lambda: calls.append(1) or repo / ".git")  # type: ignore[func-returns-value]
    tree = archives.build(first, Upload("repo", "", "."))
    assert tree["path"] == "." and _members(tree) == {"jobs/run.sh": b"echo v1\n"}
    single = archives.build(first, Upload("file", "jobs/run.sh", "/opt/bin/go.sh"))
    assert single["path"] == "/opt/bin" and _members(single) == {"go.sh": b"echo v1\n"}
    raw = base64.b64decode(single["data"])
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        assert tar.getmember("go.sh").mode == 0o755
    before = len(calls)
    assert archives.build(first, Upload("repo", "", ".")) == tree  # cached: no git call
    assert len(calls) == before
    with pytest.raises(PermanentError, match="cannot read it from the config repo"):
        archives.build(first, Upload("file", "jobs/missing.txt", "m.txt"))
    with pytest.raises(PermanentError, match="not a directory"):
        archives.build(first, Upload("repo", "jobs/run.sh", "."))
