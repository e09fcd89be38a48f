"""Which process an SSH session enters a sandboxed job through (`job_leader`).

A job's session leader is bubblewrap's outer process; its first child is the sandbox's
PID 1, which is bubblewrap itself until it has built the mount namespace and exec'd the
job's wrapper. A session that entered it earlier saw a half-made root (seen in CI: `ssh`
into a job the moment it was reported running exited 1). Here the same tree is made of
real processes: a leader whose child waits, as the same executable, before it execs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.server.executors import proctable
from agent.server.executors.process import _write_identity, job_leader, wait_job_leader
from agent.server.store import JobFiles

LEADER = """
import os, sys, time
go = sys.argv[1]
child = os.fork()
if child == 0:
    while not os.path.exists(go):  # 'bubblewrap building the sandbox'
        time.sleep(0.01)
    os.execv("/bin/sleep", ["sleep", "60"])  # 'the job's wrapper'
os.waitpid(child, 0)
"""


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], JobFiles, Path]]:
    go = tmp_path / "go"
    leader = subprocess.Popen([sys.executable, "-c", LEADER, str(go)], start_new_session=True)
    files = JobFiles(tmp_path / "job")
    files.root.mkdir()
    stat = proctable.read_stat(leader.pid)
    assert stat is not None
    _write_identity(files, leader.pid, stat.start_ticks)
    try:
        yield leader, files, go
    finally:
        leader.kill()
        subprocess.run(["pkill", "-KILL", "-s", str(leader.pid)], check=False)
        leader.wait()


def _child(pid: int) -> int | None:
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(found[0]) if found else None


def _poll(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not callable(check) or not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_a_sandbox_still_being_built_is_not_entered(
    tree: tuple[subprocess.Popen[bytes], JobFiles, Path],
) -> None:
    leader, files, go = tree
    _poll(lambda: _child(leader.pid) is not None)  # the inner process exists, not yet exec'd
    assert job_leader(files) is None
    go.touch()
    child = _child(leader.pid)
    _poll(lambda: job_leader(files) is not None)
    assert job_leader(files) == child


async def test_a_session_waits_for_the_sandbox_and_gives_up_when_the_job_ends(
    tree: tuple[subprocess.Popen[bytes], JobFiles, Path],
) -> None:
    leader, files, go = tree
    _poll(lambda: _child(leader.pid) is not None)
    go.touch()
    assert await wait_job_leader(files) == _child(leader.pid)
    leader.kill()
    leader.wait()
    assert await wait_job_leader(files, within=30.0) is None  # gone: no wait to the deadline
