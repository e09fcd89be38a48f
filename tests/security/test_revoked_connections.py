"""Attack: keep using a connection that was open when the member was removed.

A member of `alpha` has an open shell in `alpha`'s job, an open forward to its port and
dstack's hop with an inner connection (an open `dstack attach`), when the server rewrites the
agent's key file without their key (member removed, project or user deleted). The agent must
close those connections, their channels and the shell's command, not only refuse new
channels. Another member's connection stays up, and so does a key whose projects only grew;
a key narrowed to projects that leave out the one it uses is closed. On a real agent
(process jobs, its embedded SSH server), with asyncssh and with OpenSSH as dstack
configures it (`ProxyJump`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import asyncssh

from agent.ssh.keywatch import KeyFile, OpenConnections
from agent.ssh.server import user_key_line
from tests.security.test_jump_attack import Field, connect, field  # noqa: F401 - fixture
from tests.services.missing import needs_ssh_client
from tests.tunnel.conftest import agent_over_ssh, keys  # noqa: F401 - fixtures

DEADLINE = 30.0


def replace_file(path: Path, text: str) -> None:
    """Write `path` whole at once, as the server does (`mv`): never seen half-written."""
    temporary = path.with_name(f".{path.name}.new")
    temporary.write_text(text)
    os.replace(temporary, path)


def _member(tmp_path: Path, field: Field, name: str) -> tuple[Path, str]:  # noqa: F811
    """A new key limited to `alpha`, added to the agent's key file: (private key, its line)."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path / name
    key.write_private_key(str(path))
    path.chmod(0o600)
    line = user_key_line(key.export_public_key().decode(), ["alpha"])
    authorized = field.agent.keys.authorized_keys
    replace_file(authorized, authorized.read_text() + line + "\n")
    return path, line


def _without(field: Field, line: str) -> None:  # noqa: F811
    """The key file as the server writes it once `line`'s user lost the project."""
    authorized = field.agent.keys.authorized_keys
    blob = line.split()[-1]
    kept = [x for x in authorized.read_text().splitlines() if blob not in x]
    replace_file(authorized, "".join(f"{x}\n" for x in kept))


async def _shell(
    conn: asyncssh.SSHClientConnection,
) -> tuple[asyncssh.SSHClientProcess[str], int]:
    """A long command in a session (as an open shell is): the process and its pid."""
    process = await conn.create_process("echo $$; exec sleep 600")
    async with asyncio.timeout(DEADLINE):
        pid = int((await process.stdout.readline()).strip())
    return process, pid


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def _gone(pid: int) -> None:
    async with asyncio.timeout(DEADLINE):
        while _alive(pid):  # noqa: ASYNC110 - polls with a deadline
            await asyncio.sleep(0.05)


async def _still_answers(conn: asyncssh.SSHClientConnection) -> None:
    async with asyncio.timeout(DEADLINE):
        result = await conn.run("echo still-here")
    assert result.exit_status == 0 and "still-here" in str(result.stdout), result.stderr


async def test_a_removed_members_open_shell_forward_and_hop_are_closed(
    field: Field,  # noqa: F811
    tmp_path: Path,
) -> None:
    attacker_line = field.agent.keys.authorized_keys.read_text().splitlines()[-1]
    other_key, _ = _member(tmp_path, field, "other-member")
    async with (
        connect(field, field.alpha) as outer,
        connect(field, "root", tunnel=outer) as inner,
        connect(field, field.alpha, key=other_key) as other,
    ):
        shell, pid = await _shell(outer)
        inner_shell, inner_pid = await _shell(inner)
        reader, writer = await outer.open_connection("127.0.0.1", field.alpha_port)
        other_shell, other_pid = await _shell(other)
        _without(field, attacker_line)  # the member is removed
        async with asyncio.timeout(DEADLINE):
            await outer.wait_closed()
            await inner.wait_closed()
        await _gone(pid)  # the shells' commands ended with their channels
        await _gone(inner_pid)
        async with asyncio.timeout(DEADLINE):
            assert await reader.read() == b""  # the forward is closed too
            await shell.wait_closed()
        writer.close()
        # another member's connection, and its running command, stay up
        assert _alive(other_pid)
        await _still_answers(other)
        other_shell.close()
    inner_shell.close()


