"""Webhooks cost an unauthenticated caller nothing, tried as the caller would.

Raw HTTP on loopback against a real server: a delivery is answered before its body is
read when no secret is configured, when GitLab's token header is wrong, when GitHub's
signature header is missing, and when the shared budget of unverified bodies is full
(503). And the flood itself: 40 concurrent 24 MiB GitHub posts with forged signatures,
against a `dockyard server` process started as `tests/cli/test_server_command.py` starts
it, leave its resident memory (`/proc/<pid>/status` VmRSS, sampled while the posts are in
flight) within 100 MB of what it was idle.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.web.hookbodies import UnverifiedBudget
from tests.cli.test_server_command import SECRET, ServerProcess
from tests.web.realserver import real_server
from tests.web.serving import WEBHOOK_SECRET, Running, wait_until

FORGED = "sha256=" + "0" * 64
MIB = 1024 * 1024


def _push() -> bytes:
    body = {"ref": "refs/heads/main", "before": "b" * 40, "after": "a" * 40, "commits": []}
    return json.dumps(body).encode()


def _sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _head(path: str, length: int, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _status(sock: socket.socket) -> int:
    line = sock.recv(4096).split(b"\r\n", 1)[0]
    return int(line.split()[1])


def _answer_without_body(url: str, path: str, length: int, headers: dict[str, str]) -> int:
    """The status answered to a request whose head promises `length` bytes, none of which
    is ever sent: only a server that does not read the body can answer it."""
    with socket.create_connection(("127.0.0.1", _port(url)), timeout=15) as sock:
        sock.sendall(_head(path, length, headers))
        return _status(sock)


def _forged_small_post(url: str, path: str) -> int:
    """The status of a forged 1 KiB delivery, sent whole: 401 when its body could be read
    and hashed, 503 when there is no room for it."""
    body = b" " * 1024
    headers = _github_headers(FORGED)
    return httpx.post(f"{url}{path}", content=body, headers=headers, timeout=15).status_code


def _github_headers(signature: str | None) -> dict[str, str]:
    headers = {"X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4())}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    return headers


def _deliveries(server: Running) -> list[object]:
    with server.client(server.admin_token) as http:
        found: list[object] = http.post("/api/deliveries/list", json={}).json()
    return found


def _webhook_reconciles(server: Running) -> list[str]:
    """The ids of the deliveries the real controller was asked to reconcile."""
    with server.client(server.admin_token) as http:
        listed = http.post("/api/project/main/reconciles/list", json={}).json()
    return [r["delivery_id"] for r in listed if r["delivery_id"] is not None]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    """The real controller on a config repo: a delivery that passes reaches the engine."""
    with real_server(tmp_path) as real:
        yield real.running


def test_a_server_with_no_webhook_secret_answers_401_unread(tmp_path: Path) -> None:
    with real_server(tmp_path, webhook_secret=None) as real:
        bare = real.running
        push = _push()
        signed = _github_headers(_sign(push, WEBHOOK_SECRET))
        answer = httpx.post(f"{bare.url}/api/webhooks/github", content=push, headers=signed)
        assert answer.status_code == 401
        assert answer.json()["reason"] == "the server has no webhook secret configured"
        gitlab = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "anything"}
        assert _answer_without_body(bare.url, "/api/webhooks/gitlab", 10 * MIB, gitlab) == 401
        assert _answer_without_body(bare.url, "/api/webhooks/github", 10 * MIB, signed) == 401
        assert _deliveries(bare) == []
        assert _webhook_reconciles(bare) == []


def test_bad_headers_are_answered_before_the_body_is_read(server: Running) -> None:
    url = server.url
    for token in (None, "wrong"):
        headers = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": str(uuid.uuid4())}
        if token is not None:
            headers["X-Gitlab-Token"] = token
        assert _answer_without_body(url, "/api/webhooks/gitlab", 20 * MIB, headers) == 401
    for signature in (None, "sha256=00", "sha1=" + "0" * 40):
        headers = _github_headers(signature)
        assert _answer_without_body(url, "/api/webhooks/github", 20 * MIB, headers) == 401
    assert _deliveries(server) == []


def test_unverified_bodies_share_a_budget_and_the_rest_are_503_unread(server: Running) -> None:
    """Two connections promise the largest delivery each, with forged signatures, and send
    nothing more: they hold the whole budget, so another forged post is 503 at once; once
    they hang up, the room is back and a genuine delivery is queued."""
    limit = server.settings.max_webhook_bytes
    url, path = server.url, "/api/webhooks/github"
    holders = [socket.create_connection(("127.0.0.1", _port(url)), timeout=15) for _ in range(2)]
    try:
        for sock in holders:
            sock.sendall(_head(path, limit, _github_headers(FORGED)))
        # the holders reach the handler in their own time: poll until the budget is full
        wait_until(
            lambda: _forged_small_post(url, path) == 503,
            what="a forged post answered 503 while the budget is held",
        )
    finally:
        for sock in holders:
            sock.close()
    push = _push()

    def queued() -> bool:
        headers = _github_headers(_sign(push, WEBHOOK_SECRET))
        return httpx.post(f"{url}{path}", content=push, headers=headers).status_code == 202

    wait_until(queued, what="a genuine delivery queued once the holders left")
    assert len(_webhook_reconciles(server)) == 1  # the engine was asked, once


def test_a_connection_that_promises_a_body_and_stalls_cannot_hold_the_room(
    server: Running,
) -> None:
    """Two connections promise the largest delivery each and never send it: after the
    budget's read deadline (3 s here, 20 s by default) they are answered 408 and a genuine
    delivery is queued while they are still open."""
    limit = server.settings.max_webhook_bytes
    server.server.app.state.webhook_budget = UnverifiedBudget(2 * limit, read_seconds=3.0)
    url, path = server.url, "/api/webhooks/github"
    holders = [socket.create_connection(("127.0.0.1", _port(url)), timeout=15) for _ in range(2)]
    push = _push()

    def queued() -> bool:
        headers = _github_headers(_sign(push, WEBHOOK_SECRET))
        return httpx.post(f"{url}{path}", content=push, headers=headers).status_code == 202

    try:
        for sock in holders:
            sock.sendall(_head(path, limit, _github_headers(FORGED)))
        wait_until(
            lambda: _forged_small_post(url, path) == 503,
            what="the stalled connections holding the budget",
        )
        wait_until(queued, what="a genuine delivery queued despite the stalled connections")
        assert [_status(sock) for sock in holders] == [408, 408]
    finally:
        for sock in holders:
            sock.close()


# -- the flood, against a server process --------------------------------------------------------


def _rss(pid: int) -> int:
    """Resident bytes of process `pid` (VmRSS of /proc/<pid>/status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    return kib * 1024


def _forged_post(port: int, size: int, answers: list[int | None]) -> None:
    """One 24 MiB push with a forged signature, sent as fast as the server takes it."""
    block = b" " * (256 * 1024)
    status: int | None = None
    with (
        contextlib.suppress(OSError),
        socket.create_connection(("127.0.0.1", port), timeout=120) as sock,
    ):
        sock.sendall(_head("/api/webhooks/github", size, _github_headers(FORGED)))
        sent = 0
        with contextlib.suppress(OSError):  # a server that answered early may hang up
            while sent < size:
                sock.sendall(block[: size - sent])
                sent += min(len(block), size - sent)
        status = _status(sock)
    answers.append(status)


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[ServerProcess]:
    from agent.local import stop_local_agent

    proc = ServerProcess(tmp_path)
    try:
        yield proc
    finally:
        if proc.process is not None and proc.process.poll() is None:
            proc.process.kill()
            proc.process.communicate(timeout=30)
        stop_local_agent(proc.data)


@pytest.mark.slow
def test_forty_forged_24_mib_posts_leave_memory_within_100_mb(
    server_process: ServerProcess,
) -> None:
    s = server_process
    s.start()
    assert s.process is not None
    pid, port = s.process.pid, s.port
    push = _push()
    for signature in (_sign(push, SECRET), FORGED):  # warm the paths the flood takes
        headers = _github_headers(signature)
        httpx.post(f"{s.url}/api/webhooks/github", content=push, headers=headers)
    idle = _rss(pid)

    answers: list[int | None] = []
    posts = [
        threading.Thread(target=_forged_post, args=(port, 24 * MIB, answers), daemon=True)
        for _ in range(40)
    ]
    done = threading.Event()
    peak = idle
    started = time.monotonic()
    for post in posts:
        post.start()
    while any(post.is_alive() for post in posts):
        peak = max(peak, _rss(pid))
        assert time.monotonic() - started < 240, "the posts did not finish"
        done.wait(0.005)  # a sampling period, not a wait for a condition
    peak = max(peak, _rss(pid))

    assert len(answers) == 40
    assert not [a for a in answers if a is not None and a < 400], answers
    assert 401 in answers, answers  # some bodies were read and hashed, within the budget
    assert peak - idle < 100_000_000, f"idle {idle / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB"
    genuine = httpx.post(
        f"{s.url}/api/webhooks/github",
        content=push,
        headers=_github_headers(_sign(push, SECRET)),
    )
    assert genuine.status_code == 202, genuine.text
