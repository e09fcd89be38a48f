"""What the agent's two per-connection access checks cost, as JSON on stdout.

    .venv/bin/python bench/access_checks.py [--connections 200] [--users 1000]

- `peer_check_ms`: median time of `agent.server.peers.PeerCheck.permits` for one loopback
  connection (one read of /proc/net/tcp, one `readlink` per host process to find the
  socket's owner), with `processes`: how many processes this host had (the cost grows with
  them), and `tcp_rows`: the rows of /proc/net/tcp read.
- `key_parse_us_per_line` / `key_parse_ms`: median time of parsing an `authorized_keys`
  of `--users` user key lines (`agent.ssh.keywatch.KeyFile`, what the agent's SSH server
  does when the file's bytes changed), per line and in all.

Cited by docs/security.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import asyncssh  # noqa: E402

from agent.server.peers import PeerCheck  # noqa: E402
from agent.ssh.keywatch import KeyFile  # noqa: E402
from agent.ssh.server import user_key_line  # noqa: E402


class _Accepted:
    """The server side of an accepted connection, as a transport shows it to the check."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def get_extra_info(self, name: str) -> Any:
        return {"peername": self._sock.getpeername(), "sockname": self._sock.getsockname()}[name]


def peer_check(connections: int) -> dict[str, Any]:
    check = PeerCheck(frozenset({os.getuid()}))
    times = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        for _ in range(connections):
            with socket.create_connection(listener.getsockname()) as _client:
                accepted, _ = listener.accept()
                with accepted:
                    start = time.perf_counter()
                    allowed = check.permits(_Accepted(accepted))  # type: ignore[arg-type]
                    times.append(time.perf_counter() - start)
                    assert allowed, "the check refused this process's own connection"
    processes = sum(1 for entry in Path("/proc").iterdir() if entry.name.isdigit())
    rows = len(Path("/proc/net/tcp").read_bytes().splitlines()) - 1
    return {
        "peer_check_ms": round(statistics.median(times) * 1000, 2),
        "processes": processes,
        "tcp_rows": rows,
    }


def key_parse(users: int, repeat: int = 5) -> dict[str, Any]:
    keys = [
        asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
        for _ in range(users)
    ]
    text = "".join(user_key_line(key, ["main"]) + "\n" for key in keys)
    times = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "authorized_keys"
        for index in range(repeat):
            path.write_text(text + f"# {index}\n")  # new bytes: parsed again
            key_file = KeyFile(path)
            start = time.perf_counter()
            key_file.current()
            times.append(time.perf_counter() - start)
    best = statistics.median(times)
    return {
        "users": users,
        "key_parse_ms": round(best * 1000, 1),
        "key_parse_us_per_line": round(best / users * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--users", type=int, default=1000)
    args = parser.parse_args()
    figures = {**peer_check(args.connections), **key_parse(args.users)}
    figures["load_1min"] = os.getloadavg()[0]
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
