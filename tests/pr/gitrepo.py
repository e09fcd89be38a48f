"""A real git config repo for the PR tests: `make_repo(path, files)` commits files on main."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, timeout=30
    )
    return done.stdout.strip()


def commit_files(repo: Path, files: Mapping[str, bytes], message: str) -> str:
    """Replace the tree with `files`, commit, return the SHA."""
    for old in git(repo, "ls-files").splitlines():
        (repo / old).unlink()
    for path, text in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_repo(path: Path, files: Mapping[str, bytes]) -> tuple[Path, str]:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "test@example.com")
    git(path, "config", "user.name", "Test")
    return path, commit_files(path, files, "base")
