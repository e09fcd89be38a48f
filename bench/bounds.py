"""Input bounds under attack: time and peak memory of each refusal, as JSON on stdout.

Runs the real thing (docs/security.md, "Limits"): `schemas.parse_config` on the 12-level
YAML alias bomb and on several hostile 1 MiB configurations (the worst is what counts);
a real server (uvicorn on loopback, SQLite) receiving a 64 MiB upload, sent with and
without Content-Length; the 2 MB tar.gz that extracts to 2 GiB, checked at upload. Each
figure is wall seconds (untraced) and, from a second run, the peak of traced Python
allocations (tracemalloc; for the uploads that is the server's and the client's, the client
streaming its body in 1 MiB chunks). Goal: each under 1 s and 100 MB. Run:

    .venv/bin/python bench/bounds.py
"""

from __future__ import annotations

import json
import platform
import select
import socket
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from reconciler.app import build_server, uvicorn_config  # noqa: E402
from reconciler.core.archivecheck import archive_problem  # noqa: E402
from reconciler.settings import Settings  # noqa: E402
from schemas import ConfigError, parse_config  # noqa: E402
from tests.security.bombs import tar_gz_bomb  # noqa: E402
from tests.security.test_yaml_bounds import alias_bomb  # noqa: E402
from tests.web.fakes import FakeController  # noqa: E402

MiB = 2**20
GOAL_SECONDS = 1.0
GOAL_BYTES = 100 * 1000 * 1000


def _run(call: Callable[[], Any]) -> str:
    try:
        return str(call())
    except ConfigError as error:
        return str(error)


def measure(call: Callable[[], Any]) -> dict[str, Any]:
    """Seconds of `call` (untraced), then its peak traced bytes (a second, traced run)."""
    started = time.perf_counter()
    outcome = _run(call)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    _run(call)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        "seconds": round(seconds, 4),
        "peak_mb": round(peak / 1e6, 2),
        "within_goal": seconds < GOAL_SECONDS and peak < GOAL_BYTES,
        "answer": outcome[:160],
    }


def configs_of_1_mib() -> dict[str, str]:
    def repeat(prefix: str, unit: str) -> str:
        return prefix + unit * ((MiB - len(prefix) - 1) // len(unit))

    return {
        "list_items": repeat("type: task\ncommands:\n", "- a\n"),
        "invalid_items": repeat("type: task\ncommands: [echo]\nports:\n", "- [a]\n"),
        "env_mapping": "type: task\ncommands: [echo]\nenv:\n"
        + "".join(f"  K{i}: v\n" for i in range(MiB // 12)),
        "flow_items": repeat("type: task\ncommands: [", "a,"),
        "one_long_value": "type: task\nname: " + "a" * (MiB - 20),
        "deep_nesting": repeat("type: task\ncommands: [echo]\nenv: ", "["),
        "aliases": repeat("x: &x [1, 2, 3, 4, 5, 6, 7, 8]\ntype: task\nenv:\n", "  - *x\n"),
    }


def _chunks(total: int, size: int = MiB) -> Iterator[bytes]:
    block = b"\0" * size
    for _ in range(total // size):
        yield block


def _stream_until_answered(port: int, token: str) -> str:
    """POST 64 MiB chunked, 1 MiB at a time, stopping as soon as the server answers:
    what the server cost, not how long a client takes to push 64 MiB."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(
            b"POST /api/files/upload_archive HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for chunk in _chunks(64 * MiB):
            if select.select([conn], [], [], 0)[0]:
                break
            try:
                conn.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            except OSError:
                break
            sent += len(chunk)
        conn.settimeout(30)
        received, closed = b"", "closed"
        try:
            while part := conn.recv(65536):
                received += part
        except ConnectionResetError:
            closed = "reset"
    answer = received.decode(errors="replace")
    status = answer.split("\r\n", 1)[0]
    body = answer.split("\r\n\r\n", 1)[-1]
    return f"{status} after {sent // MiB} MiB sent, connection {closed}: {body}"


def upload_figures() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        settings = Settings(
            data_dir=Path(tmp) / "data", cli_config=Path(tmp) / "config.yml", port=port
        )
        built = build_server(settings, controller_factory=lambda s, st: FakeController(st))
        config = uvicorn_config(built)
        config.log_level = "warning"
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{port}"
        while True:
            try:
                if httpx.get(f"{url}/healthcheck", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        token = settings.admin_token_path.read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        endpoint = f"{url}/api/files/upload_archive"

        def send(content: Any, extra: dict[str, str] | None = None) -> str:
            try:
                answer = httpx.post(
                    endpoint, content=content, headers={**headers, **(extra or {})}, timeout=60
                )
                return f"{answer.status_code} {answer.text}"
            except httpx.HTTPError as error:  # the server may close before all was sent
                return f"closed early: {type(error).__name__}"

        figures = {
            "upload_64_mib_chunked": measure(lambda: _stream_until_answered(port, token)),
            "upload_64_mib_declared": measure(
                lambda: send(_chunks(64 * MiB), {"Content-Length": str(64 * MiB)})
            ),
            "upload_tar_bomb_2mb_to_2gib": measure(lambda: send(BOMB)),
        }
        server.should_exit = True
        thread.join(timeout=15)
        built.store.close()
        return figures


BOMB = tar_gz_bomb()


def _parse(text: str) -> dict[str, Any]:
    return measure(lambda: parse_config(text, "big.dstack.yml"))


def main() -> None:
    result: dict[str, Any] = {
        "python": platform.python_version(),
        "goal": {"seconds": GOAL_SECONDS, "peak_mb": GOAL_BYTES / 1e6},
        "alias_bomb_12_levels": measure(lambda: parse_config(alias_bomb(12), "bomb.dstack.yml")),
        "config_1_mib": {name: _parse(text) for name, text in configs_of_1_mib().items()},
        "tar_bomb_check_2mb_to_2gib": measure(
            lambda: archive_problem(BOMB, max_bytes=2**30, max_files=100_000)
        ),
    }
    result.update(upload_figures())
    worst = max(result["config_1_mib"].values(), key=lambda f: f["seconds"])
    result["config_1_mib_worst"] = worst
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
