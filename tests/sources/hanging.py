"""A Git remote that never answers: a loopback TCP server that accepts and stays silent.

`hanging_remote()` yields an `http://127.0.0.1:PORT/NAME.git` URL whose fetch hangs (git
waits for the HTTP answer forever: no low-speed limit is set); on exit every connection
it accepted is closed, so the hung `git` fails and its thread ends.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def hanging_remote(name: str = "hangs") -> Iterator[tuple[str, list[socket.socket]]]:
    """(the URL, the connections accepted so far)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/{name}.git", accepted
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        for conn in accepted:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        thread.join(timeout=5)
