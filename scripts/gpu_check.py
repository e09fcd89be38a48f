"""The GPU check: proves the agent's GPU paths on a real GPU host, end to end.

Run by ``scripts/gpu-check.sh`` on a machine with an NVIDIA GPU (results as JSON), and by
``tests/gpu/test_gpu_check.py`` in CI against a fake ``nvidia-smi`` (``--fake-load``,
``--no-torch``), so the same code paths stay covered without a GPU.

It starts ``dockyard server`` with the embedded default (SQLite, the local fleet) on a
temporary config repo and, through the server's API, checks on the local fleet:
the GPU is detected as dstack names it and shown by the offers and dstack's ``gpus/list``;
tasks asking ``gpu: <name>:1`` and ``gpu: <memory>..`` see exactly that GPU and finish; a
task asking more GPUs than the host has fails at once with dstack's no-capacity reason; a
task asking another model is never placed; two one-GPU tasks never run together; a task
keeping the GPU busy shows utilization and memory in the run's metrics (dstack's
``metrics/job`` route, sampled by the agent); a service asking a GPU serves through the
proxy. Every check is recorded with its detail; the exit status is 0 only when all pass.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.librarywarnings import show_only_our_warnings  # noqa: E402

show_only_our_warnings()  # before the client's imports (asyncssh's DSA notes)

from reconciler.api.client import Client  # noqa: E402

FINISHED = {"done", "failed", "terminated", "aborted"}
SMALL = "  cpu: 1..\n  memory: 0.1GB..\n  disk: 0.1GB..\n"
CLI = "from reconciler.cli.main import run; run()"
FAKE_LOAD_MARK = "dockyard-fake-gpu-load"  # the fake nvidia-smi reports load while it runs


class CheckFailedError(Exception):
    """One check's expectation was not met; the message says what was seen."""


@dataclass
class Results:
    checks: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def run(self, name: str, check: Callable[[], str]) -> bool:
        started = time.monotonic()
        try:
            detail, ok = check(), True
        except Exception as error:  # noqa: BLE001 -- every failure is a result, never a crash
            detail, ok = f"{type(error).__name__}: {error}", False
        seconds = round(time.monotonic() - started, 1)
        self.checks.append({"name": name, "ok": ok, "seconds": seconds, "detail": detail})
        print(f"gpu-check: {'ok  ' if ok else 'FAIL'} {name} ({seconds} s): {detail}", flush=True)
        return ok

    def as_json(self) -> dict[str, Any]:
        ok = bool(self.checks) and all(check["ok"] for check in self.checks)
        return {"ok": ok, "facts": self.facts, "checks": self.checks}


