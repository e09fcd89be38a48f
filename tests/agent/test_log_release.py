"""The agent gives back the disk blocks of the log prefix the server says it has stored
(`ack`), keeping the file's size and every later byte where it was."""

from __future__ import annotations

import os
from pathlib import Path

from agent.server.logs import release_log
from tests.agent.conftest import AgentApi

SIZE = 3 * 1024 * 1024


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


async def test_acknowledged_log_bytes_give_their_disk_back(agent: AgentApi) -> None:
    command = f"head -c {SIZE} /dev/zero | tr '\\\\0' x; echo; echo end"
    assert (await agent.submit(id="chatty", commands=[command])).status_code == 200
    await agent.wait_finished("chatty")
    [log] = list(agent.data_dir.rglob("chatty/**/output.log")) or list(
        agent.data_dir.rglob("output.log")
    )
    whole = await agent.read_log("chatty")
    assert len(whole) == SIZE + len("\nend\n") and _allocated(log) >= SIZE

    ack = SIZE - 10_000
    answer = await agent.http.get("/jobs/chatty/logs", params={"offset": ack, "ack": ack})
    assert answer.content == whole[ack:]
    assert os.stat(log).st_size == len(whole)  # offsets stay valid
    assert _allocated(log) < 64 * 1024  # the stored prefix's blocks went back
    assert await agent.read_log("chatty", offset=ack) == whole[ack:]

    ignored = await agent.http.get("/jobs/chatty/logs", params={"offset": 0, "ack": SIZE})
    assert ignored.status_code == 200  # an ack past the offset read is ignored


def test_release_rounds_down_to_whole_blocks(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    path.write_bytes(b"a" * 10_000)
    assert release_log(path, 9_000) == 8192
    data = path.read_bytes()
    assert data[:8192] == b"\0" * 8192 and data[8192:] == b"a" * (10_000 - 8192)
    assert release_log(path, 100) == 0 and release_log(tmp_path / "missing", 9_000) == 0
