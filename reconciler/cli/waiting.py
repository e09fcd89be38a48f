"""Waiting for runs and printing their logs (shared by `apply`, `attach`, `logs`).

`wait_started` polls the run (1 s five times, then every 2 s, like dstack CLI polls 1 s five times
then slower) under a spinner that names the current status (submitted, provisioning,
pulling…) until it is running or has finished. `print_logs` writes a job's log bytes to
stdout, either what exists now or following it live until the job ends. `follow_run` is
attached mode: wait, then follow the logs; Ctrl-C detaches and leaves the run running.
"""

from __future__ import annotations

import itertools
import sys
import time

from reconciler.api import Client
from reconciler.api import models as wire
from reconciler.cli.console import err, out, spinner

FINISHED = ("terminated", "failed", "done")


def _intervals() -> itertools.chain[float]:
    return itertools.chain(itertools.repeat(1.0, 5), itertools.repeat(2.0))


def job_status(run: wire.Run) -> str:
    sub = run.latest_job_submission
    return sub.status if sub is not None else run.status


def wait_started(client: Client, name: str, *, poll: float | None = None) -> wire.Run:
    """Poll until the run's first job runs or the run finishes; returns the last state."""
    intervals = itertools.repeat(poll) if poll else _intervals()
    run = client.get_run(name)
    with spinner(f"Waiting for {name} to start"):
        while run.status not in FINISHED and job_status(run) != "running":
            time.sleep(next(intervals))
            run = client.get_run(name)
    return run


def wait_finished(client: Client, name: str, *, within: float = 60.0) -> wire.Run:
    """The run once finished (its jobs ended moments ago), or as it is after `within` s."""
    deadline = time.monotonic() + within
    run = client.get_run(name)
    while run.status not in FINISHED and time.monotonic() < deadline:
        time.sleep(0.5)
        run = client.get_run(name)
    return run


def wait_fleet(client: Client, name: str, *, within: float = 900.0) -> wire.Fleet:
    """Poll (spinner) until the fleet has a ready instance or has failed."""
    deadline = time.monotonic() + within
    intervals = _intervals()
    with spinner(f"Provisioning fleet {name}"):
        while True:
            fleet = client.get_fleet(name)
            ready = any(i.status in ("idle", "busy") for i in fleet.instances)
            if ready or fleet.status in ("failed", "terminated") or time.monotonic() > deadline:
                return fleet
            time.sleep(min(next(intervals), 1.0))


def print_logs(
    client: Client, name: str, *, job_num: int = 0, replica_num: int = 0, follow: bool
) -> int:
    """Write the job's log to stdout; returns the number of bytes written."""
    written = 0
    if follow:
        for data in client.stream_logs(name, job_num=job_num, replica_num=replica_num):
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            written += len(data)
        return written
    offset = 0
    while True:
        data, chunk = client.poll_logs(
            name, job_num=job_num, replica_num=replica_num, offset=offset
        )
        if not data:
            sys.stdout.buffer.flush()
            return written
        sys.stdout.buffer.write(data)
        written += len(data)
        offset = chunk.next_offset


def describe_end(run: wire.Run) -> str:
    sub = run.latest_job_submission
    detail = run.termination_reason or (sub.termination_reason if sub else None) or ""
    exit_status = f", exit status {sub.exit_status}" if sub and sub.exit_status is not None else ""
    return f"Run {run.run_spec.get('run_name')} {run.status}" + (
        f" ({detail}{exit_status})" if detail or exit_status else ""
    )


def announce_service(client: Client, run: wire.Run) -> None:
    """dstack's "Service is published at URL" (and the OpenAI-compatible base URL)."""
    if run.service is None or run.status in FINISHED:
        return
    base = "" if run.service.url.startswith("http") else client.url
    out().print(f"Service is published at {base}{run.service.url}")
    if run.service.model is not None:
        model = run.service.model
        model_base = "" if model.base_url.startswith("http") else client.url
        out().print(f"Model {model.name} is published at {model_base}{model.base_url}")


def follow_run(client: Client, name: str) -> None:
    """Attached mode: wait for the run, stream its logs; Ctrl-C detaches."""
    try:
        run = wait_started(client, name)
        announce_service(client, run)
        print_logs(client, name, follow=run.status not in FINISHED)
        out().print(describe_end(wait_finished(client, name)))
    except KeyboardInterrupt:
        err().print(f"Detached. {name} keeps running; stop it with `dockyard stop {name}`.")
