"""The service proxy as users get it: `dockyard server` on a config repo, its local fleet.

Starts the real server (its own process, SQLite, the local agent) on a temporary git repo
holding two services with `auth: true` — a FastAPI app, and the same app taking 20 ms
per request like a GPU serving a short completion — waits until both answer through
`/proxy/services/main/<run>/` with the admin token, then drives wrk (or bench/load.py) at
each directly and through the server. Prints JSON: per service `direct_rps`, `proxy_rps`,
`ratio` (goal ≥ 0.7).

    python bench/proxy_server.py [--concurrency 64] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))

from proxy import APP, GOAL, _free_port, _load, compared  # noqa: E402

from agent.local import stop_local_agent  # noqa: E402

SERVICE = """type: service
name: {name}
port: {port}
commands:
  - {python} app.py {port} {delay}
repos: [.]
"""


def _repo(root: Path, ports: dict[str, int]) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "app.py").write_text(APP)
    delays = {"fastapi": "0", "model": "0.02"}
    for name, port in ports.items():
        text = SERVICE.format(name=name, port=port, python=sys.executable, delay=delays[name])
        (repo / f"{name}.dstack.yml").write_text(text)
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


def _wait_answering(url: str, token: str, within: float) -> None:
    deadline = time.monotonic() + within
    headers = {"Authorization": f"Bearer {token}"}
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, headers=headers, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"bench: {url} did not answer 200 within {within:.0f} s")


def _stop_services(port: int, data: Path, service_ports: list[int]) -> None:
    """Stop the runs (jobs outlive the server and its agent by design) and wait until
    their ports are closed."""
    token_file = data / "admin-token"
    if not token_file.exists():
        return
    headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    body = {"runs_names": ["fastapi", "model"], "abort": True}
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(
            f"http://127.0.0.1:{port}/api/project/main/runs/stop",
            json=body,
            headers=headers,
            timeout=10,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_listening(p) for p in service_ports):
        time.sleep(0.2)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def main(concurrency: int, seconds: float) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="dockyard-bench-server-"))
    ports = {"fastapi": _free_port(), "model": _free_port()}
    repo = _repo(root, ports)
    data = root / "data"
    env = os.environ | {
        "DOCKYARD_DATA_DIR": str(data),
        "DOCKYARD_CONFIG": str(root / "cli-config.yml"),
        "DOCKYARD_LOCAL_JOB_USER": "self",  # services run this venv's Python (private home)
    }
    port = _free_port()
    dockyard = str(Path(sys.executable).parent / "dockyard")
    log = (root / "server.log").open("w")
    server = subprocess.Popen(
        [dockyard, "server", "--repo", str(repo), "--branch", "main", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    results = []
    try:
        token_file = data / "admin-token"
        deadline = time.monotonic() + 60
        while not token_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        token = token_file.read_text().strip()
        for name in ports:
            _wait_answering(f"http://127.0.0.1:{port}/proxy/services/main/{name}/", token, 180)
        for name, service_port in ports.items():
            direct = asyncio.run(
                _load(f"http://127.0.0.1:{service_port}/v1/models", concurrency, seconds)
            )
            url = f"http://127.0.0.1:{port}/proxy/services/main/{name}/v1/models"
            proxied = asyncio.run(_load(url, concurrency, seconds, token=token))
            results.append({"service": name} | compared(direct, proxied))
    finally:
        _stop_services(port, data, list(ports.values()))
        server.terminate()
        server.wait(timeout=30)
        stop_local_agent(data)
        log.close()
        shutil.rmtree(root, ignore_errors=True)
    return {
        "server": "dockyard server (local fleet, auth: true)",
        "concurrency": concurrency,
        "seconds": seconds,
        "load_generator": "wrk -t2" if shutil.which("wrk") else "bench/load.py (httpx)",
        "cpus": os.cpu_count(),
        "goal_ratio": GOAL,
        "results": results,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    print(json.dumps(main(args.concurrency, args.seconds), indent=2))
