"""URL repos of a job (`repos: [{url, branch, hash, path, if_exists}]`): the git commands
the job runs first to fetch them, and how a failed fetch is told (pure).

dstack's runner clones a URL repo into the job's repo directory before the commands. Here
the job does it itself, with the host's or the image's `git`: `git init` in the target,
then a shallow fetch of the branch, the commit (`hash`) or the remote's HEAD, and a
checkout — which works in a working dir that already holds uploaded `files`. `if_exists`
(dstack's): `error` (the default) fails the job when the target is already a git repo,
`skip` keeps it as it is. Credentials are whatever `git` on the host or in the image has
(an SSH agent, a credential helper); a token in the URL works but shows in the job's spec.

What the spec names reaches git only after `--` (the URL, the branch or commit), so no
value can become an option such as `--upload-pack=<command>`; the schema refuses such
values first (`schemas.mounts.RepoSpec`). A fetch that fails prints git's own output, then
one line starting with `CLONE_FAILED_MARK` that ends the log; the jobs worker makes that
line the job's status message (`clone_failure`), so the run says what git said.

`render_agent_job` (`reconciler.core.jobspecs`) puts these ahead of the job's commands.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

CLONE_FAILED_MARK = "dockyard: repos: "
"""The start of the last line a failed fetch prints (`clone_failure` reads it back)."""
_MESSAGE_CHARS = 500


def url_repos(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in spec.get("repos") or () if isinstance(r, Mapping) and r.get("url")]


def clone_commands(spec: Mapping[str, Any]) -> list[str]:
    """One shell command per URL repo, in order; [] when the job has none."""
    return [_clone(repo) for repo in url_repos(spec)]


def _clone(repo: Mapping[str, Any]) -> str:
    target = shlex.quote(str(repo.get("path") or "."))
    url = shlex.quote(str(repo["url"]))
    ref = shlex.quote(str(repo.get("hash") or repo.get("branch") or "HEAD"))
    git = f"git -C {target}"
    steps = (
        f"mkdir -p -- {target} && {git} init -q && {git} remote add -- origin {url} && "
        f"{git} fetch -q --depth 1 -- origin {ref} && {git} checkout -q FETCH_HEAD --"
    )
    if repo.get("branch") and not repo.get("hash"):
        branch = shlex.quote(str(repo["branch"]))
        steps += f" && {git} checkout -q -B {branch} FETCH_HEAD --"
    # git's output stays in the log; the last line names the repo and git's last word
    shown = f"{_without_password(str(repo['url']))} into {repo.get('path') or '.'}"
    said = shlex.quote(f"{CLONE_FAILED_MARK}fetching {shown}")
    why = (  # git's first `fatal:`/`error:` line, else its last line
        "_dy_why=$(printf '%s\\n' \"$_dy_err\" | "
        "sed -n -e '/^fatal: /{p;q;}' -e '/^error: /{p;q;}'); "
        '[ -n "$_dy_why" ] || _dy_why=$(printf \'%s\\n\' "$_dy_err" | tail -n 1); '
    )
    fetch = (
        f"_dy_err=$( {{ {steps}; }} 2>&1 ) || {{ _dy_rc=$?; printf '%s\\n' \"$_dy_err\" >&2; "
        f"{why}printf '%s failed: %s\\n' {said} \"$_dy_why\" >&2; (exit $_dy_rc); }}"
    )
    if repo.get("if_exists") == "skip":
        return f"{{ test -e {target}/.git || {{ {fetch}; }}; }}"
    exists = f"echo 'repos: {target} is already a git repo (if_exists: error)' >&2; false"
    return f"{{ if test -e {target}/.git; then {exists}; else {fetch}; fi; }}"


def _without_password(url: str) -> str:
    """`url` as the status message shows it: a token in it is left out."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def clone_failure(log_tail: bytes) -> str | None:
    """The status message of a job whose repo fetch failed: the mark's line, when it is the
    last line of the log (`log_tail`: the log's last bytes); None otherwise."""
    lines = log_tail.decode("utf-8", "replace").rstrip("\n").splitlines()
    if not lines or not lines[-1].startswith(CLONE_FAILED_MARK):
        return None
    line = lines[-1][len("dockyard: ") :].strip()
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 1] + "…"
