"""A job gets a job's rights on the local fleet: not the server's data, not the agent's API.

The attack of a project member (role `user`): submit a task whose commands read
`<data-dir>/admin-token` and the database, list the agent's jobs, and call the agent's API
from inside the job. The server is built for real (`build_server`: data dir, database,
admin token) and its local agent started as the server starts it (`ensure_local_agent`);
tests run as root, as a server on a fresh host often does. Every attempt must fail, and
the job must not run as root (docs/security.md, "Jobs and the host").
"""

from __future__ import annotations

import asyncio
import shlex
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.client import AgentClient, AgentError
from agent.local import LocalAgent, ensure_client_key, ensure_local_agent, stop_local_agent
from agent.protocol import JobSpec, JobState, JobStatus
from agent.tunnel import TunnelPool
from reconciler.app import build_server
from reconciler.settings import Settings
from tests.security.local_users import need_root

CALL_API = textwrap.dedent(
    """
    import sys, urllib.request, urllib.error
    base = "http://127.0.0.1:%s/api/v1" % sys.argv[1]
    one = b'{"id": "escape", "run_name": "escape", "commands": ["id"]}'
    many = b'{"jobs": [' + one + b']}'
    for label, path, body in (("API", "/jobs", one), ("API-MANY", "/jobs/submissions", many)):
        request = urllib.request.Request(base + path, body, {"content-type": "application/json"})
        try:
            print(label, urllib.request.urlopen(request, timeout=10).status)
        except urllib.error.HTTPError as error:
            print(label, error.code)
        except OSError as error:
            print(label, "unreachable", error)
    """
)


@pytest.fixture
async def local_fleet(tmp_path: Path) -> AsyncIterator[tuple[Path, LocalAgent, AgentClient]]:
    need_root()
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir, cli_config=tmp_path / "cli.yml")
    server = build_server(settings)
    server.store.close()
    pool = TunnelPool()
    key = ensure_client_key(data_dir / "ssh" / "id_ed25519")
    local = await ensure_local_agent(data_dir, key, pool)
    try:
        async with AgentClient.over_tunnel(pool, local.target, local.agent_port) as client:
            yield data_dir, local, client
    finally:
        await pool.close()
        stop_local_agent(data_dir)


async def _finished(client: AgentClient, job_id: str) -> JobState:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = await client.job(job_id)
        if state.status in (JobStatus.EXITED, JobStatus.FAILED, JobStatus.TERMINATED):
            return state
        await _pause()
    raise AssertionError(f"job {job_id} did not finish")


async def _pause() -> None:
    await asyncio.sleep(0.1)


async def test_a_job_cannot_read_the_servers_data_or_call_the_agent(
    local_fleet: tuple[Path, LocalAgent, AgentClient],
) -> None:
    data_dir, local, client = local_fleet
    token = (data_dir / "admin-token").read_text().strip()
    agent_data = data_dir / "local-agent" / "data"
    commands = [
        "echo uid=$(id -u)",
        f"cat {data_dir}/admin-token || echo no-token",
        f"head -c 16 {data_dir}/dockyard.db >/dev/null && echo READ-DB || echo no-db",
        f"ls {agent_data}/jobs && echo LISTED-JOBS || echo no-jobs",
        f"/usr/bin/python3 -c {shlex.quote(CALL_API)} {local.agent_port}",
    ]
    spec = JobSpec(id="member-job", run_name="member-job", commands=["; ".join(commands)])
    await client.submit(spec)
    state = await _finished(client, spec.id)
    log = (await client.logs(spec.id, limit=2**20)).data.decode(errors="replace")
    await client.remove(spec.id)
    assert state.status == JobStatus.EXITED, (state, log)
    assert token not in log, "the job read the admin token"
    assert "no-token" in log and "no-db" in log and "no-jobs" in log, log
    assert "READ-DB" not in log and "LISTED-JOBS" not in log, log
    assert "uid=0\n" not in log, "the job ran as root"
    assert "API 403" in log, f"the job reached the agent's API: {log}"
    assert "API-MANY 403" in log, f"the job reached the agent's API: {log}"
    assert "escape" not in [job.id for job in await client.jobs()]


async def test_data_directories_are_private(
    local_fleet: tuple[Path, LocalAgent, AgentClient],
) -> None:
    data_dir = local_fleet[0]
    for path in (data_dir, data_dir / "local-agent", data_dir / "local-agent" / "data"):
        assert path.stat().st_mode & 0o777 == 0o700, path


async def test_user_root_is_refused_unless_the_host_allows_it(
    local_fleet: tuple[Path, LocalAgent, AgentClient],
) -> None:
    client = local_fleet[2]
    spec = JobSpec(id="as-root", run_name="as-root", commands=["id -u"], user="root")
    with pytest.raises(AgentError) as refused:
        await client.submit(spec)
    assert refused.value.code == "invalid_request"
    assert "runs no job as root" in refused.value.message
    assert "--allow-root-jobs" in refused.value.message
