"""Attack: `ssh <run>` straight to the agent's SSH server, naming a run another project also runs.

A direct session (`ssh -p <agent ssh port> <run name>@host`, as opposed to dstack's hop by
job id) names a run. Another project starts a newer run of the same name on the same agent:
the member of `alpha` must still land in `alpha`'s job (the lookup searches only the key's
projects), never in `bravo`'s, and a member of `bravo` naming it lands in `bravo`'s own.
On a real agent (process jobs, its embedded SSH server), with asyncssh and with OpenSSH.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from agent.client import AgentClient
from agent.protocol import JobSpec, JobStatus
from agent.ssh.server import user_key_line
from agent.tunnel import TunnelPool
from tests.security.test_jump_attack import PROJECT, Field, field  # noqa: F401 - fixture
from tests.services.missing import needs_ssh_client
from tests.tunnel.conftest import (  # noqa: F401 - fixtures
    agent_over_ssh,
    keys,
    unique_id,
    wait_job,
)


def _twin() -> JobSpec:
    """A newer job of `bravo` with the run name of the attacker's (`alpha`'s) running job."""
    return JobSpec(
        id=unique_id("twin"),
        run_name="alpha-web",
        labels={PROJECT: "bravo"},
        commands=["echo bravo-twin-secret", "exec sleep 600"],
    )


@pytest.fixture
async def twin(field: Field) -> AsyncIterator[str]:  # noqa: F811
    pool = TunnelPool()
    client = AgentClient.over_tunnel(pool, field.agent.target(), field.agent.http_port)
    spec = _twin()
    await client.submit(spec)
    try:
        await wait_job(client, spec.id, lambda s: s.status == JobStatus.RUNNING)
        yield spec.id
    finally:
        await client.stop(spec.id, force=True)
        await client.aclose()
        await pool.close()


def _key(tmp_path: Path, field: Field, name: str, projects: list[str]) -> Path:  # noqa: F811
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path / name
    key.write_private_key(str(path))
    path.chmod(0o600)
    authorized = field.agent.keys.authorized_keys
    line = user_key_line(key.export_public_key().decode(), projects)
    authorized.write_text(authorized.read_text() + line + "\n")
    return path


async def _run(field: Field, key: Path, user: str) -> asyncssh.SSHCompletedProcess:  # noqa: F811
    async with (
        asyncio.timeout(30),
        asyncssh.connect(
            "127.0.0.1",
            field.agent.ssh_port,
            username=user,
            client_keys=[str(key)],
            known_hosts=None,
            config=None,
        ) as conn,
    ):
        return await conn.run("pwd; echo $DOCKYARD_RUN_NAME")


async def test_a_session_by_run_name_lands_in_the_keys_own_project(
    field: Field,  # noqa: F811
    twin: str,
    tmp_path: Path,
) -> None:
    # the attacker (alpha's key) names the run that bravo now also runs, newer
    mine = await _run(field, field.attacker_key, "alpha-web")
    assert mine.exit_status == 0, mine.stderr
    assert field.alpha in str(mine.stdout) and twin not in str(mine.stdout)
    # naming bravo's job by its id stays refused
    theirs = await _run(field, field.attacker_key, twin)
    assert theirs.exit_status != 0 and "no job named" in str(theirs.stderr)
    assert twin not in str(theirs.stdout)
    # a member of bravo naming the same run lands in bravo's job, not alpha's
    bravo_key = _key(tmp_path, field, "bravo-member", ["bravo"])
    other = await _run(field, bravo_key, "alpha-web")
    assert other.exit_status == 0, other.stderr
    assert twin in str(other.stdout) and field.alpha not in str(other.stdout)


@needs_ssh_client()
async def test_openssh_by_run_name_lands_in_the_keys_own_project(
    field: Field,  # noqa: F811
    twin: str,
) -> None:
    argv = [
        "ssh",
        "-F",
        "/dev/null",
        "-i",
        str(field.attacker_key),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "BatchMode=yes",
        "-p",
        str(field.agent.ssh_port),
        "alpha-web@127.0.0.1",
        "pwd",
    ]
    done = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert field.alpha in done.stdout and twin not in done.stdout
