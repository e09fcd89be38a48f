"""Service proxy throughput: requests/s through `/proxy/services/…` beside direct requests.

Starts the real local agent, runs a service on it (a small asyncio HTTP server, process
executor) with the real runs and jobs workers, serves the real `ServiceProxy` under
uvicorn, then drives the same load (bench/load.py, a separate process) at the service
directly and through the proxy. Prints JSON: `direct_rps`, `proxy_rps`, `ratio` (goal
≥ 0.7), and the load parameters.

    python bench/proxy.py [--concurrency 16] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import sys
import tempfile
import textwrap
from pathlib import Path

import uvicorn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reconciler.engine.routes import StoreRoutes  # noqa: E402
from reconciler.web.proxy import ServiceProxy  # noqa: E402
from tests.e2e.runs_harness import (  # noqa: E402
    close_harness,
    make_harness,
    start_agent_env,
    stop_agent_env,
)

SERVICE = textwrap.dedent(
    """
    import asyncio, sys
    BODY = b"ok"
    HEAD = b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nContent-Type: text/plain\\r\\n"
    RESPONSE = HEAD + b"\\r\\n" + BODY
    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\\r\\n\\r\\n")
                writer.write(RESPONSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
        async with server:
            await server.serve_forever()
    asyncio.run(main())
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wrk(url: str, concurrency: int, seconds: float) -> dict[str, float]:
    """Load from wrk (Debian's `wrk`), a C load generator that is never the bottleneck."""
    proc = await asyncio.create_subprocess_exec(
        "wrk",
        "-t2",
        f"-c{concurrency}",
        f"-d{int(seconds)}s",
        url,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    text = out.decode()
    rps = float(text.split("Requests/sec:")[1].split()[0])
    errors = 0.0
    if "Non-2xx or 3xx responses:" in text:
        errors = float(text.split("Non-2xx or 3xx responses:")[1].split()[0])
    return {"rps": rps, "errors": errors}


async def _load(url: str, concurrency: int, seconds: float) -> dict[str, float]:
    if shutil.which("wrk"):
        return await _wrk(url, concurrency, seconds)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "bench" / "load.py"),
        url,
        "--concurrency",
        str(concurrency),
        "--seconds",
        str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    result: dict[str, float] = json.loads(out)
    return result


async def main(concurrency: int, seconds: float) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="dockyard-bench-proxy-"))
    env = await start_agent_env(tmp / "agent")
    h = await make_harness(tmp, env)
    script = tmp / "service.py"
    script.write_text(SERVICE)
    port = _free_port()
    run = h.submit(
        f"type: service\nname: fast\nport: {port}\nauth: false\n"
        f"commands: ['{sys.executable} {script} {port}']\n"
    )

    def ready() -> bool:
        return any(
            (j.runtime or {}).get("ready") and j.status == "running" for j in h.jobs_of(run.id)
        )

    await h.until(ready, within=60)
    proxy = ServiceProxy(
        routes=StoreRoutes(h.store, h.agents), pool=h.pool, authorize=_deny, stats=h.stats
    )
    proxy_port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            proxy, host="127.0.0.1", port=proxy_port, log_level="warning", lifespan="off"
        )
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes no started event
        await asyncio.sleep(0.05)
    try:
        direct = await _load(f"http://127.0.0.1:{port}/", concurrency, seconds)
        proxied = await _load(
            f"http://127.0.0.1:{proxy_port}/proxy/services/main/fast/", concurrency, seconds
        )
    finally:
        server.should_exit = True
        await serving
        await proxy.aclose()
        await close_harness(h)
        stop_agent_env(env)
    return {
        "concurrency": concurrency,
        "seconds": seconds,
        "direct_rps": direct["rps"],
        "proxy_rps": proxied["rps"],
        "proxy_errors": proxied["errors"],
        "ratio": round(proxied["rps"] / direct["rps"], 3) if direct["rps"] else None,
        "goal_ratio": 0.7,
        "load_generator": "wrk" if shutil.which("wrk") else "bench/load.py (httpx)",
    }


async def _deny(project: str, token: str | None) -> bool:
    return False


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.concurrency, args.seconds)), indent=2))
