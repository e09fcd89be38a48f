"""A local account of a fleet host cannot use the agent's API by naming someone else.

The attack, as the user `dockyard-probe` (created by the test): send `POST /api/v1/jobs`
to the agent on 127.0.0.1 with `X-Forwarded-For: 127.0.0.1:<port>` naming a connection
of root's (still open), or one of the attacker's own that it closed first (its TIME_WAIT
row in /proc/net/tcp shows uid 0). The agent must answer 403 and run nothing: it asks the
kernel who owns the connection itself (docs/security.md, "Local users of fleet hosts").
"""

from __future__ import annotations

import socket
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agent.protocol import API_PREFIX
from agent.server.serving import AgentConfig, start_agent
from tests.agent.conftest import AgentApi, recorded_tools
from tests.security.local_users import probe_uid, run_as

ATTACK = textwrap.dedent(
    """
    import http.client, json, sys, time
    port, forwarded = int(sys.argv[1]), sys.argv[2]
    if forwarded == "own-closed":
        # a connection of our own, closed by us first: the kernel keeps it in TIME_WAIT
        import socket
        mine = socket.create_connection(("127.0.0.1", port))
        own_port = mine.getsockname()[1]
        mine.close()
        row = "0100007F:%04X 0100007F:%04X 06" % (own_port, port)
        deadline = time.monotonic() + 10
        while row not in open("/proc/net/tcp").read() and time.monotonic() < deadline:
            time.sleep(0.01)
        forwarded = "127.0.0.1:%d" % own_port
    spec = {"id": "pwned", "run_name": "pwned", "commands": ["id > /tmp/dockyard-pwned"]}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", sys.argv[3] + "/jobs", body=json.dumps(spec), headers={
        "content-type": "application/json", "x-forwarded-for": forwarded})
    print(conn.getresponse().status)
    """
)


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[AgentApi]:
    """A real agent (HTTP on 127.0.0.1) run by root, as on a fleet host."""
    config = AgentConfig(
        data_dir=tmp_path / "agent", http_port=0, docker=False, tool_runner=recorded_tools(False)
    )
    async with start_agent(config) as context:
        base = f"http://127.0.0.1:{context.http_port}{API_PREFIX}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            yield AgentApi(http, config.data_dir)


def _agent_port(agent: AgentApi) -> int:
    port = agent.http.base_url.port
    assert port is not None
    return port


async def test_forwarded_for_naming_roots_open_connection_is_refused(agent: AgentApi) -> None:
    uid = probe_uid()
    port = _agent_port(agent)
    with socket.create_connection(("127.0.0.1", port)) as roots:  # root's, ESTABLISHED
        named = f"127.0.0.1:{roots.getsockname()[1]}"
        status = await run_as(uid, ATTACK, str(port), named, API_PREFIX)
    assert status.strip() == "403", "the agent believed X-Forwarded-For"
    assert (await agent.http.get("/jobs")).json() == [], "the attacker's job was accepted"


async def test_forwarded_for_naming_a_time_wait_row_is_refused(agent: AgentApi) -> None:
    uid = probe_uid()
    status = await run_as(uid, ATTACK, str(_agent_port(agent)), "own-closed", API_PREFIX)
    assert status.strip() == "403", "a TIME_WAIT row (uid 0) let the attacker in"
    assert (await agent.http.get("/jobs")).json() == [], "the attacker's job was accepted"


async def test_the_agents_own_user_is_still_served(agent: AgentApi) -> None:
    response = await agent.http.get("/healthcheck")
    assert response.status_code == 200
