"""A real HTTP receiver on loopback for the notification tests: it records each request
(path, headers, body) and answers with the statuses it is told, or holds the request
open until released (a receiver that never answers)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Behaviour:
    statuses: list[int] = field(default_factory=list)
    """Answers to give, in order; 200 once they are used up."""
    hold: bool = False
    released: threading.Event = field(default_factory=threading.Event)


class LocalReceiver:
    def __init__(self, port: int = 0) -> None:
        self.requests: list[Received] = []
        self.behaviour = Behaviour()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.requests.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    behaviour = receiver.behaviour
                    status = behaviour.statuses.pop(0) if behaviour.statuses else 200
                if behaviour.hold:
                    behaviour.released.wait(30)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.behaviour.released.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def local_receiver(port: int = 0) -> Iterator[LocalReceiver]:
    receiver = LocalReceiver(port)
    try:
        yield receiver
    finally:
        receiver.close()
