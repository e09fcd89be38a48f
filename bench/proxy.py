"""Service proxy throughput: requests/s through `/proxy/services/…` beside direct requests.

Starts the real local agent and runs three services on it as real runs (process executor,
the real runs and jobs workers), serves the real `ServiceProxy` under uvicorn (httptools,
uvloop — as `dockyard server` runs), then drives the same load at each service directly
and through the proxy, by both of the proxy's paths:

- `tunnel`: an SSH `direct-tcpip` channel to the replica's host — the path of every SSH
  fleet and cloud instance;
- `loopback`: the replica's port dialled on 127.0.0.1 — the path for the server's own
  local fleet.

The services:

- `raw`: an asyncio responder that answers every request head with a fixed response and
  parses nothing — the worst case for any proxy, whose per-request work is all that
  is measured against almost none;
- `fastapi`: a FastAPI app under uvicorn returning a small JSON body — the stack of most
  custom services and of vLLM's and SGLang's OpenAI servers;
- `model`: the same app where each request awaits 20 ms, like a GPU serving a short
  completion or an embedding batch (the host's CPU is idle meanwhile).

Load comes from wrk (a C load generator, never the bottleneck) when installed, else from
bench/load.py in its own process. Prints JSON: per service and path `direct_rps`,
`proxy_rps`, `ratio` (goal ≥ 0.7), errors; and the proxy's own ceiling in requests/s.

    python bench/proxy.py [--concurrency 64] [--seconds 5] [--services raw,fastapi,model]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import uvicorn
import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reconciler.engine.routes import StoreRoutes  # noqa: E402
from reconciler.web.proxy import ServiceProxy  # noqa: E402
from tests.e2e.runs_harness import (  # noqa: E402
    Harness,
    close_harness,
    make_harness,
    start_agent_env,
    stop_agent_env,
)

RAW = textwrap.dedent(
    """
    import asyncio, sys
    RESPONSE = b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nContent-Type: text/plain\\r\\n\\r\\nok"
    async def handle(reader, writer):
        try:
            while True:
                await reader.readuntil(b"\\r\\n\\r\\n")
                writer.write(RESPONSE)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
        async with server:
            await server.serve_forever()
    asyncio.run(main())
    """
)
APP = textwrap.dedent(
    """
    import asyncio, sys
    import uvicorn
    from fastapi import FastAPI
    app = FastAPI()
    DELAY = float(sys.argv[2])
    @app.get("/{path:path}")
    async def answer(path: str) -> dict[str, object]:
        if DELAY:
            await asyncio.sleep(DELAY)
        return {"object": "list", "data": [{"id": "model", "path": path}]}
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
                access_log=False)
    """
)
SERVICES: dict[str, tuple[str, str]] = {
    "raw": (RAW, ""),
    "fastapi": (APP, "0"),
    "model": (APP, "0.02"),
}
GOAL = 0.7


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wrk(url: str, concurrency: int, seconds: float, token: str | None) -> dict[str, float]:
    auth = ["-H", f"Authorization: Bearer {token}"] if token else []
    proc = await asyncio.create_subprocess_exec(
        "wrk",
        "-t2",
        f"-c{concurrency}",
        f"-d{max(1, round(seconds))}s",
        *auth,
        url,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    text = out.decode()
    rps = float(text.split("Requests/sec:")[1].split()[0])
    errors = 0.0
    for marker in ("Non-2xx or 3xx responses:", "Socket errors:"):
        if marker in text:
            errors += sum(
                float(part.split()[-1])
                for part in text.split(marker)[1].splitlines()[0].split(",")
                if part.split()
            )
    return {"rps": rps, "errors": errors}


async def _load(
    url: str, concurrency: int, seconds: float, token: str | None = None
) -> dict[str, float]:
    if shutil.which("wrk"):
        return await _wrk(url, concurrency, seconds, token)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "bench" / "load.py"),
        url,
        "--concurrency",
        str(concurrency),
        "--seconds",
        str(seconds),
        *(["--token", token] if token else []),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    result: dict[str, float] = json.loads(out)
    return result


def compared(direct: dict[str, float], proxied: dict[str, float]) -> dict[str, Any]:
    """One row of figures: both rates, their ratio against the goal, the errors."""
    ratio = round(proxied["rps"] / direct["rps"], 3) if direct["rps"] else None
    return {
        "direct_rps": direct["rps"],
        "proxy_rps": proxied["rps"],
        "ratio": ratio,
        "errors": proxied["errors"] + direct["errors"],
        "goal_met": ratio is not None and ratio >= GOAL,
    }


async def _start_services(h: Harness, tmp: Path, names: list[str]) -> dict[str, int]:
    ports: dict[str, int] = {}
    runs = []
    for name in names:
        source, arg = SERVICES[name]
        script = tmp / f"service_{name}.py"
        script.write_text(source)
        port = ports[name] = _free_port()
        command = f"{sys.executable} {script} {port} {arg}".strip()
        runs.append(
            h.submit(
                f"type: service\nname: {name}\nport: {port}\nauth: false\ncommands: ['{command}']\n"
            )
        )

    def ready() -> bool:
        return all(
            any((j.runtime or {}).get("ready") and j.status == "running" for j in h.jobs_of(r.id))
            for r in runs
        )

    await h.until(ready, within=120)
    return ports


async def _serve(proxy: ServiceProxy) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            proxy,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
            http="httptools",
            access_log=False,
        )
    )
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes no started event
        await asyncio.sleep(0.05)
    return server, task, port


async def _allow(project: str, token: str | None) -> bool:
    return True


async def _measure(
    tmp: Path, concurrency: int, seconds: float, names: list[str]
) -> list[dict[str, Any]]:
    """Direct beside proxied, for each service and proxy path (agent and store in `tmp`)."""
    env = await start_agent_env(tmp / "agent")
    h = await make_harness(tmp, env)
    proxies: dict[str, tuple[ServiceProxy, uvicorn.Server, asyncio.Task[None], int]] = {}
    results: list[dict[str, Any]] = []
    try:
        ports = await _start_services(h, tmp, names)
        for path, local in (("tunnel", None), ("loopback", env.local.ssh_port)):
            routes = StoreRoutes(h.store, h.agents, local_ssh_port=lambda p=local: p)  # type: ignore[misc]
            proxy = ServiceProxy(routes=routes, pool=h.pool, authorize=_allow, stats=h.stats)
            proxies[path] = (proxy, *(await _serve(proxy)))
        for name in names:
            direct = await _load(f"http://127.0.0.1:{ports[name]}/v1/models", concurrency, seconds)
            for path, (_, _, _, port) in proxies.items():
                url = f"http://127.0.0.1:{port}/proxy/services/main/{name}/v1/models"
                proxied = await _load(url, concurrency, seconds)
                results.append({"service": name, "path": path} | compared(direct, proxied))
    finally:
        for proxy, server, task, _ in proxies.values():
            server.should_exit = True
            await task
            await proxy.aclose()
        await close_harness(h)
        stop_agent_env(env)
    return results


async def main(concurrency: int, seconds: float, names: list[str]) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="dockyard-bench-proxy-"))
    try:
        results = await _measure(tmp, concurrency, seconds, names)
    finally:  # the agent's data, the services' files and the store go with the run
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "concurrency": concurrency,
        "seconds": seconds,
        "load_generator": "wrk -t2" if shutil.which("wrk") else "bench/load.py (httpx)",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "goal_ratio": GOAL,
        "results": results,
        "proxy_ceiling_rps": {
            path: max(r["proxy_rps"] for r in results if r["path"] == path)
            for path in ("tunnel", "loopback")
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--services", default=",".join(SERVICES))
    args = parser.parse_args()
    chosen = [s for s in args.services.split(",") if s]
    unknown = sorted(set(chosen) - set(SERVICES))
    if unknown:
        parser.error(f"unknown services {unknown}: choose from {sorted(SERVICES)}")
    print(json.dumps(uvloop.run(main(args.concurrency, args.seconds, chosen)), indent=2))
