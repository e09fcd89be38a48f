"""Dev environments' `inactivity_duration` on the real local agent and its SSH server."""

from __future__ import annotations

import time

import asyncssh
import pytest

from reconciler.adapters.db.models import Run
from tests.e2e.runs_harness import Harness

pytestmark = pytest.mark.timeout(120)

DEV = "type: dev-environment\nname: {name}\ninactivity_duration: 2s\n"


def _job_status(h: Harness, run: Run) -> str:
    jobs = h.jobs_of(run.id)
    return jobs[-1].status if jobs else ""


async def test_an_unused_dev_environment_ends_inactivity_duration_exceeded(h: Harness) -> None:
    run = h.submit(DEV.format(name="idle"))
    await h.until(lambda: _job_status(h, run) == "running")
    await h.until(lambda: h.run(run.id).status in ("terminated", "failed"), within=20)
    jobs = h.jobs_of(run.id)
    assert [j.termination_reason for j in jobs] == ["inactivity_duration_exceeded"]
    assert jobs[0].status == "terminated"
    # not self-healed: no new submission after the run settled
    await h.step()
    assert len(h.jobs_of(run.id)) == 1


async def test_an_open_ssh_session_keeps_it_running(h: Harness) -> None:
    run = h.submit(DEV.format(name="busy"))
    await h.until(lambda: _job_status(h, run) == "running")
    target = h.local.target
    async with asyncssh.connect(
        target.hostname,
        target.port,
        username="busy",
        client_keys=[str(h.key)],
        known_hosts=None,
        config=None,
    ) as conn:
        session = await conn.create_process("cat")  # open until its stdin closes
        kept_until = time.monotonic() + 4.0  # twice the limit
        await h.until(
            lambda: (
                time.monotonic() > kept_until
                and (h.jobs_of(run.id)[0].runtime or {}).get("idle_seconds") == 0.0
            ),
            within=20,
        )
        [job] = h.jobs_of(run.id)
        assert job.status == "running", h.describe()
        session.stdin.write_eof()
        await session.wait()
    await h.until(lambda: h.jobs_of(run.id)[0].status == "terminated", within=20)
    [job] = h.jobs_of(run.id)
    assert job.termination_reason == "inactivity_duration_exceeded"
