"""Job start latency of the host agent (submit -> running), as JSON on stdout.

Runs a real agent in-process (HTTP on 127.0.0.1, a temp data dir) and submits short jobs
(``true``) over HTTP, one after another, then a burst submitted at once. For each job:

- ``agent_ms``: from sending ``POST /jobs`` to the agent's ``started_at`` (the agent's
  own record of when the process or container was running);
- ``observed_ms``: from sending ``POST /jobs`` until a client polling ``GET /jobs/{id}``
  every 2 ms sees ``running`` or later.

Executors: ``process`` always; ``docker`` when an engine answers (``DOCKER_HOST`` or the
default socket), with the test image built by ``docker import`` (see
``tests/services/docker.py``) unless ``--image`` names a local image.

``process_sandbox`` (root with bubblewrap only): two agents side by side, one sandboxing
its process jobs (bubblewrap, a uid per job: what a root agent does by default), one
started as with ``--unsandboxed-process-jobs`` (the job account, no sandbox); jobs
alternate between them, one at a time, and each also reports ``first_output_ms`` (submit
-> the job's first line in its log). ``ratio_p50`` is sandboxed over unsandboxed. Run:

    .venv/bin/python bench/agent_start.py [--jobs 20] [--burst 10] [--image IMAGE]
        [--sandbox-only]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import httpx  # noqa: E402

from agent.__main__ import job_account  # noqa: E402
from agent.protocol import API_PREFIX, JobState, JobStatus  # noqa: E402
from agent.server.jobaccount import JobAccount  # noqa: E402
from agent.server.serving import AgentConfig, start_agent  # noqa: E402

STARTED = {JobStatus.RUNNING, JobStatus.EXITED, JobStatus.TERMINATED}


async def start_one(http: httpx.AsyncClient, spec: dict[str, Any]) -> dict[str, float]:
    sent = time.time()
    response = await http.post("/jobs", json=spec)
    response.raise_for_status()
    while True:
        state = JobState.model_validate_json((await http.get(f"/jobs/{spec['id']}")).content)
        if state.status in STARTED:
            observed = time.time()
            break
        if state.status == JobStatus.FAILED:
            raise RuntimeError(f"job {spec['id']} failed: {state.message}")
        await asyncio.sleep(0.002)
    assert state.started_at is not None
    return {"agent_ms": (state.started_at - sent) * 1000, "observed_ms": (observed - sent) * 1000}


async def first_output(http: httpx.AsyncClient, spec: dict[str, Any]) -> dict[str, float]:
    """`start_one`, and the time until the job's first output line is in its log."""
    sent = time.time()
    sample = await start_one(http, spec)
    while True:
        if (await http.get(f"/jobs/{spec['id']}/logs")).content:
            break
        await asyncio.sleep(0.002)
    return {**sample, "first_output_ms": (time.time() - sent) * 1000}


def summarize(samples: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"jobs": len(samples)}
    for key in ("agent_ms", "observed_ms", "first_output_ms"):
        if not samples or key not in samples[0]:
            continue
        values = sorted(sample[key] for sample in samples)
        out[key] = {
            "p50": round(statistics.median(values), 1),
            "p95": round(values[min(len(values) - 1, int(len(values) * 0.95))], 1),
            "max": round(values[-1], 1),
        }
    return out


async def measure(
    http: httpx.AsyncClient, base: dict[str, Any], prefix: str, jobs: int, burst: int
) -> dict[str, Any]:
    sequential = [await start_one(http, {**base, "id": f"{prefix}-{n}"}) for n in range(jobs)]
    burst_samples = await asyncio.gather(
        *(start_one(http, {**base, "id": f"{prefix}-b{n}"}) for n in range(burst))
    )
    return {"sequential": summarize(sequential), "burst": summarize(list(burst_samples))}


