"""URL repos: the commands a job runs to fetch them, run here by POSIX sh and real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reconciler.core.cloning import clone_commands, clone_failure
from tests.pr.gitrepo import git


@pytest.fixture
def remote(tmp_path: Path) -> tuple[str, str]:
    """A repo with `main` (v2) and `dev`; returns (file:// URL, the v1 commit)."""
    repo = tmp_path / "remote"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    (repo / "README").write_text("v1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "README").write_text("v2\n")
    git(repo, "commit", "-q", "-am", "v2")
    git(repo, "checkout", "-q", "-b", "dev")
    (repo / "README").write_text("dev\n")
    git(repo, "commit", "-q", "-am", "dev")
    git(repo, "checkout", "-q", "main")
    return f"file://{repo}", first


def _run(workdir: Path, repos: list[dict[str, str]]) -> subprocess.CompletedProcess[str]:
    script = " && ".join([*clone_commands({"repos": repos}), "echo fetched"])
    workdir.mkdir(exist_ok=True)
    return subprocess.run(["sh", "-c", script], cwd=workdir, capture_output=True, text=True)


def test_head_branch_and_hash_are_fetched_beside_uploaded_files(
    tmp_path: Path, remote: tuple[str, str]
) -> None:
    url, first = remote
    work = tmp_path / "job"
    work.mkdir()
    (work / "uploaded.txt").write_text("from files\n")  # the job dir is not empty
    done = _run(work, [{"url": url}])
    assert done.returncode == 0, done.stderr
    assert (work / "README").read_text() == "v2\n" and (work / "uploaded.txt").exists()
    assert _run(tmp_path / "b", [{"url": url, "branch": "dev", "path": "src"}]).returncode == 0
    assert (tmp_path / "b" / "src" / "README").read_text() == "dev\n"
    assert git(tmp_path / "b" / "src", "rev-parse", "--abbrev-ref", "HEAD") == "dev"
    assert _run(tmp_path / "c", [{"url": url, "hash": first}]).returncode == 0
    assert (tmp_path / "c" / "README").read_text() == "v1\n"


def test_if_exists_error_fails_and_skip_keeps(tmp_path: Path, remote: tuple[str, str]) -> None:
    url, _ = remote
    work = tmp_path / "job"
    work.mkdir()
    assert _run(work, [{"url": url}]).returncode == 0
    again = _run(work, [{"url": url}])
    assert again.returncode != 0 and "already a git repo" in again.stderr
    kept = _run(work, [{"url": url, "if_exists": "skip"}])
    assert kept.returncode == 0 and "fetched" in kept.stdout


def test_a_failed_fetch_ends_with_gits_error_as_the_jobs_message(tmp_path: Path) -> None:
    """The line the jobs worker makes the status message: the repo, the target and git's
    first `fatal:` line (not only an exit status); a token in the URL is not shown."""
    missing = tmp_path / "nothing-here.git"
    done = _run(tmp_path / "job", [{"url": f"file://{missing}", "path": "src"}])
    assert done.returncode != 0 and "fetched" not in done.stdout
    message = clone_failure(done.stderr.encode())
    assert message == (
        f"repos: fetching file://{missing} into src failed: "
        f"fatal: '{missing}' does not appear to be a git repository"
    ), done.stderr
    assert clone_failure(b"dockyard: repos: x\nthen the job printed more\n") is None
    secret = _run(tmp_path / "tok", [{"url": "https://user:s3cret@127.0.0.1:9/r.git"}])
    shown = clone_failure(secret.stderr.encode()) or ""
    assert "user:***@127.0.0.1:9" in shown and "s3cret" not in shown, secret.stderr
