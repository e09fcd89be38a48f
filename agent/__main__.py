"""``python -m agent serve --data-dir DIR --http-port P``: run the host agent.

The agent serves its HTTP API on 127.0.0.1 only (see ``agent/server/serving.py``);
``--http-port 0`` picks a free port, written to ``<data-dir>/agent.json``. Extra
services run in the same process: ``build_parser(with_services=True)`` adds their
options and ``extra_services(args)`` turns them into ``AgentService`` values; today the
embedded SSH server (``--ssh-port``, ``--ssh-host``, ``--authorized-keys``,
``--host-key``; ``agent/ssh/cli.py``).
"""

from __future__ import annotations

from agent.librarywarnings import show_only_our_warnings

if __name__ == "__main__":
    show_only_our_warnings()  # asyncssh warns when imported, below

import argparse
import asyncio
import dataclasses
import logging
import os
import shutil
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.diskspace import DEFAULT_MIN_FREE
from agent.httpheads import DEFAULT_MAX_HEADER_BYTES
from agent.protocol import agent_version
from agent.server.archives import MAX_EXTRACTED_BYTES, MAX_EXTRACTED_FILES, ArchiveLimits
from agent.server.isolation import DEFAULT_IMAGE, Isolation
from agent.server.jobaccount import (
    DEFAULT_JOB_USER,
    JobAccount,
    JobAccountError,
    default_work_root,
    ensure_job_user,
)
from agent.server.mounts import DEFAULT_VOLUME_ROOTS, parse_roots
from agent.server.peers import allowed_uids
from agent.server.sandbox import (
    UNSANDBOXED_ENV,
    UNSANDBOXED_FLAG,
    Sandbox,
    refusal_without_sandbox,
)
from agent.server.serving import (
    DEFAULT_HTTP_PORT,
    AgentConfig,
    AgentLockedError,
    AgentService,
    serve,
)
from agent.server.uidleases import Identities
from agent.ssh import cli as ssh_cli