async def test_a_key_narrowed_away_from_the_project_it_uses_is_closed_not_one_that_grew(
    field: Field,  # noqa: F811
    tmp_path: Path,
) -> None:
    grown_key, grown_line = _member(tmp_path, field, "grown")
    narrowed_key, narrowed_line = _member(tmp_path, field, "narrowed")
    async with (
        connect(field, field.alpha, key=grown_key) as grown,
        connect(field, field.alpha, key=narrowed_key) as narrowed,
    ):
        grown_shell, grown_pid = await _shell(grown)
        _, narrowed_pid = await _shell(narrowed)
        authorized = field.agent.keys.authorized_keys
        text = authorized.read_text()
        text = text.replace(grown_line, grown_line.replace("=alpha", "=alpha,bravo"))
        text = text.replace(narrowed_line, narrowed_line.replace("=alpha", "=bravo"))
        replace_file(authorized, text)  # one write: the sweep that closes one saw both
        async with asyncio.timeout(DEADLINE):
            await narrowed.wait_closed()
        await _gone(narrowed_pid)
        assert _alive(grown_pid) and not grown.is_closed()  # joined bravo: alpha's shell goes on
        grown_shell.close()  # the client closes it: its command ends with the channel
        await _gone(grown_pid)


def _openssh_shell(field: Field, home: Path) -> subprocess.Popen[str]:  # noqa: F811
    """`ssh <run> 'echo ready; sleep 600'` with the two aliases dstack's attach writes."""
    config = home / "config"
    common = (
        f"  IdentityFile {field.attacker_key}\n  IdentitiesOnly yes\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n"
    )
    config.write_text(
        f"Host run-host\n  HostName 127.0.0.1\n  Port {field.agent.ssh_port}\n"
        f"  User {field.alpha}\n{common}"
        f"Host run\n  HostName localhost\n  Port {field.agent.ssh_port}\n  User root\n"
        f"  ProxyJump run-host\n{common}"
    )
    return subprocess.Popen(
        ["ssh", "-F", str(config), "run", "echo ready; exec sleep 600"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@needs_ssh_client()
async def test_openssh_session_of_a_removed_member_ends(
    field: Field,  # noqa: F811
    tmp_path: Path,
) -> None:
    attacker_line = field.agent.keys.authorized_keys.read_text().splitlines()[-1]
    ssh = _openssh_shell(field, tmp_path)
    try:
        assert ssh.stdout is not None
        ready = await asyncio.wait_for(asyncio.to_thread(ssh.stdout.readline), DEADLINE)
        assert ready.strip() == "ready", ssh.stderr.read() if ssh.stderr else ""
        _without(field, attacker_line)
        code = await asyncio.wait_for(asyncio.to_thread(ssh.wait), DEADLINE)
        assert code != 0
    finally:
        if ssh.poll() is None:
            ssh.kill()
            ssh.wait()


class _Connection:
    """An open connection as the sweep sees it: revoked once its key is not in the file."""

    def __init__(self, key: asyncssh.SSHKey) -> None:
        self.key, self.closed = key.convert_to_public(), False

    def revoked(self, file_keys: asyncssh.SSHAuthorizedKeys) -> bool:
        return file_keys.validate(self.key, "127.0.0.1", "127.0.0.1") is None

    def close(self) -> None:
        self.closed = True


def test_a_key_file_caught_mid_write_closes_nothing_until_a_clean_read(tmp_path: Path) -> None:
    path = tmp_path / "authorized_keys"
    first, second = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
    lines = [user_key_line(k.export_public_key().decode(), ["alpha"]) for k in (first, second)]
    replace_file(path, f"{lines[0]}\n{lines[1]}\n")
    connections = OpenConnections(KeyFile(path))
    kept, dropped = _Connection(first), _Connection(second)
    connections.add(kept)
    connections.add(dropped)
    assert connections.sweep() == 0  # the file as the watch starts
    replace_file(path, f"{lines[0]}\n{lines[1][:60]}")  # an append caught mid-line
    assert connections.sweep() == 0 and connections.keys.garbled
    assert not kept.closed and not dropped.closed
    replace_file(path, f"{lines[0]}\n")  # clean again, without the second key
    assert connections.sweep() == 1 and dropped.closed and not kept.closed
    path.unlink()  # no file at all: nobody is let in, and what is open is closed
    assert connections.sweep() == 1 and kept.closed and len(connections) == 0
