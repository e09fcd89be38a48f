"""What stopping or deleting a Git-owned run by hand means (pure; no I/O).

Called by the run routes (`reconciler.web.routes_runs`), which both CLIs go through
(`dockyard stop/delete` and dstack's `stop`/`delete`):

- **stop** is an operation, not a change: a run the config repo owns may be stopped (or
  aborted) by hand, as in an emergency. The answer warns what happens next: a service or
  dev environment is drift that the next reconcile restores (it is started again); a task
  stays ended (a task runs once per spec). To stop it for good, remove it from Git.
- **delete** would drop the record of a Git-owned run, and the next reconcile would then
  run it again as new: that is a change, refused with where to make it (as `apply` refuses).
  So is deleting a Git-owned fleet, volume or gateway (`routes_capacity`): the next
  reconcile would create it again.
"""

from __future__ import annotations

from reconciler.domain.observed import is_git_origin


def git_path(origin: str | None) -> str | None:
    """The config file of a Git-owned resource (`git:<path>@<commit>`), else None."""
    if origin is None or not is_git_origin(origin):
        return None
    path = origin.removeprefix("git:").rpartition("@")[0]
    return path or "the config repo"


def delete_refusal(kind: str, name: str, origin: str | None) -> str | None:
    """Why deleting this run, fleet, volume or gateway by hand is refused (None: it may
    be deleted)."""
    path = git_path(origin)
    if path is None:
        return None
    return f"{kind} {name!r} is managed by Git ({path}): remove it there"


def stop_warning(run_type: str, name: str, origin: str | None) -> str | None:
    """What stopping this run by hand leads to, when Git owns it (None: nothing to say)."""
    path = git_path(origin)
    if path is None:
        return None
    if run_type == "task":
        return (
            f"task {name!r} is managed by Git ({path}): it stays stopped until its spec "
            "changes there"
        )
    return (
        f"{run_type} {name!r} is managed by Git ({path}): the next reconcile starts it "
        "again (drift: stopped by hand); remove it from Git to stop it for good"
    )