def build_parser(*, with_services: bool = False) -> argparse.ArgumentParser:
    """The agent's options; ``with_services`` adds those of the extra services."""
    parser = argparse.ArgumentParser(prog="python -m agent", description="Dockyard host agent")
    parser.add_argument("--version", action="version", version=agent_version())
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="serve the agent API on 127.0.0.1")
    serve_parser.add_argument("--data-dir", type=Path, required=True, help="jobs, logs, state")
    serve_parser.add_argument(
        "--http-port", type=int, default=DEFAULT_HTTP_PORT, help="0 picks a free port"
    )
    serve_parser.add_argument("--no-docker", action="store_true", help="process executor only")
    serve_parser.add_argument("--docker-url", default=None, help="default: DOCKER_HOST or socket")
    serve_parser.add_argument("--log-level", default="INFO")
    serve_parser.add_argument(
        "--allow-user",
        action="append",
        default=[],
        metavar="NAME",
        help="may call the API besides the agent's own user and root (repeatable)",
    )
    serve_parser.add_argument(
        "--job-user",
        default="auto",
        metavar="NAME",
        help="process jobs without a `user` run as NAME; auto: dockyard-job (created) when "
        "the agent is root, else the agent's own user; 'self': the agent's own user",
    )
    serve_parser.add_argument(
        "--job-isolation",
        choices=[mode.value for mode in Isolation],
        default=os.environ.get("DOCKYARD_JOB_ISOLATION") or Isolation.AUTO.value,
        help="jobs without an image: auto (a container of --default-image when Docker has "
        "it, else a process), container (always; pulled if missing), process (never); "
        "env DOCKYARD_JOB_ISOLATION",
    )
    serve_parser.add_argument(
        "--default-image",
        default=os.environ.get("DOCKYARD_DEFAULT_IMAGE") or DEFAULT_IMAGE,
        metavar="IMAGE",
        help=f"the container image of jobs without one ({DEFAULT_IMAGE}, as dstack's); "
        "env DOCKYARD_DEFAULT_IMAGE",
    )
    serve_parser.add_argument(
        "--max-extracted-bytes",
        type=int,
        default=_env_int("DOCKYARD_AGENT_MAX_EXTRACTED_BYTES", MAX_EXTRACTED_BYTES),
        metavar="N",
        help="bytes a job's archives (repos/files) may extract to, all together (4 GiB); "
        "env DOCKYARD_AGENT_MAX_EXTRACTED_BYTES",
    )
    serve_parser.add_argument(
        "--max-extracted-files",
        type=int,
        default=_env_int("DOCKYARD_AGENT_MAX_EXTRACTED_FILES", MAX_EXTRACTED_FILES),
        metavar="N",
        help="files a job's archives may hold, all together (200000); "
        "env DOCKYARD_AGENT_MAX_EXTRACTED_FILES",
    )
    serve_parser.add_argument(
        "--max-header-bytes",
        type=int,
        default=DEFAULT_MAX_HEADER_BYTES,
        metavar="N",
        help="a request's line and headers at most (larger: 431 and the connection closed)",
    )
    serve_parser.add_argument(
        "--allow-root-jobs",
        action="store_true",
        help="with a job user: honour a process job's `user: root` (off: such jobs are refused)",
    )
    serve_parser.add_argument(
        UNSANDBOXED_FLAG,
        action="store_true",
        default=_env_flag(UNSANDBOXED_ENV),
        help="a root agent without bubblewrap (`bwrap`) runs process jobs anyway, as the "
        "job account and without a sandbox: they then share the host's filesystem, /tmp, "
        "processes and one account (they can read each other's files and signal each "
        f"other); off: such jobs are refused; env {UNSANDBOXED_ENV}=1",
    )
    serve_parser.add_argument(
        "--allow-job-user",
        action="append",
        default=_env_list("DOCKYARD_AGENT_ALLOW_JOB_USERS"),
        metavar="NAME",
        help="a process job's `user:` may name this account (repeatable; none by default: "
        "jobs run as their own identity); env DOCKYARD_AGENT_ALLOW_JOB_USERS (comma-separated)",
    )
    serve_parser.add_argument(
        "--protect",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="no Docker job may mount DIR or a dir above it (the data dir always; repeatable)",
    )
    serve_parser.add_argument(
        "--volume-dir",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="volumes inside DIR may be mounted even inside a protected dir (repeatable)",
    )
    serve_parser.add_argument(
        "--volume-root",
        type=Path,
        action="append",
        default=None,
        metavar="DIR",
        help="a job's instance volumes must lie below a DIR (repeatable; default "
        "/mnt /data /srv /scratch, plus each --volume-dir); env DOCKYARD_AGENT_VOLUME_ROOTS "
        "(':'-separated)",
    )
    serve_parser.add_argument(
        "--work-root",
        type=Path,
        default=None,
        help="working dirs of jobs run as another user (/var/lib/dockyard-jobs/<agent>)",
    )
    serve_parser.add_argument(
        "--min-free-disk",
        type=int,
        default=DEFAULT_MIN_FREE,
        metavar="BYTES",
        help="below this free space (data dir, Docker's root) new jobs wait (1 GiB)",
    )
    if with_services:
        ssh_cli.add_arguments(serve_parser)
    return parser


