"""N sleeping process jobs on a real agent, all force-stopped at once, as JSON.

Starts ``python -m agent serve`` (its own process, process executor, jobs as this user)
on a temporary data dir, submits N jobs ``sleep 3600`` and waits until all run, then
sends the N stops at once (``POST /jobs/<id>/stop {"force": true}``, all in flight
together) while another client asks ``GET /healthcheck`` every 50 ms. Prints:

- ``seconds_to_all_stopped``: from the first stop to every job `terminated`;
- ``healthcheck_during_stop``: latency p50/p99/max in ms and how many took over 5 s (the
  server's local-agent check gives up at 9 s; before kills shared their /proc reads,
  1,000 stops kept the agent silent for minutes);
- ``left_processes``: processes still carrying the jobs' marker at the end (goal 0);
- the load average beside (the VM is shared).

    .venv/bin/python bench/agent_stop.py [--jobs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.protocol import API_PREFIX  # noqa: E402
from agent.server.executors import proctable  # noqa: E402
from agent.server.jobaccount import agent_tag  # noqa: E402


async def _until(check: Any, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.5)
    return False


async def _health(http: httpx.AsyncClient, done: asyncio.Event) -> list[float]:
    samples = []
    while not done.is_set():
        started = time.perf_counter()
        with contextlib.suppress(httpx.HTTPError):
            await http.get("/healthcheck", timeout=60)
        samples.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.05)
    return samples


def _spawn(data: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "agent", "serve", "--data-dir", str(data)]
    argv += ["--http-port", "0", "--job-user", "self", "--no-docker"]
    with open(data.parent / "agent.log", "wb") as log:
        return subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def _finish(agent: subprocess.Popen[bytes], data: Path) -> int:
    """Stop the agent; kill what its jobs left (ours only: this data dir's tag)."""
    agent.terminate()
    agent.wait(timeout=60)
    left = proctable.marked_processes(agent_tag(data))
    for stats in left.values():
        for stat in stats:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stat.pid, signal.SIGKILL)
    return sum(len(stats) for stats in left.values())


async def measure(data: Path, jobs: int) -> dict[str, Any]:
    ids = [f"bench-stop-{os.getpid()}-{i}" for i in range(jobs)]
    result: dict[str, Any] = {"bench": "agent_stop", "jobs": jobs}
    info = data / "agent.json"

    async def serving() -> bool:
        return info.exists()

    await _until(serving, 60)
    port = json.loads(info.read_text())["http_port"]
    base = f"http://127.0.0.1:{port}{API_PREFIX}"
    limits = httpx.Limits(max_connections=jobs + 10)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as http:
        for job_id in ids:
            body = {"id": job_id, "run_name": "bench", "commands": ["sleep 3600"]}
            (await http.post("/jobs", json=body)).raise_for_status()

        async def all_in(*statuses: str) -> bool:
            states = (await http.get("/jobs")).json()
            return sum(s["status"] in statuses for s in states) >= jobs

        result["all_running"] = await _until(lambda: all_in("running"), 600)
        result["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
        done = asyncio.Event()
        async with httpx.AsyncClient(base_url=base) as probe:
            watcher = asyncio.create_task(_health(probe, done))
            started = time.monotonic()
            stops = [http.post(f"/jobs/{i}/stop", json={"force": True}) for i in ids]
            await asyncio.gather(*stops)
            finished = await _until(lambda: all_in("terminated"), 900)
            result["seconds_to_all_stopped"] = round(time.monotonic() - started, 1)
            result["all_stopped"] = finished
            done.set()
            samples = sorted(await watcher)
        result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        result["healthcheck_during_stop"] = {
            "requests": len(samples),
            "p50_ms": round(statistics.median(samples), 1),
            "p99_ms": round(samples[max(0, int(len(samples) * 0.99) - 1)], 1),
            "max_ms": round(samples[-1], 1),
            "over_5s": sum(s > 5000 for s in samples),
        }
    return result


def main(args: Any) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="dockyard-bench-agent-stop-"))
    try:
        data = root / "agent"
        data.mkdir()
        agent = _spawn(data)
        try:
            result = asyncio.run(measure(data, args.jobs))
        finally:
            left = _finish(agent, data)
        result["left_processes"] = left
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["machine"] = {"cpus": os.cpu_count()}
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    print(json.dumps(main(parser.parse_args()), indent=2))
