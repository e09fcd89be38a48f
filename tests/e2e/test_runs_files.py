"""`repos` and `files` from the config repo at the run's commit, on the real local agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.protocol import MAX_ARCHIVES_BYTES
from reconciler.adapters.db.models import Run
from reconciler.adapters.gitsource.archives import GitArchives
from reconciler.core.uploads import Upload
from tests.e2e.runs_harness import AgentEnv, Harness, close_harness, make_harness
from tests.pr.gitrepo import git

pytestmark = pytest.mark.timeout(120)

TASK = """
type: task
name: {name}
repos: [".."]
files:
  - data/input.txt:copied/input.txt
  - local_path: data
    path: /tmp/{name}-data
commands:
  - cat README.md copied/input.txt /tmp/{name}-data/input.txt
  - echo "repo=$DSTACK_REPO_DIR work=$DSTACK_WORKING_DIR"
  - test "$DSTACK_REPO_DIR" = "$(pwd)"
"""


@pytest.fixture
def config_repo(tmp_path: Path) -> tuple[Path, str]:
    """A config repo whose task sits in `jobs/`; returns (repo, first commit)."""
    repo = tmp_path / "configs"
    (repo / "jobs" / "data").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / "README.md").write_text("readme at the root\n")
    (repo / "jobs" / "data" / "input.txt").write_text("input v1\n")
    (repo / "jobs" / "train.dstack.yml").write_text(TASK.format(name="train"))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "jobs" / "data" / "input.txt").write_text("input v2\n")
    git(repo, "commit", "-q", "-am", "v2")
    (repo / "jobs" / "data" / "input.txt").write_text("uncommitted\n")  # never uploaded
    return repo, first


@pytest.fixture
async def hg(
    tmp_path: Path, agent_env: AgentEnv, config_repo: tuple[Path, str]
) -> AsyncIterator[Harness]:
    archives = GitArchives(lambda: config_repo[0] / ".git")
    harness = await make_harness(tmp_path, agent_env, archives=archives.build)
    yield harness
    await close_harness(harness)


def _status(h: Harness, run: Run) -> str:
    return h.run(run.id).status


async def test_repo_and_files_come_from_the_runs_commit(
    hg: Harness, config_repo: tuple[Path, str]
) -> None:
    _, first = config_repo
    run = hg.submit(TASK.format(name="train"), git=("jobs/train.dstack.yml", first))
    await hg.until(lambda: _status(hg, run) in ("done", "failed"))
    text = hg.log_text(run)
    assert _status(hg, run) == "done", text + hg.describe()
    assert "readme at the root\ninput v1\ninput v1\n" in text  # v1: the run's commit
    assert "v2" not in text and "uncommitted" not in text
    [job] = hg.jobs_of(run.id)
    [line] = [line for line in text.splitlines() if line.startswith("repo=")]
    repo_dir = line.removeprefix("repo=").split()[0]
    assert repo_dir.endswith(f"/jobs/{job.agent_job_id}/work")  # the process job's own dir
    assert line == f"repo={repo_dir} work={repo_dir}"


async def test_a_path_out_of_the_repo_fails_the_job_saying_why(
    hg: Harness, config_repo: tuple[Path, str]
) -> None:
    _, first = config_repo
    text = "type: task\nname: out\nfiles: ['../../etc/passwd:p']\ncommands: ['true']\n"
    run = hg.submit(text, git=("jobs/out.dstack.yml", first))
    await hg.until(lambda: _status(hg, run) == "failed")
    [job] = hg.jobs_of(run.id)
    assert "leads out of the config repo" in job.status_message


async def test_a_run_without_git_origin_runs_without_its_files(h: Harness) -> None:
    run = h.submit("type: task\nname: cli\nrepos: ['.']\ncommands: ['ls -A | wc -l']\n")
    await h.until(lambda: _status(h, run) == "done")
    [job] = h.jobs_of(run.id)
    events = h.store.list_events(target_id=job.id)
    assert any("repos/files not uploaded" in event.message for event in events), events
    assert h.log_text(run).strip() == "0"


async def test_too_much_to_upload_fails_the_job_before_the_agent(
    tmp_path: Path, agent_env: AgentEnv
) -> None:
    def huge(commit: str, upload: Upload) -> dict[str, str]:
        return {"path": upload.target, "data": "A" * (MAX_ARCHIVES_BYTES + 4)}

    h = await make_harness(tmp_path, agent_env, archives=huge)
    try:
        text = "type: task\nname: big\nrepos: ['.']\ncommands: ['true']\n"
        run = h.submit(text, git=("big.dstack.yml", "0" * 40))
        await h.until(lambda: _status(h, run) == "failed")
        [job] = h.jobs_of(run.id)
        assert "more than the 32 MiB a job may bring" in job.status_message
    finally:
        await close_harness(h)


async def test_a_url_repo_is_fetched_by_the_job(h: Harness, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    git(remote, "init", "-q", "-b", "main")
    git(remote, "config", "user.email", "t@example.com")
    git(remote, "config", "user.name", "t")
    (remote / "README").write_text("from the url repo\n")
    git(remote, "add", "-A")
    git(remote, "commit", "-q", "-m", "x")
    text = (
        f"type: task\nname: fetch\nrepos:\n  - url: file://{remote}\n    path: src\n"
        "commands: ['cat src/README']\n"
    )
    run = h.submit(text)
    await h.until(lambda: _status(h, run) in ("done", "failed"))
    assert _status(h, run) == "done", h.log_text(run) + h.describe()
    assert h.log_text(run).strip() == "from the url repo"


async def test_a_failed_clone_fails_the_job_with_gits_error(h: Harness, tmp_path: Path) -> None:
    """A repo URL that does not exist: the job fails and its status message is git's
    error (not just an exit status); the log keeps git's whole output."""
    missing = tmp_path / "no-such-repo.git"
    text = (
        f"type: task\nname: noclone\nrepos:\n  - url: file://{missing}\n    path: src\n"
        "commands: ['echo never']\n"
    )
    run = h.submit(text)
    await h.until(lambda: _status(h, run) in ("done", "failed"))
    assert _status(h, run) == "failed", h.describe()
    (job,) = h.jobs_of(run.id)
    message = job.status_message or ""
    assert message.startswith(f"repos: fetching file://{missing} into src failed: fatal:"), message
    assert "does not appear to be a git repository" in message, message
    assert "never" not in h.log_text(run)
