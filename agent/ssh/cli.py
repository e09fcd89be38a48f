"""Command-line options of the embedded SSH server, for ``python -m agent serve``.

`add_arguments` adds ``--ssh-port``, ``--ssh-host``, ``--authorized-keys`` and
``--host-key`` to the agent's ``serve`` parser; `services` turns them into the
``AgentService`` list for ``agent.server.serving.serve`` (empty without ``--ssh-port``).
The agent's CLI (``agent/__main__.py``) calls both.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from agent.server.serving import AgentService
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
    logging.getLogger("asyncssh").setLevel(logging.WARNING)  # INFO logs every channel
    data_dir = Path(args.data_dir)
    options = SSHServerOptions(
        port=args.ssh_port,
        host=args.ssh_host,
        host_key=args.host_key or data_dir / "ssh_host_ed25519_key",
        authorized_keys=args.authorized_keys or data_dir / "authorized_keys",
    )
    return [ssh_server_service(options)]