def _env_int(name: str, default: int) -> int:
    """A whole number from the environment (a flag's default), else `default`."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"error: {name}={value!r} is not a whole number") from None


def _volume_roots(flags: list[Path] | None, environ: Mapping[str, str]) -> tuple[Path, ...]:
    """The roots instance volumes must lie below: the flags, else the environment's
    `DOCKYARD_AGENT_VOLUME_ROOTS`, else `DEFAULT_VOLUME_ROOTS`."""
    if flags:
        roots = tuple(flags)
    elif environ.get("DOCKYARD_AGENT_VOLUME_ROOTS", "").strip():
        roots = parse_roots(environ["DOCKYARD_AGENT_VOLUME_ROOTS"])
    else:
        roots = DEFAULT_VOLUME_ROOTS
    relative = [str(root) for root in roots if not root.is_absolute()]
    if relative:
        raise ValueError(f"volume roots must be absolute paths, not {', '.join(relative)}")
    return roots


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def extra_services(args: argparse.Namespace) -> list[AgentService]:
    """Services started beside the HTTP API, from their command-line options."""
    return ssh_cli.services(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser(with_services=True).parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        data_dir = args.data_dir.resolve()
        account = job_account(
            args.job_user,
            args.work_root,
            data_dir,
            unsandboxed=args.unsandboxed_process_jobs,
            hidden=(data_dir, *(path.resolve() for path in args.protect)),
        )
        account = dataclasses.replace(
            account,
            allow_root=args.allow_root_jobs,
            allowed_users=frozenset(args.allow_job_user),
        )
    except JobAccountError as error:
        print(f"error: --job-user: {error}", file=sys.stderr)
        return 2
    if account.identities is not None:  # what a killed agent or a dead job left leased
        try:
            freed = account.identities.reclaim_stale()
        except OSError as error:
            print(f"error: cannot reclaim stale job uids: {error}", file=sys.stderr)
            return 2
        if freed:
            logging.getLogger(__name__).info("reclaimed %d stale job uid lease(s)", len(freed))
    try:
        volume_roots = _volume_roots(args.volume_root, os.environ)
    except ValueError as error:
        print(f"error: --volume-root: {error}", file=sys.stderr)
        return 2
    if args.no_docker and args.job_isolation == Isolation.CONTAINER:
        print("error: --job-isolation container needs Docker: drop --no-docker", file=sys.stderr)
        return 2
    config = AgentConfig(
        job_isolation=Isolation(args.job_isolation),
        archive_limits=ArchiveLimits(args.max_extracted_bytes, args.max_extracted_files),
        default_image=args.default_image,
        data_dir=args.data_dir.resolve(),
        job_account=account,
        protected_dirs=tuple(path.resolve() for path in args.protect),
        volume_dirs=tuple(path.resolve() for path in args.volume_dir),
        volume_roots=volume_roots,
        http_port=args.http_port,
        docker=not args.no_docker,
        docker_url=args.docker_url,
        allow_users=tuple(args.allow_user),
        min_free_disk=args.min_free_disk,
        max_header_bytes=args.max_header_bytes,
    )
    try:
        allowed_uids(config.allow_users)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        _run(serve(config, extra_services(args)))
    except AgentLockedError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: cannot serve on 127.0.0.1:{args.http_port}: {error}", file=sys.stderr)
        return 2
    return 0


def job_account(
    user: str,
    work_root: Path | None,
    data_dir: Path,
    *,
    unsandboxed: bool = False,
    hidden: tuple[Path, ...] = (),
    which: Callable[[str], str | None] = shutil.which,
) -> JobAccount:
    """The `JobAccount` of `--job-user`. A root agent with bubblewrap sandboxes process
    jobs (`auto`: each with a uid of its own; NAME: as that account); without it, it
    refuses them unless `unsandboxed` (then as the job account, created when missing)."""
    if user == "self" or (user == "auto" and os.geteuid() != 0):
        return JobAccount()
    root = work_root or default_work_root(data_dir)
    bwrap, setpriv = which("bwrap"), which("setpriv")
    if bwrap is not None and setpriv is not None:
        sandbox = Sandbox(bwrap, setpriv, hidden, nsenter=which("nsenter") or "nsenter")
        if user == "auto":
            return JobAccount(DEFAULT_JOB_USER, root, sandbox=sandbox, identities=Identities())
        ensure_job_user(user)
        return JobAccount(user, root, sandbox=sandbox)
    name = DEFAULT_JOB_USER if user == "auto" else user
    if not unsandboxed:
        return JobAccount(name, root, unsandboxed_refusal=refusal_without_sandbox())
    ensure_job_user(name)
    return JobAccount(name, root)


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run on libuv's loop where uvloop is installed (the tunnel's channels and the job
    log pipes cost less there), else on asyncio's own: a host without it still works."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


if __name__ == "__main__":
    sys.exit(main())
