"""The agent's API serves only its own user (and root, and `--allow-user` names): another
local account gets 403, checked against a real agent from a process of another user."""

from __future__ import annotations

import asyncio
import os
import textwrap
from pathlib import Path

import pytest

from agent.server.peers import allowed_uids, established_socket
from tests.agent.conftest import AgentApi
from tests.services.missing import needs, needs_root

TABLE = b"""  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid
   0: 0100007F:2AF8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 11 1
   1: 0100007F:D431 0100007F:2AF8 01 00000000:00000000 00:00000000 00000000  1001        0 12 1
   2: 0100007F:2AF8 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 13 1
   3: 0100007F:D432 0100007F:2AF8 06 00000000:00000000 03:00001770 00000000     0        0 0 3
"""


def established_owner(table: bytes, client: tuple[str, int], server: tuple[str, int]) -> int | None:
    found = established_socket(table, client, server)
    return found[0] if found else None


def test_the_owner_is_the_client_side_of_an_established_connection() -> None:
    agent = ("127.0.0.1", 0x2AF8)
    assert established_owner(TABLE, ("127.0.0.1", 0xD431), agent) == 1001
    own_end = established_owner(TABLE, agent, ("127.0.0.1", 0xD431))
    assert own_end == 0, "the agent's own end is another line"
    assert established_owner(TABLE, ("127.0.0.1", 0xD433), agent) is None
    time_wait = established_owner(TABLE, ("127.0.0.1", 0xD432), agent)
    assert time_wait is None, "a TIME_WAIT row (uid 0) belongs to nobody"


def test_allowed_users_are_resolved_or_refused() -> None:
    assert allowed_uids(["nobody"]) >= {os.getuid(), 0, 65534}
    with pytest.raises(ValueError, match="no-such-user-here"):
        allowed_uids(["no-such-user-here"])


CALL = textwrap.dedent(
    """
    import sys, urllib.request, urllib.error
    try:
        urllib.request.urlopen(sys.argv[1], timeout=10)
        print(200)
    except urllib.error.HTTPError as error:
        print(error.code)
    """
)


# The system's interpreter: the test's may live under a home other users cannot enter.
SYSTEM_PYTHON = Path("/usr/bin/python3")


async def _status_as(user: int, url: str) -> int:
    """The status a process of `user` gets (the agent answers on this event loop)."""
    done = await asyncio.create_subprocess_exec(
        str(SYSTEM_PYTHON),
        "-c",
        CALL,
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        user=user,
        cwd="/",
    )
    async with asyncio.timeout(30):
        out, err = await done.communicate()
    assert done.returncode == 0, err.decode()
    return int(out.decode().strip())


@needs_root("switching to another user")
@needs(SYSTEM_PYTHON.exists(), "/usr/bin/python3 for the other user", "apt-get install python3")
async def test_another_local_user_is_refused(agent: AgentApi) -> None:
    url = f"{agent.http.base_url}healthcheck"
    own = await agent.http.get("healthcheck")
    assert own.status_code == 200, "the agent's own user is served"
    assert await _status_as(65534, url) == 403, "nobody may not call the agent"
    jobs = f"{agent.http.base_url}jobs"
    assert await _status_as(65534, jobs) == 403
