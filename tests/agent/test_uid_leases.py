"""Stale uid leases are reclaimed, and a live one never is (agent/server/uidleases.py).

Real holders: another Python process leases a uid the way an agent does, then is killed
with SIGKILL (an agent killed mid-job); a real process switched to the uid with `setpriv`
stands for the job still running. The pool has one slot, so any uid handed out twice
would show at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.server.uidleases import Identities, IdentityError
from tests.services.missing import needs_root

pytestmark = needs_root("leases files root owns and processes of another uid")

BASE = 1_900_000_000  # a uid no account of the host has
REPO = Path(__file__).resolve().parents[2]

HOLDER = """
import sys
from pathlib import Path
from typing import Any
from agent.server.uidleases import Identities
leases, root, work = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
uid = Identities(base=int(sys.argv[4]), slots=1, lease_dir=leases).lease("held-job", root, work)
print(uid, flush=True)
sys.stdin.read()  # holds the lease until killed
"""


@pytest.fixture
def pool(tmp_path: Path) -> Identities:
    return Identities(base=BASE, slots=1, lease_dir=tmp_path / "uids")


def _job_dirs(tmp_path: Path, name: str) -> tuple[Path, Path]:
    root, work = tmp_path / name / "root", tmp_path / name / "work"
    root.mkdir(parents=True)
    work.mkdir(mode=0o700)
    return root, work


@pytest.fixture
def holder(tmp_path: Path, pool: Identities) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A live agent holding the pool's only uid for `held-job` (its work dir the uid's)."""
    root, work = _job_dirs(tmp_path, "held")
    argv = [sys.executable, "-c", HOLDER, str(pool.lease_dir), str(root), str(work), str(BASE)]
    proc = subprocess.Popen(
        argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert int(proc.stdout.readline()) == BASE
    os.chown(work, BASE, BASE)  # what the job's start does
    yield proc, work
    proc.kill()
    proc.wait()


def _kill(proc: subprocess.Popen[Any]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_a_uid_held_by_a_live_agent_is_never_given_again(
    tmp_path: Path, pool: Identities, holder: tuple[subprocess.Popen[str], Path]
) -> None:
    root, work = _job_dirs(tmp_path, "second")
    with pytest.raises(IdentityError, match="no free uid"):
        pool.lease("second-job", root, work)
    assert pool.reclaim_stale() == []
    assert (pool.lease_dir / str(BASE)).exists()


def test_a_killed_agents_lease_is_reclaimed_once_its_job_is_gone(
    tmp_path: Path, pool: Identities, holder: tuple[subprocess.Popen[str], Path]
) -> None:
    agent, held_work = holder
    # the job still runs as the uid after its agent is killed: not stale
    job = subprocess.Popen(
        ["setpriv", f"--reuid={BASE}", f"--regid={BASE}", "--clear-groups", "sleep", "600"]
    )
    try:
        _kill(agent)
        root, work = _job_dirs(tmp_path, "second")
        with pytest.raises(IdentityError):
            pool.lease("second-job", root, work)
    finally:
        _kill(job)
    # its job gone too: the lease is freed, its dir is root's again, the uid given anew
    assert pool.lease("second-job", root, work) == BASE
    stat = held_work.stat()
    assert (stat.st_uid, stat.st_mode & 0o777) == (0, 0o700)
    assert "second-job" in (pool.lease_dir / str(BASE)).read_text()


def test_a_job_still_starting_as_root_keeps_its_lease(
    tmp_path: Path, pool: Identities, holder: tuple[subprocess.Popen[str], Path]
) -> None:
    """A job's start runs as root until the switch: its marker keeps the lease."""
    agent, _ = holder
    env = {"PATH": os.environ["PATH"], "DOCKYARD_JOB_ID": "held-job"}
    starting = subprocess.Popen(["sleep", "600"], env=env)
    try:
        _kill(agent)
        assert pool.reclaim_stale() == []
    finally:
        _kill(starting)
    assert pool.reclaim_stale() == [BASE]


def test_a_released_job_never_frees_the_uid_another_job_got(
    tmp_path: Path, pool: Identities, holder: tuple[subprocess.Popen[str], Path]
) -> None:
    """The killed agent's job ended; its uid went to a new job; the restarted agent then
    retiring the old job must leave the new job's lease alone."""
    agent, _ = holder
    _kill(agent)
    root, work = _job_dirs(tmp_path, "second")
    assert pool.lease("second-job", root, work) == BASE
    other = Identities(base=BASE, slots=1, lease_dir=pool.lease_dir)  # the restarted agent
    other.release(tmp_path / "held" / "root")
    assert "second-job" in (pool.lease_dir / str(BASE)).read_text()
    with pytest.raises(IdentityError):  # nor does asking for the old job's uid again
        other.lease("held-job", tmp_path / "held" / "root")
