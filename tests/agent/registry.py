"""A minimal Docker registry (v2 API, one image) on 127.0.0.1, so that pulls are real.

The engine pulls ``127.0.0.1:<port>/<name>:<tag>`` over plain HTTP (loopback registries
are insecure-allowed by default). The one layer is the busybox rootfs of the test image,
gzipped; ``hold_layer`` makes the registry send the first half of the layer and then wait
until ``release()``, so a test sees the job ``pulling`` with a progress in between.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI, Response
from fastapi.responses import StreamingResponse

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class FakeRegistry:
    rootfs_tar: bytes
    name: str = "dockyard/pulled"
    tag: str = "1"
    port: int = 0
    hold_layer: bool = False
    layer_requests: int = 0
    _released: asyncio.Event = field(default_factory=asyncio.Event)
    _half_sent: asyncio.Event = field(default_factory=asyncio.Event)
    _layer_sent: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def image(self) -> str:
        return f"127.0.0.1:{self.port}/{self.name}:{self.tag}"

    def release(self) -> None:
        self._released.set()

    async def wait_half_sent(self) -> None:
        await self._half_sent.wait()

    async def wait_layer_sent(self) -> None:
        """Until the layer was sent in full (after ``release()`` when held)."""
        await self._layer_sent.wait()

    def app(self) -> FastAPI:
        layer = gzip.compress(self.rootfs_tar, compresslevel=1)
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Env": ["PATH=/bin"]},
                "rootfs": {"type": "layers", "diff_ids": [_digest(self.rootfs_tar)]},
            }
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": {
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                    "size": len(config),
                    "digest": _digest(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                        "size": len(layer),
                        "digest": _digest(layer),
                    }
                ],
            }
        ).encode()
        blobs = {_digest(config): config, _digest(layer): layer}
        app = FastAPI()
        api_header = {"Docker-Distribution-API-Version": "registry/2.0"}

        @app.get("/v2/")
        async def root() -> Response:
            return Response(b"{}", media_type="application/json", headers=api_header)

        @app.api_route("/v2/{name:path}/manifests/{reference}", methods=["GET", "HEAD"])
        async def get_manifest(name: str, reference: str) -> Response:
            if name != self.name or reference not in (self.tag, _digest(manifest)):
                return Response(status_code=404)
            headers = {**api_header, "Docker-Content-Digest": _digest(manifest)}
            return Response(manifest, media_type=MANIFEST_TYPE, headers=headers)

        @app.api_route("/v2/{name:path}/blobs/{digest}", methods=["GET", "HEAD"])
        async def get_blob(name: str, digest: str) -> Response:
            blob = blobs.get(digest)
            if blob is None:
                return Response(status_code=404)
            headers = {**api_header, "Docker-Content-Digest": digest}
            if blob is not layer:
                return Response(blob, media_type="application/octet-stream", headers=headers)
            self.layer_requests += 1
            headers["Content-Length"] = str(len(blob))
            return StreamingResponse(
                self._stream(blob), media_type="application/octet-stream", headers=headers
            )

        return app

    async def _stream(self, blob: bytes) -> AsyncIterator[bytes]:
        half = len(blob) // 2
        for start in range(0, half, 32 * 1024):
            yield blob[start : min(start + 32 * 1024, half)]
        self._half_sent.set()
        if self.hold_layer:
            await self._released.wait()
        yield blob[half:]
        self._layer_sent.set()

    async def serve(self) -> AsyncIterator[FakeRegistry]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        self.port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(self.app(), log_level="warning", lifespan="off"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            yield self
        finally:
            self.release()
            server.should_exit = True
            await task
            sock.close()
