"""The mirror clone of a config repo in the data dir, and `fetch` (shell: runs git).

A repo given as a local path is read in place (commits are immutable, and a detached
`HEAD` of a CI checkout is then resolvable); `file://`, https and SSH URLs are mirrored.

`GitMirror.fetch()` clones the remote as a bare mirror on first use and fetches it after
that, then returns the head commit of the configured branch. git's failures become the
errors of `reconciler.adapters.gitsource.errors`: a refused login, an unreachable remote,
an unknown branch. A mirror that git reports as broken is deleted and cloned again, once;
if that fails too, `CorruptMirrorError` says so.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.adapters.gitsource.errors import (
    AuthRefusedError,
    CorruptMirrorError,
    UnknownBranchError,
    UnknownRefError,
    UnreachableRemoteError,
)
from reconciler.adapters.gitsource.remotes import RepoLocation
from reconciler.errors import DockyardError

if TYPE_CHECKING:  # GitPython is imported where git runs: a server's start needs none of it
    import git

_FEW_BLOBS = 16
_AUTH_MARKERS = (
    "authentication failed",
    "could not read username",
    "could not read password",
    "permission denied",
    "403",
    "401",
    "access denied",
    "invalid username or password",
    "terminal prompts disabled",
)
_UNREACHABLE_MARKERS = (
    "could not resolve host",
    "connection refused",
    "connection timed out",
    "timed out",
    "network is unreachable",
    "does not appear to be a git repository",
    "repository not found",
    "not found",
    "unable to access",
    "could not read from remote repository",
    "no route to host",
)
_CORRUPT_MARKERS = (
    "not a git repository",
    "bad object",
    "corrupt",
    "unable to read",
    "bad config",
    "object file",
    "missing object",
    "broken",
    "invalid object",
    "fatal: bad",
)


class GitMirror:
    """A bare mirror of one remote under `root`, fetched on demand."""

    def __init__(self, location: RepoLocation, *, root: Path) -> None:
        self.location = location
        self.local = location.scheme == "local"
        self.path = Path(location.clone_url) if self.local else root / location.mirror_name
        self._repo: git.Repo | None = None

    @property
    def repo(self) -> git.Repo:
        """The open mirror; `fetch()` first."""
        if self._repo is None:
            self._repo = self._open_or_clone(fetch=False)
        return self._repo

    def fetch(self) -> str:
        """Update the mirror from the remote; return the branch's head commit SHA."""
        self._repo = self._open_or_clone(fetch=True)
        return self.branch_head()

    def branch_head(self) -> str:
        """The branch's head commit, read from the ref files (no git process)."""
        import git

        ref = f"refs/heads/{self.location.branch}"
        try:
            return str(git.Reference(self.repo, ref).commit.hexsha)
        except (ValueError, OSError, git.BadName):
            branches = ", ".join(sorted(h.name for h in self.repo.heads)[:20]) or "none"
            raise UnknownBranchError(
                f"branch {self.location.branch!r} does not exist in {self._where()} "
                f"(branches: {branches}); pass an existing branch with --branch"
            ) from None

    def resolve(self, ref: str) -> str:
        """The commit SHA a ref names: a SHA, a branch, a tag or an expression (`HEAD~1`)."""
        import git

        candidates = [ref, f"refs/heads/{ref}", f"refs/tags/{ref}"]
        for candidate in candidates:
            try:
                return str(
                    self.repo.git.rev_parse("--verify", "--quiet", f"{candidate}^{{commit}}")
                )
            except git.GitCommandError:
                continue
        raise UnknownRefError(
            f"{ref!r} names no commit of {self._where()}: give a commit SHA, a branch, a tag "
            "or an expression like HEAD~1"
        )

    def blob_sizes(self, shas: Sequence[str]) -> dict[str, int]:
        """The sizes of blobs, from their object headers (nothing of their content is
        read): a few through git's persistent `cat-file --batch-check`, many in one run."""
        if len(shas) <= _FEW_BLOBS:
            return {sha: int(self.repo.odb.info(bytes.fromhex(sha)).size) for sha in shas}
        command = ["git", "--git-dir", str(self.repo.git_dir), "cat-file", "--batch-check"]
        done = subprocess.run(
            command, input="".join(f"{sha}\n" for sha in shas).encode(), capture_output=True,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            detail = done.stderr.decode(errors="replace").strip()
            raise DockyardError(f"reading blobs of {self._where()} failed: {detail}")
        sizes: dict[str, int] = {}
        for sha, line in zip(shas, done.stdout.decode().splitlines(), strict=False):
            header = line.split()
            if len(header) != 3:  # "<sha> missing"
                raise DockyardError(f"blob {sha} is missing from {self._where()}")
            sizes[sha] = int(header[2])
        return sizes

    def read_blobs(self, shas: Sequence[str]) -> dict[str, bytes]:
        """The contents of blobs: a few through git's persistent `cat-file` (no new
        process per commit), many from one `git cat-file --batch` run."""
        if len(shas) <= _FEW_BLOBS:
            return {sha: bytes(self.repo.odb.stream(bytes.fromhex(sha)).read()) for sha in shas}
        command = ["git", "--git-dir", str(self.repo.git_dir), "cat-file", "--batch"]
        done = subprocess.run(
            command, input="".join(f"{sha}\n" for sha in shas).encode(), capture_output=True,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            detail = done.stderr.decode(errors="replace").strip()
            raise DockyardError(f"reading blobs of {self._where()} failed: {detail}")
        return _split_batch(done.stdout, shas, self._where())

    def _open_or_clone(self, *, fetch: bool) -> git.Repo:
        if self.local:
            return self._open_local()
        try:
            return self._open_and_fetch(fetch=fetch)
        except _MirrorBrokenError as exc:
            shutil.rmtree(self.path, ignore_errors=True)
            if self.path.exists():
                raise CorruptMirrorError(
                    f"the mirror of {self._where()} at {self.path} is corrupt ({exc}) and "
                    "cannot be removed; delete it by hand"
                ) from None
        try:
            return self._open_and_fetch(fetch=True)
        except _MirrorBrokenError as exc:
            raise CorruptMirrorError(
                f"the mirror of {self._where()} at {self.path} is corrupt and re-cloning it "
                f"failed: {exc}; delete the directory and try again"
            ) from None

    def _open_local(self) -> git.Repo:
        """A repo on this machine is read in place: commits are immutable, no mirror needed."""
        import git

        try:
            return git.Repo(self.path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise UnreachableRemoteError(
                f"{self._where()} is not a git repository (no such path or no .git)", delay=30.0
            ) from None

    def _open_and_fetch(self, *, fetch: bool) -> git.Repo:
        import git

        env = self.location.git_env()
        if not self.path.exists():
            return self._clone(env)
        try:
            repo = git.Repo(self.path)
            if fetch:
                repo.git.update_environment(**env)
                repo.git.fetch("--prune", "--force", "origin")
            else:
                repo.git.rev_parse("--git-dir")
            return repo
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise _MirrorBrokenError(type(exc).__name__) from exc
        except git.GitCommandError as exc:
            raise self._classify(exc, corrupt_possible=True) from exc

    def _clone(self, env: dict[str, str]) -> git.Repo:
        import git

        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            repo = git.Repo.clone_from(self.location.clone_url, self.path, mirror=True, env=env)
        except git.GitCommandError as exc:
            shutil.rmtree(self.path, ignore_errors=True)
            raise self._classify(exc, corrupt_possible=False) from exc
        repo.git.update_environment(**env)
        return repo

    def _classify(self, exc: git.GitCommandError, *, corrupt_possible: bool) -> Exception:
        stderr = self.location.scrub(str(exc.stderr or "")).strip()
        detail = _detail(stderr) or f"git exited {exc.status}"
        low = stderr.lower()
        where = self._where()
        if corrupt_possible and any(m in low for m in _CORRUPT_MARKERS):
            return _MirrorBrokenError(detail)
        if any(m in low for m in _AUTH_MARKERS):
            hint = self._auth_hint()
            return AuthRefusedError(f"{where} refused our credentials ({detail}); {hint}")
        if any(m in low for m in _UNREACHABLE_MARKERS):
            return UnreachableRemoteError(f"cannot reach {where}: {detail}", delay=30.0)
        return DockyardError(f"git failed for {where}: {detail}")

    def _auth_hint(self) -> str:
        if self.location.scheme.startswith("http"):
            if self.location.token:
                return "check that the token is valid and may read the repo"
            return "set a token in $DOCKYARD_GIT_TOKEN (or the variable named by --token-env)"
        if self.location.scheme == "ssh":
            return "check that the SSH key (--ssh-key) is authorized for the repo"
        return "check the credentials"

    def _where(self) -> str:
        return f"the config repo {self.location.scrub(self.location.url)}"


def _split_batch(out: bytes, shas: Sequence[str], where: str) -> dict[str, bytes]:
    """Parse `cat-file --batch` output: `<sha> <type> <size>\\n<content>\\n` per object."""
    blobs: dict[str, bytes] = {}
    offset = 0
    for sha in shas:
        end = out.index(b"\n", offset)
        header = out[offset:end].split()
        if len(header) != 3:  # "<sha> missing"
            raise DockyardError(f"blob {sha} is missing from {where}")
        size = int(header[2])
        blobs[sha] = out[end + 1 : end + 1 + size]
        offset = end + 1 + size + 1
    return blobs


def _detail(stderr: str) -> str:
    """The line of git's stderr that says what failed, without GitPython's framing."""
    lines = [
        line.strip().removeprefix("stderr:").strip().strip("'").strip()
        for line in stderr.splitlines()
    ]
    lines = [line for line in lines if line]
    fatal = [line for line in lines if line.startswith(("fatal:", "error:", "remote:"))]
    chosen = fatal[0] if fatal else (lines or [""])[-1]
    return chosen.removeprefix("fatal:").removeprefix("error:").strip()


class _MirrorBrokenError(Exception):
    """Internal: the mirror is broken; re-clone once."""
