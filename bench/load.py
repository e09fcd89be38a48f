"""A small HTTP load generator: `python bench/load.py URL [--concurrency N] [--seconds S]`.

Keeps N keep-alive connections busy for S seconds with GET URL and prints JSON
`{"requests", "errors", "seconds", "rps"}`. Used by bench/proxy.py in a separate process,
so the load does not share an event loop (or a GIL) with the server it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import httpx


async def run(url: str, concurrency: int, seconds: float, token: str | None) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    done = errors = 0
    async with httpx.AsyncClient(limits=limits, headers=headers, timeout=30) as client:
        end = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done, errors
            while time.perf_counter() < end:
                try:
                    response = await client.get(url)
                    ok = response.status_code == 200
                except httpx.HTTPError:
                    ok = False
                done += 1
                errors += 0 if ok else 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {
        "requests": done,
        "errors": errors,
        "seconds": round(elapsed, 3),
        "rps": round(done / elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.url, args.concurrency, args.seconds, args.token))))


if __name__ == "__main__":
    main()
