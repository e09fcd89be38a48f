"""Another machine for a dstack client: a Linux network namespace joined by a veth pair.

`client_namespace()` makes a namespace with its own loopback and one veth end (the client
ip, a /30, and an IPv6 address in a random fdXX: /64), the other end (the server ip, and
its IPv6 address) in this, the server's, namespace. A process started under
`ClientNamespace.prefix` (`ip netns exec NAME`) shares this machine's files but not its
network: the server's 127.0.0.1 listeners are out of its reach, only what listens on the
server's addresses is in it. Names and subnets are unique per use; deleting the namespace
at the end removes the veth pair with it.

Needs root and `ip` (iproute2); without them the test is skipped, or fails under CI=true
(`tests.services.missing.skip_or_fail`). Used by tests/compat/test_attach_remote.py and
test_attach_remote_ssh.py. `jump_network()` puts a second namespace behind the first, one
only the first reaches: an SSH host behind a jump host (tests/compat/test_proxy_jump.py).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.services.missing import skip_or_fail

# run in the namespace with `python -c`: an HTTP URL answers 200 / a TCP port connects
ANSWERS = (
    "import sys, urllib.request\n"
    "try:\n"
    "    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=5).status == 200 else 1)\n"
    "except OSError:\n"
    "    sys.exit(1)\n"
)
CONNECTS = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()\n"
    "except OSError:\n"
    "    sys.exit(1)\n"
)
# OpenSSH with nothing of this machine's own config or known hosts
SSH_OPTIONS = (
    *("-F", "/dev/null", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"),
    *("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"),
    *("-o", "ConnectTimeout=20"),
)


@dataclass(frozen=True)
class ClientNamespace:
    name: str
    server_ip: str  # this namespace's end of the veth pair
    client_ip: str  # the client namespace's end
    server_ip6: str  # the same ends' IPv6 addresses (a random fdXX:… /64)
    client_ip6: str

    @property
    def prefix(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.name)

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`argv` in the client namespace; its output as text."""
        return subprocess.run(
            [*self.prefix, *argv], capture_output=True, text=True, timeout=timeout
        )


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _free_subnet() -> str:
    """A 10.x.y.0/30 no address of this machine is in (the first three octets)."""
    taken = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=30
    ).stdout
    for _ in range(50):
        prefix = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(256)}"
        if f" {prefix}." not in taken:
            return prefix
    raise OSError("no free 10.x.y.0/30 for the test's veth pair")


@contextmanager
def client_namespace() -> Iterator[ClientNamespace]:
    if shutil.which("ip") is None or os.geteuid() != 0:
        skip_or_fail("a client namespace needs root and `ip` (iproute2)")
    tag = secrets.token_hex(4)
    name, outer, inner = f"dyc-{tag}", f"dy{tag}a", f"dy{tag}b"  # ≤ 15 characters
    try:
        _ip("netns", "add", name)
    except OSError as exc:
        skip_or_fail(f"cannot make a network namespace: {exc}")
    try:
        prefix = _free_subnet()
        prefix6 = f"fd{secrets.token_hex(1)}:{secrets.token_hex(2)}:{secrets.token_hex(2)}:"
        ip6 = [str(ipaddress.ip_address(f"{prefix6}:{n}")) for n in (1, 2)]  # canonical
        space = ClientNamespace(name, f"{prefix}.1", f"{prefix}.2", *ip6)
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", name)
        _ip("addr", "add", f"{space.server_ip}/30", "dev", outer)
        _ip("link", "set", outer, "up")
        _ip("-6", "addr", "add", f"{space.server_ip6}/64", "dev", outer, "nodad")
        _ip("-n", name, "addr", "add", f"{space.client_ip}/30", "dev", inner)
        _ip("-n", name, "-6", "addr", "add", f"{space.client_ip6}/64", "dev", inner, "nodad")
        _ip("-n", name, "link", "set", inner, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield space
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", outer], capture_output=True, timeout=30)


@dataclass(frozen=True)
class JumpNetwork:
    """Two namespaces in a row: this one ↔ `jump` ↔ `target`. The jump host's address
    (`jump_ip`) is reachable from here; the target's (`target_ip`) only from `jump`: this
    namespace's route to it is `unreachable`, and `jump` forwards nothing (only a process
    there, such as its sshd, reaches the target)."""

    jump: ClientNamespace  # its client_ip is the jump host's address on the first link
    target: ClientNamespace  # its server_ip is the jump host's end of the second link

    @property
    def jump_ip(self) -> str:
        return self.jump.client_ip

    @property
    def target_ip(self) -> str:
        return self.target.client_ip


@contextmanager
def jump_network() -> Iterator[JumpNetwork]:
    """A `JumpNetwork`: `client_namespace()` for the jump host, then a target namespace
    whose veth pair's other end is in the jump host's namespace, not in this one."""
    with client_namespace() as jump:
        tag = secrets.token_hex(4)
        name, outer, inner = f"dyt-{tag}", f"dy{tag}c", f"dy{tag}d"
        prefix = _free_subnet()
        try:
            _ip("netns", "add", name)
        except OSError as exc:
            skip_or_fail(f"cannot make a network namespace: {exc}")
        try:
            target = ClientNamespace(name, f"{prefix}.1", f"{prefix}.2", "", "")
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", outer, "netns", jump.name)
            _ip("link", "set", inner, "netns", name)
            _ip("-n", jump.name, "addr", "add", f"{target.server_ip}/30", "dev", outer)
            _ip("-n", jump.name, "link", "set", outer, "up")
            _ip("-n", name, "addr", "add", f"{target.client_ip}/30", "dev", inner)
            _ip("-n", name, "link", "set", inner, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            # not even this machine's default route (a gateway may answer any address)
            _ip("route", "add", "unreachable", f"{prefix}.0/30")
            yield JumpNetwork(jump, target)
        finally:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            unroute = ["ip", "route", "del", "unreachable", f"{prefix}.0/30"]
            subprocess.run(unroute, capture_output=True, timeout=30)
