"""A process job of another account gets that account whole, whichever way the agent
switches to it: `setpriv` (util-linux, spares the agent a fork per job) or Python's own
switch (a host without `setpriv`). Real processes, run by the process executor as root.

The job's attack: read its own ids from /proc and try to set its uid back to root.
"""

from __future__ import annotations

import asyncio
import pwd
import shutil
from pathlib import Path

import pytest

from agent.protocol import JobSpec, JobState, JobStatus
from agent.server.executors.process import ProcessExecutor
from agent.server.jobaccount import JobAccount
from agent.server.store import JobStore, StoredJob
from tests.services.missing import need, needs_root

IDS = "grep -E '^(Uid|Gid|Groups):' /proc/self/status | tr -s '\\t' ' '"
TAKE_ROOT = "perl -e '$< = 0; $> = 0; print $> == 0 ? qq(ROOT\\n) : qq(still-user\\n)'"


@needs_root("running a job as another user")
@pytest.mark.parametrize("switcher", ["setpriv", None])
async def test_a_job_cannot_take_the_agents_root_back(tmp_path: Path, switcher: str | None) -> None:
    if switcher is not None:
        found = shutil.which(switcher)
        need(found is not None, "util-linux's setpriv", "apt-get install util-linux")
        assert found is not None
        switcher = found
    nobody = pwd.getpwnam("nobody")
    work = tmp_path / "work"
    work.mkdir()
    account = JobAccount("nobody", work_root=work, switcher=switcher)
    job_id = f"switch-{'setpriv' if switcher else 'python'}"
    spec = JobSpec(id=job_id, run_name="run", commands=[f"{IDS}; {TAKE_ROOT}"])
    files = JobStore(tmp_path / "data").create(
        StoredJob(spec=spec, state=JobState(id=job_id, status=JobStatus.PENDING))
    )
    executor = ProcessExecutor(account)
    await executor.launch(spec, files)
    assert await asyncio.wait_for(executor.wait(spec, files), 60) == 0
    uid, gid = nobody.pw_uid, nobody.pw_gid
    assert files.log.read_text() == (
        f"Uid: {uid} {uid} {uid} {uid}\nGid: {gid} {gid} {gid} {gid}\nGroups: \nstill-user\n"
    )
