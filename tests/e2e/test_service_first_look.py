"""A service recorded running from its submit's answer is looked at again at once: that
look makes it ready (no probes) and records its ports, so the proxy routes to it. A quiet
service sends no event that would wake it, and a followed agent's jobs otherwise sleep
until their next duty (`EVENT_POLL`, 600 s).
"""

from __future__ import annotations

import socket

import pytest

from reconciler.engine.jobevents import JobEventFollower
from tests.e2e.runs_harness import Harness
from tests.e2e.test_job_end_events import followed  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_quiet_service_without_probes_is_ready_soon_after_its_start(
    h: Harness,
    followed: JobEventFollower,  # noqa: F811
) -> None:
    port = _free_port()
    run = h.submit(
        f"type: service\nname: quiet\nport: {port}\ncommands:\n"
        f"  - exec python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1\n"
    )

    def ready() -> bool:
        jobs = h.jobs_of(run.id)
        runtime = jobs[0].runtime if jobs and isinstance(jobs[0].runtime, dict) else {}
        return bool(runtime.get("ready")) and str(port) in (runtime.get("ports") or {})

    await h.until(ready)
    assert h.run(run.id).status == "running"
