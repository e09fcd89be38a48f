"""OpenSSH ``sshd`` on loopback: the hosts of an SSH fleet, for tests.

`sshd_hosts` (session scope) starts two sshd instances on two free 127.0.0.1 ports, each
with its own generated host key, both accepting one generated client key for ``root``.
They stand for two machines of an SSH fleet; as they share one filesystem, tests give each
host its own agent directory and agent port. Needs root (sshd drops privileges per
session) and ``/usr/sbin/sshd``; otherwise the tests that use it skip and say why.

`start_sshd` is public so a test can start an extra, differently configured host (for
example one whose PATH has no Python, or one in another network namespace:
`tests/compat/test_proxy_jump.py`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest

from tests.services.missing import skip_or_fail

SSHD = Path("/usr/sbin/sshd")


@dataclass
class SSHHost:
    """One running sshd: where it listens and how to log in."""

    port: int
    user: str
    identity_file: Path
    host_key: Path
    workdir: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def sshd_unavailable_reason() -> str | None:
    if not SSHD.exists():
        return f"{SSHD} not found (apt-get install openssh-server)"
    if os.geteuid() != 0:
        return "sshd test hosts need root (sshd switches to the logged-in user)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_client_key(directory: Path) -> Path:
    """A generated ed25519 client key (private at the path, public at path + .pub)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = directory / "id_ed25519"
    key.write_private_key(str(path))
    key.write_public_key(str(path) + ".pub")
    path.chmod(0o600)
    return path


# run under a namespace's prefix: exit 0 once host:port accepts a connection
_CONNECTS = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()\n"
    "except OSError:\n"
    "    sys.exit(1)\n"
)


def _accepts(host: str, port: int, prefix: Sequence[str]) -> bool:
    if prefix:  # another network namespace: ask from inside it
        argv = [*prefix, sys.executable, "-c", _CONNECTS, host, str(port)]
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait_listening(
    host: str, port: int, process: subprocess.Popen[bytes], deadline: float, prefix: Sequence[str]
) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd on port {port} exited with {process.returncode}")
        if _accepts(host, port, prefix):
            return
        time.sleep(0.05)
    raise RuntimeError(f"sshd on port {port} did not listen in time")


def start_sshd(
    workdir: Path,
    identity_file: Path,
    *,
    extra_config: str = "",
    sftp: bool = True,
    listen: str = "127.0.0.1",
    port: int | None = None,
    prefix: Sequence[str] = (),
) -> SSHHost:
    """Start one sshd accepting `identity_file` for root, on `listen`:`port` (default a
    free loopback port), under `prefix` (e.g. `ip netns exec NS`: another machine's network)."""
    workdir.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    host_key = workdir / "ssh_host_ed25519_key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(host_key))
    host_key.chmod(0o600)
    authorized = workdir / "authorized_keys"
    shutil.copyfile(str(identity_file) + ".pub", authorized)
    port = port or _free_port()
    config = workdir / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress {listen}\nHostKey {host_key}\n"
        f"PidFile {workdir / 'sshd.pid'}\nAuthorizedKeysFile {authorized}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nUsePAM no\n"
        "StrictModes no\nAllowTcpForwarding yes\n"
        + ("Subsystem sftp internal-sftp\n" if sftp else "")
        + "MaxStartups 100\nMaxSessions 100\nLogLevel ERROR\n"
        + extra_config
    )
    process = subprocess.Popen(
        [*prefix, str(SSHD), "-D", "-e", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "sshd.log", "wb"),  # noqa: SIM115 - owned by the child
    )
    _wait_listening(listen, port, process, time.monotonic() + 10, prefix)
    return SSHHost(port, "root", identity_file, host_key, workdir, process)


@pytest.fixture(scope="session")
def sshd_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SSHHost]]:
    reason = sshd_unavailable_reason()
    if reason:
        skip_or_fail(reason)
    root = tmp_path_factory.mktemp("sshd")
    key = make_client_key(root / "client")
    hosts = [start_sshd(root / f"host{i}", key) for i in (1, 2)]
    yield hosts
    for host in hosts:
        host.stop()
