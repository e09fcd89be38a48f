"""A `repos:` entry's `url`, `branch` and `hash` never reach git as an option.

The attack: a member's config names `branch: --upload-pack=touch <file>` (or puts it in
`hash:` or `url:`); handed to `git fetch` as a bare argument, git runs the command. The
schema refuses such values with the field and why, and the commands the job runs pass
them after `--` anyway, so a spec written before the schema refused them (or an API
client that skips it) only gets git's own "invalid refspec". Run with real git.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reconciler.core.cloning import CLONE_FAILED_MARK, clone_commands
from schemas import parse_config
from schemas.problems import ConfigError
from tests.pr.gitrepo import git


@pytest.fixture
def remote(tmp_path: Path) -> str:
    repo = tmp_path / "remote"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / "README").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "x")
    return f"file://{repo}"


@pytest.mark.parametrize("field", ["branch", "hash", "url"])
def test_the_schema_refuses_a_value_git_would_read_as_an_option(tmp_path: Path, field: str) -> None:
    pwned = tmp_path / "pwned"
    repo = {"url": "https://example.com/r.git", field: f"--upload-pack=touch {pwned}"}
    text = f"type: task\ncommands: [true]\nrepos:\n  - {repo}\n"
    with pytest.raises(ConfigError) as refused:
        parse_config(text, "jobs/x.dstack.yml")
    message = str(refused.value)
    assert f"repos[0].{field}" in message or f"repos.0.{field}" in message, message
    assert "starts with `-`" in message and "option" in message


def test_a_hash_must_be_hex() -> None:
    text = "type: task\ncommands: [true]\nrepos:\n  - {url: 'https://e.com/r', hash: 'main'}\n"
    with pytest.raises(ConfigError, match="not a commit hash"):
        parse_config(text, "x.dstack.yml")


@pytest.mark.parametrize("field", ["branch", "hash", "url"])
def test_the_job_passes_them_after_double_dash(tmp_path: Path, remote: str, field: str) -> None:
    """Bypassing the schema: the job's own commands still run nothing the value names."""
    pwned = tmp_path / "pwned"
    repo = {"url": remote, field: f"--upload-pack=touch {pwned}"}
    work = tmp_path / "job"
    work.mkdir()
    script = " && ".join([*clone_commands({"repos": [repo]}), "echo reached"])
    done = subprocess.run(["sh", "-c", script], cwd=work, capture_output=True, text=True)
    assert not pwned.exists(), "git ran the value as a command"
    assert done.returncode != 0 and "reached" not in done.stdout
    last = done.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith(CLONE_FAILED_MARK) and "failed: fatal:" in last, done.stderr
