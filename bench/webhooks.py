"""Webhook answer latency of the server, as JSON on stdout.

Starts a real server through the composition root (`reconciler.app.build_server`: SQLite in
a temp data dir, the real engine controller watching a local one-commit config repo,
uvicorn on loopback) and sends signed GitHub
`push` deliveries to the watched branch over HTTP. For each kind of delivery it reports the
time from sending the request to the answer (ms: p50, p95, p99, max):

- ``queued``: new deliveries, each recorded and a reconcile queued (sequential);
- ``queued_concurrent``: the same with ``--concurrency`` clients at once;
- ``duplicate``: redeliveries of an id already seen;
- ``rejected``: a wrong signature (401, nothing recorded).

Run:

    .venv/bin/python bench/webhooks.py [--deliveries 300] [--concurrency 20]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from reconciler.app import build_server  # noqa: E402
from reconciler.settings import Settings  # noqa: E402

SECRET = "bench-secret"


def _body(index: int) -> bytes:
    sha = hashlib.sha1(str(index).encode()).hexdigest()
    return json.dumps({"ref": "refs/heads/main", "after": sha, "commits": []}).encode()


def _request(body: bytes, delivery: str, secret: str = SECRET) -> bytes:
    """The whole HTTP request, sent in one write (as a webhook sender does)."""
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    head = (
        "POST /api/webhooks/github HTTP/1.1\r\nHost: bench\r\n"
        "Content-Type: application/json\r\nX-GitHub-Event: push\r\n"
        f"X-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: sha256={signature}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _send(port: int, request: bytes) -> tuple[float, str]:
    """(ms from the first byte sent to the last byte of the answer, "status outcome").

    Raw sockets with TCP_NODELAY, one connection per delivery: client libraries that write
    headers and body separately add Nagle/delayed-ACK stalls (~40 ms) that are not the
    server's.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        conn.sendall(request)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
        elapsed = (time.perf_counter() - start) * 1000
    head, _, payload = data.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1].decode()
    return elapsed, f"{status} {json.loads(payload).get('outcome')}"


def _summary(samples: list[float], outcomes: set[str]) -> dict[str, Any]:
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 2)

    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "max_ms": round(ordered[-1], 2),
        "answers": sorted(outcomes),
    }


def _sequential(port: int, requests: list[bytes]) -> tuple[list[float], set[str]]:
    results = [_send(port, request) for request in requests]
    return [r[0] for r in results], {r[1] for r in results}


def _concurrent(port: int, requests: list[bytes], workers: int) -> tuple[list[float], set[str]]:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda request: _send(port, request), requests))
    return [r[0] for r in results], {r[1] for r in results}


def _config_repo(path: Path) -> Path:
    """A local Git repo on branch main with one commit and no configurations."""
    path.mkdir(parents=True)
    git = ["git", "-C", str(path), "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (path / "README.md").write_text("bench config repo\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        repo = _config_repo(Path(tmp) / "repo")
        settings = Settings(
            repo=str(repo),
            data_dir=Path(tmp) / "data",
            cli_config=Path(tmp) / "config.yml",
            port=port,
            webhook_secret=SECRET,
        )
        server = build_server(settings)
        uv = uvicorn.Server(uvicorn.Config(server.app, log_level="error", lifespan="on"))
        thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthcheck", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        n = args.deliveries
        fresh = [_request(_body(i), f"d-{i}") for i in range(n)]
        burst = [_request(_body(n + i), f"c-{i}") for i in range(n)]
        forged = [_request(_body(i), f"x-{i}", "wrong") for i in range(max(1, n // 3))]
        results: dict[str, Any] = {}
        results["queued"] = _summary(*_sequential(port, fresh))
        results["queued_concurrent"] = _summary(*_concurrent(port, burst, args.concurrency))
        results["duplicate"] = _summary(*_sequential(port, fresh[: max(1, n // 3)]))
        results["rejected"] = _summary(*_sequential(port, forged))
        uv.should_exit = True
        thread.join(timeout=30)
        server.store.close()
    print(
        json.dumps(
            {
                "bench": "webhooks",
                "python": platform.python_version(),
                "db": "sqlite",
                "concurrency": args.concurrency,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