def wait_for(what: str, probe: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    """Poll `probe` until it returns something truthy; CheckFailedError after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise CheckFailedError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A `dockyard server` on a config repo declaring the local fleet, and a client of it."""

    work: Path
    process: subprocess.Popen[bytes] | None = None
    port: int = 0

    def start(self) -> Client:
        repo = self.work / "config-repo"
        repo.mkdir(parents=True)
        # The local fleet (this host), declared: the GPU checks run on it.
        (repo / "local.dstack.yml").write_text("type: fleet\nname: local\nnodes: 1\n")
        git = ["git", "-C", str(repo), "-c", "user.name=gpu", "-c", "user.email=gpu@localhost"]
        subprocess.run([*git[:3], "init", "-q", "-b", "main"], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "the local fleet"], check=True)
        self.port = free_port()
        env = {**os.environ, **self.environ()}
        command = [sys.executable, "-c", CLI]
        command += ["server", "--repo", str(repo)]
        command += ["--branch", "main", "--port", str(self.port)]
        log = (self.work / "server.log").open("wb")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log, cwd=ROOT)
        config = self.work / "cli-config.yml"
        wait_for("the server's CLI config", lambda: self._alive() and config.exists(), 60)
        url = f"http://127.0.0.1:{self.port}/healthcheck"
        wait_for("the server's /healthcheck", lambda: self._alive() and self._healthy(url), 60)
        return Client.from_config(environ=env)

    @staticmethod
    def _healthy(url: str) -> bool:
        try:
            return httpx.get(url, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def environ(self) -> dict[str, str]:
        return {
            "DOCKYARD_CONFIG": str(self.work / "cli-config.yml"),
            "DOCKYARD_DATA_DIR": str(self.work / "data"),
        }

    def _alive(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            tail = (self.work / "server.log").read_text(errors="replace")[-2000:]
            raise CheckFailedError(f"the server exited ({self.process.returncode}): {tail}")
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        from agent.local import stop_local_agent

        stop_local_agent(self.work / "data")


@dataclass
class Checker:
    client: Client
    http: httpx.Client
    torch: bool
    fake_load: bool
    facts: dict[str, Any]
    environ: dict[str, str]

    def api(self, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"/api/project/{self.client.project}/{path}"
        answer = self.http.post(url, json=body or {}) if body is not None else self.http.get(url)
        if answer.status_code >= 400:
            raise CheckFailedError(f"{path}: {answer.status_code} {answer.text[:300]}")
        return answer.json()

    def task(self, name: str, gpu: str, commands: list[str]) -> None:
        lines = "\n".join(f"  - {json.dumps(command)}" for command in commands)
        text = f"type: task\nname: {name}\ncommands:\n{lines}\nresources:\n{SMALL}  gpu: {gpu}\n"
        self.client.apply(text, path=f"{name}.dstack.yml")

    def finished(self, name: str, timeout: float = 120) -> Any:
        def probe() -> Any:
            run = self.client.get_run(name)
            return run if run.status in FINISHED else None

        return wait_for(f"run {name} to finish", probe, timeout)

    def logs(self, name: str) -> str:
        return b"".join(self.client.stream_logs(name)).decode(errors="replace")

    # -- the checks ---------------------------------------------------------------------------

    def detected(self) -> str:
        def gpus() -> list[dict[str, Any]]:
            for fleet in self.client.list_fleets():
                for instance in fleet.instances:
                    found = (instance.resources or {}).get("gpus") or []
                    if found and instance.status in {"idle", "busy"}:
                        return list(found)
            return []

        found = wait_for("the local instance with its GPUs", gpus, 90)
        self.facts["gpus"] = found
        first = found[0]
        memory_gb = round(float(first.get("memory_mib") or 0) / 1024)
        self.facts["gpu"] = {"name": first.get("name"), "memory_gb": memory_gb, "count": len(found)}
        if not re.fullmatch(r"[A-Z]+\w*", str(first.get("name"))) or memory_gb <= 0:
            raise CheckFailedError(f"the GPU is not named as dstack names it: {first}")
        return f"{len(found)} x {first.get('name')} {memory_gb}GB"

    def offered(self) -> str:
        name = self.facts["gpu"]["name"]
        command = [sys.executable, "-c", CLI, "offer", "--gpu", name, "--json"]
        shown = subprocess.run(command, env=self.environ, capture_output=True, check=False)
        offers = shown.stdout.decode(errors="replace")
        if shown.returncode != 0 or f'"{name}' not in offers:
            raise CheckFailedError(f"dockyard offer does not show {name}: {offers[:500]}")
        listed = self.api("gpus/list", {})
        if name not in json.dumps(listed):
            raise CheckFailedError(f"gpus/list does not show {name}: {json.dumps(listed)[:500]}")
        groups = [g for g in listed["gpus"] if g["name"] == name]
        return f"dockyard offer and gpus/list show {name} ({groups[0]['memory_mib']} MiB)"

    def sees_one_gpu(self, run: str, gpu: str) -> str:
        commands = ["nvidia-smi -L", 'echo "visible=$CUDA_VISIBLE_DEVICES"']
        if self.torch:
            probe = "import torch; print('torch_count=%d' % torch.cuda.device_count())"
            commands.append(f'python3 -c "{probe}"')
        self.task(run, gpu, commands)
        status = self.finished(run).status
        text = self.logs(run)
        listed = [line for line in text.splitlines() if line.startswith("GPU ")]
        visible = re.findall(r"visible=(\S*)", text)
        if status != "done" or len(listed) != 1 or visible != ["0"]:
            raise CheckFailedError(f"status {status}, logs: {text[-600:]}")
        if self.torch and "torch_count=1" not in text:
            raise CheckFailedError(f"torch does not see exactly one GPU: {text[-600:]}")
        return f"done; {listed[0]}; CUDA_VISIBLE_DEVICES={visible[0]}"

    def no_capacity(self, run: str, gpu: str) -> str:
        self.task(run, gpu, ["echo should-not-run"])
        result = self.finished(run, timeout=60)
        jobs = [s for job in result.jobs for s in job.job_submissions]
        ran = [s for s in jobs if s.job_provisioning_data]
        reason = result.termination_reason or ""
        if result.status != "failed" or "no_capacity" not in (
            reason + " ".join(s.termination_reason or "" for s in jobs)
        ):
            raise CheckFailedError(f"{result.status} / {reason}: {result.status_message}")
        if ran:
            raise CheckFailedError(f"a job of {run} was placed: {ran[0].job_provisioning_data}")
        why = [f"{s.termination_reason}: {s.status_message}" for s in jobs if s.termination_reason]
        return f"run {result.status} ({reason}); job {'; '.join(why)}"[:400]

    def one_after_the_other(self) -> str:
        stamp = "python3 -c \"import time; print('%s %.3f' % ('{}', time.time()))\""
        commands = [stamp.format("start"), "sleep 3", stamp.format("end")]
        for name in ("gpu-a", "gpu-b"):
            self.task(name, "1", commands)
        spans = []
        for name in ("gpu-a", "gpu-b"):
            if self.finished(name).status != "done":
                raise CheckFailedError(f"{name} did not finish: {self.logs(name)[-300:]}")
            marks = dict(re.findall(r"^(start|end) ([\d.]+)$", self.logs(name), re.M))
            spans.append((float(marks["start"]), float(marks["end"])))
        spans.sort()
        if spans[0][1] > spans[1][0]:
            raise CheckFailedError(f"the two one-GPU tasks overlapped: {spans}")
        return f"no overlap: {spans[0][1]:.2f} <= {spans[1][0]:.2f}"

    def load_command(self, seconds: int) -> str:
        if self.fake_load:
            return f"python3 -c 'import time; time.sleep({seconds})' {FAKE_LOAD_MARK}"
        loop = (
            "import time, torch; a = torch.randn(8192, 8192, device='cuda'); t = time.time()\n"
            f"while time.time() - t < {seconds}: (a @ a).sum().item()"
        )
        return f'python3 -c "{loop}"'

    def metrics_show_load(self) -> str:
        self.task("gpu-load", "1", [self.load_command(120)])

        def busy() -> Any:
            metrics = self.api("metrics/job/gpu-load")
            values = {m["name"]: m["values"] for m in metrics.get("metrics", [])}
            util = [v for k, vs in values.items() if k.startswith("gpu_util_percent") for v in vs]
            memory = [v for k, vs in values.items() if k.startswith("gpu_memory_usage") for v in vs]
            return (max(util), max(memory)) if util and memory and max(util) > 50 else None

        try:
            util, memory = wait_for("GPU utilization above 50% in metrics/job", busy, 90, 2)
        finally:
            self.client.stop_runs(["gpu-load"], abort=True)
        return f"gpu utilization {util}%, gpu memory {memory / 2**20:.0f} MiB"

    def service_serves(self) -> str:
        text = (
            "type: service\nname: gpu-web\ncommands:\n  - python3 -m http.server 8000\n"
            f"port: 8000\nresources:\n{SMALL}  gpu: 1\n"
        )
        self.client.apply(text, path="gpu-web.dstack.yml")
        path = f"/proxy/services/{self.client.project}/gpu-web/"

        def answers() -> Any:
            # the proxy holds a request up to 30 s while no replica is ready yet; on a
            # loaded host the replica may take longer, which is "not yet", not a failure
            try:
                answer = self.http.get(path, timeout=45)
            except httpx.TimeoutException:
                return None
            return answer if answer.status_code == 200 else None

        try:
            answer = wait_for("the service to answer through the proxy", answers, 120, 1)
        finally:
            self.client.stop_runs(["gpu-web"], abort=True)
        return f"GET {path} -> {answer.status_code} ({len(answer.content)} bytes)"


def run_checks(checker: Checker, results: Results) -> None:
    if not results.run("gpu detected as dstack names it", checker.detected):
        return  # nothing else can pass without a GPU
    gpu = checker.facts["gpu"]
    results.run("offers and gpus/list show it", checker.offered)
    results.run(
        f"gpu: {gpu['name']}:1 sees one GPU",
        lambda: checker.sees_one_gpu("gpu-named", f"{gpu['name']}:1"),
    )
    memory = max(1, gpu["memory_gb"] // 2)
    results.run(
        f"gpu: {memory}GB.. sees one GPU",
        lambda: checker.sees_one_gpu("gpu-memory", f"{memory}GB.."),
    )
    more = gpu["count"] + 1
    results.run(
        f"gpu: {more} fails with no capacity", lambda: checker.no_capacity("gpu-many", str(more))
    )
    other = "A100" if gpu["name"] != "A100" else "H100"
    results.run(f"gpu: {other} is not placed", lambda: checker.no_capacity("gpu-other", other))
    results.run("two one-GPU tasks never run together", checker.one_after_the_other)
    results.run("metrics show GPU utilization and memory", checker.metrics_show_load)
    results.run("a GPU service serves through the proxy", checker.service_serves)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument(
        "--torch",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also check with PyTorch (default: when it imports with CUDA)",
    )
    parser.add_argument(
        "--fake-load",
        action="store_true",
        help="load for the fake nvidia-smi instead of a PyTorch matmul loop",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parser.parse_args(argv)
    torch = args.torch if args.torch is not None else torch_has_cuda()
    results = Results(facts={"torch": torch, "fake_load": args.fake_load})
    work = Path(tempfile.mkdtemp(prefix="dockyard-gpu-check."))
    server = Server(work)
    try:
        client = Server.start(server)
        environ = {**os.environ, **server.environ()}
        headers = {"Authorization": f"Bearer {client.token}"}
        with httpx.Client(base_url=client.url, headers=headers, timeout=30) as http:
            run_checks(
                Checker(client, http, torch, args.fake_load, results.facts, environ), results
            )
    except CheckFailedError as error:
        results.checks.append({"name": "server start", "ok": False, "detail": str(error)})
    finally:
        server.stop()
        results.facts["work_dir"] = str(work) if args.keep else None
        if not args.keep:
            subprocess.run(["rm", "-rf", str(work)], check=False)
    report = json.dumps(results.as_json(), indent=2)
    if args.out:
        args.out.write_text(report + "\n")
    print(report)
    return 0 if results.as_json()["ok"] else 1


def torch_has_cuda() -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return (
        subprocess.run(["python3", "-c", probe], capture_output=True, check=False).returncode == 0
    )


if __name__ == "__main__":
    sys.exit(main())