def docker_image(requested: str | None) -> tuple[str | None, str | None]:
    """The image to use and, when docker cannot be measured, why."""
    import docker

    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as error:
        return None, f"no Docker engine answers: {type(error).__name__}"
    try:
        if requested:
            client.images.get(requested)
            return requested, None
        from tests.services.docker import BUSYBOX, ensure_test_image

        if not BUSYBOX.is_file():
            return None, f"{BUSYBOX} missing (apt-get install busybox-static)"
        return ensure_test_image(client), None
    finally:
        client.close()


def _without_bwrap(name: str) -> str | None:
    return None if name == "bwrap" else shutil.which(name)


async def sandbox_side_by_side(jobs: int) -> dict[str, Any]:
    """Process job starts with the sandbox and without, alternating, on this host."""
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        return {"skipped": "needs root and bubblewrap (bwrap)"}
    with tempfile.TemporaryDirectory(prefix="dockyard-bench-") as tmp:
        root = Path(tmp)
        accounts: dict[str, JobAccount] = {
            "sandboxed": job_account("auto", root / "work-s", root / "s", hidden=(root / "s",)),
            "unsandboxed": job_account(
                "auto", root / "work-u", root / "u", unsandboxed=True, which=_without_bwrap
            ),
        }
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in accounts}
        async with contextlib.AsyncExitStack() as stack:
            clients: dict[str, httpx.AsyncClient] = {}
            for name, account in accounts.items():
                config = AgentConfig(
                    data_dir=root / name[0], http_port=0, docker=False, job_account=account
                )
                context = await stack.enter_async_context(start_agent(config))
                base_url = f"http://127.0.0.1:{context.http_port}{API_PREFIX}"
                clients[name] = await stack.enter_async_context(
                    httpx.AsyncClient(base_url=base_url, timeout=60)
                )
            spec = {"run_name": "bench", "executor": "process", "commands": ["echo up"]}
            for n in range(jobs + 2):  # the first round of each warms up, not counted
                for name, http in clients.items():
                    sample = await first_output(http, {**spec, "id": f"{name[0]}-{n}"})
                    if n >= 2:
                        samples[name].append(sample)
            for http in clients.values():
                for state in (await http.get("/jobs")).json():
                    await wait_and_remove(http, state["id"])
    out: dict[str, Any] = {name: summarize(values) for name, values in samples.items()}
    for key in ("agent_ms", "first_output_ms"):
        ratio = out["sandboxed"][key]["p50"] / max(out["unsandboxed"][key]["p50"], 1e-9)
        out[f"ratio_p50_{key}"] = round(ratio, 2)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--image", default=None, help="a local image for the docker executor")
    parser.add_argument("--sandbox-only", action="store_true", help="only process_sandbox")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "bench": "agent_start",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    results["process_sandbox"] = await sandbox_side_by_side(args.jobs)
    if args.sandbox_only:
        json.dump(results, sys.stdout, indent=2)
        print()
        return
    image, docker_problem = docker_image(args.image)
    with tempfile.TemporaryDirectory(prefix="dockyard-bench-") as tmp:
        config = AgentConfig(data_dir=Path(tmp), http_port=0, docker=image is not None)
        async with start_agent(config) as context:
            base_url = f"http://127.0.0.1:{context.http_port}{API_PREFIX}"
            async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
                process = {"run_name": "bench", "executor": "process", "commands": ["true"]}
                results["process"] = await measure(http, process, "p", args.jobs, args.burst)
                if image is not None:
                    container = {**process, "executor": "docker", "image": image}
                    results["docker"] = await measure(http, container, "d", args.jobs, args.burst)
                    results["docker"]["image"] = image
                else:
                    results["docker"] = {"skipped": docker_problem}
                for state in (await http.get("/jobs")).json():  # remove containers
                    await wait_and_remove(http, state["id"])
    json.dump(results, sys.stdout, indent=2)
    print()


async def wait_and_remove(http: httpx.AsyncClient, job_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (await http.delete(f"/jobs/{job_id}")).status_code == 204:
            return
        await asyncio.sleep(0.05)


if __name__ == "__main__":
    asyncio.run(main())
