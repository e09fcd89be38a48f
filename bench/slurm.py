"""Slurm fleets on a real one-node cluster: start latency and tiny-task throughput, as JSON.

Starts what tests/clusters/test_slurm_fleet.py uses (a one-node Slurm cluster of Debian's
slurmctld/slurmd/munge, the tests' sshd as its login node, and the server the composition
root builds, with a backends file naming that login node), then measures:

- ``sbatch_ms``: `sbatch --wrap true` → Slurm no longer says PENDING (polling `squeue`
  every 20 ms), `--runs` times: the cluster's own start latency;
- ``dockyard_ms``: a fleet of one node (`backends: [slurm]`) and a task on it applied
  through the API → the task's job is `running` (allocation, agent start and the job
  included), `--runs` times; each fleet is deleted (scancel) before the next;
- ``tasks_per_s``: `--tasks` tiny tasks (`echo`) submitted at once to one allocation →
  all `done`.

Run (root, the Slurm packages installed: scripts/setup.sh --dev):

    .venv/bin/python bench/slurm.py [--runs 20] [--tasks 100]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.services.slurm import SlurmCluster, slurm_cluster  # noqa: E402
from tests.services.sshd import make_client_key, start_sshd  # noqa: E402
from tests.web.serving import Running, running_server  # noqa: E402

FLEET = (
    "type: fleet\nname: {name}\nbackends: [slurm]\nnodes: 1\n"
    "resources:\n  cpu: 1..\n  memory: 256MB..\n"
)
TASK = "type: task\nname: {name}\nfleets: [{fleet}]\ncommands:\n  - {command}\n"


def _wait(condition: Callable[[], bool], timeout: float, what: str, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(every)


def _api(server: Running, path: str, body: dict[str, Any]) -> Any:
    with server.client(server.admin_token) as http:
        answer = http.post(f"/api/project/main/{path}", json=body)
    if answer.status_code != 200:
        raise RuntimeError(f"{path}: {answer.status_code} {answer.text}")
    return answer.json()


def _job_status(server: Running, run: str) -> str:
    with server.client(server.admin_token) as http:
        got = http.post("/api/project/main/runs/get", json={"run_name": run})
    if got.status_code != 200 or not got.json().get("jobs"):
        return "missing"
    return str(got.json()["jobs"][0]["job_submissions"][-1]["status"])


def _squeue_state(slurm: SlurmCluster, job_id: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
        env=slurm.env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip()


def _started(slurm: SlurmCluster, job_id: str) -> bool:
    return _squeue_state(slurm, job_id) not in ("PENDING", "")


def _job_in(server: Running, run: str, statuses: tuple[str, ...]) -> bool:
    return _job_status(server, run) in statuses


def sbatch_latency(slurm: SlurmCluster, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.monotonic()
        job_id = slurm.run(
            "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "--mem=64M",
            "--wrap", "true",
        ).strip()  # fmt: skip
        _wait(functools.partial(_started, slurm, job_id), 120, "sbatch")
        times.append((time.monotonic() - started) * 1000)
    return times


def dockyard_latency(server: Running, slurm: SlurmCluster, runs: int) -> list[float]:
    times = []
    for n in range(runs):
        fleet, run = f"lat-{n}", f"lat-task-{n}"
        started = time.monotonic()
        _api(server, "fleets/apply", {"text": FLEET.format(name=fleet), "path": f"{fleet}.yml"})
        text = TASK.format(name=run, fleet=fleet, command="sleep 120")
        _api(server, "runs/apply", {"text": text, "path": f"{run}.yml"})
        _wait(functools.partial(_job_in, server, run, ("running", "done")), 300, run, every=0.05)
        times.append((time.monotonic() - started) * 1000)
        _api(server, "runs/stop", {"runs_names": [run], "abort": True})
        _wait(functools.partial(_job_in, server, run, ("terminated", "aborted", "failed", "done")),
              60, "stop")  # fmt: skip
        _api(server, "fleets/delete", {"names": [fleet]})
        _wait(lambda: "dockyard" not in slurm.run("squeue", "-h", "-o", "%j"), 60, "scancel")
    return times


def tiny_tasks(server: Running, tasks: int) -> dict[str, float]:
    _api(server, "fleets/apply", {"text": FLEET.format(name="tiny"), "path": "tiny.yml"})
    with server.client(server.admin_token) as http:

        def ready() -> bool:
            got = http.post("/api/project/main/fleets/get", json={"name": "tiny"}).json()
            return any(i["status"] in ("idle", "busy") for i in got.get("instances", []))

        _wait(ready, 300, "the tiny fleet", every=0.1)
    started = time.monotonic()
    names = [f"tiny-{n}" for n in range(tasks)]
    for name in names:
        text = TASK.format(name=name, fleet="tiny", command="echo tiny")
        _api(server, "runs/apply", {"text": text, "path": f"{name}.yml"})
    _wait(lambda: all(_job_status(server, n) == "done" for n in names), 900, "tiny", every=0.5)
    elapsed = time.monotonic() - started
    _api(server, "fleets/delete", {"names": ["tiny"]})
    return {"tasks": tasks, "seconds": round(elapsed, 1), "tasks_per_s": round(tasks / elapsed, 2)}


def _summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p90": round(ordered[max(0, int(len(ordered) * 0.9) - 1)], 1),
        "max": round(ordered[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dockyard-slurm-bench-") as tmp_name:
        tmp = Path(tmp_name)
        with slurm_cluster(tmp / "slurm") as slurm:
            login = start_sshd(
                tmp / "sshd", make_client_key(tmp / "client"), extra_config=slurm.login_config()
            )
            try:
                backends = tmp / "backends.yml"
                backends.write_text(
                    "projects:\n- name: main\n  backends:\n  - type: slurm\n    clusters:\n"
                    f"    - name: hpc\n      hostname: 127.0.0.1\n      port: {login.port}\n"
                    f"      user: {login.user}\n"
                    f"      private_key: {{path: {login.identity_file}}}\n"
                    "      cpu_partitions: [cpu]\n"
                )
                settings = {"backends_config": backends, "ssh_agent_dir": str(tmp / "agent")}
                with running_server(tmp / "server", None, **settings) as server:
                    sbatch = sbatch_latency(slurm, args.runs)
                    dockyard = dockyard_latency(server, slurm, args.runs)
                    tiny = tiny_tasks(server, args.tasks)
            finally:
                subprocess.run(["scancel", "-u", "root"], env=slurm.env, check=False)
                login.stop()
    print(json.dumps({
        "cluster": "one node (this machine), login node over loopback sshd",
        "runs": args.runs,
        "sbatch_wrap_true_to_running_ms": _summary(sbatch),
        "dockyard_apply_to_job_running_ms": _summary(dockyard),
        "tiny_tasks_one_allocation": tiny,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
