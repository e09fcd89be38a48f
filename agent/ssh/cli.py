"""Command-line options of the embedded SSH server, and an entry point that serves both.

`add_arguments` adds ``--ssh-port``, ``--ssh-host``, ``--authorized-keys`` and
``--host-key`` to a ``serve`` parser; `services` turns them into the ``AgentService``
list for ``agent.server.serving.serve`` (empty without ``--ssh-port``). The agent's own
CLI (``agent/__main__.py``) can call both from its ``extra_services`` hook;
``python -m agent.ssh serve …`` (`main`) already accepts the agent's options plus these,
and is what the local fleet starts.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from agent.server.serving import AgentConfig, AgentLockedError, AgentService, serve
from agent.ssh.server import SSHServerOptions
from agent.ssh.service import ssh_server_service


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ssh-port", type=int, default=None, help="embedded SSH server port")
    parser.add_argument("--ssh-host", default="127.0.0.1", help="embedded SSH server address")
    parser.add_argument("--authorized-keys", type=Path, default=None, help="keys allowed in")
    parser.add_argument("--host-key", type=Path, default=None, help="generated if missing")


def services(args: argparse.Namespace) -> list[AgentService]:
    if args.ssh_port is None:
        return []
    data_dir = Path(args.data_dir)
    options = SSHServerOptions(
        port=args.ssh_port,
        host=args.ssh_host,
        host_key=args.host_key or data_dir / "ssh_host_ed25519_key",
        authorized_keys=args.authorized_keys or data_dir / "authorized_keys",
    )
    return [ssh_server_service(options)]


def main(argv: Sequence[str] | None = None) -> int:
    from agent.__main__ import build_parser

    args, rest = build_parser().parse_known_args(argv)
    if not hasattr(args, "ssh_port"):  # the agent's CLI does not take the SSH options (yet)
        ssh_parser = argparse.ArgumentParser(prog="python -m agent.ssh serve")
        add_arguments(ssh_parser)
        vars(args).update(vars(ssh_parser.parse_args(rest)))
    elif rest:
        build_parser().error(f"unrecognized arguments: {' '.join(rest)}")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    config = AgentConfig(
        data_dir=args.data_dir.resolve(),
        http_port=args.http_port,
        docker=not args.no_docker,
        docker_url=args.docker_url,
    )
    try:
        asyncio.run(serve(config, services(args)))
    except AgentLockedError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: cannot serve: {error}", file=sys.stderr)
        return 2
    return 0
