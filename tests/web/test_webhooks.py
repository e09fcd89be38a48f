"""Webhook deliveries against a real server: signatures, dedupe, branches, size, GitLab."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import uuid
from typing import Any

import httpx

from tests.web.fakes import FakeController
from tests.web.serving import WEBHOOK_SECRET, Running

SHA = "a" * 40


def _push(ref: str = "refs/heads/main", after: str = SHA) -> bytes:
    return json.dumps({"ref": ref, "before": "b" * 40, "after": after, "commits": []}).encode()


def _sign(body: bytes, secret: str = WEBHOOK_SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _github(
    server: Running,
    body: bytes,
    *,
    event: str = "push",
    delivery: str | None = None,
    signature: str | None = "auto",
) -> httpx.Response:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
    }
    if signature == "auto":
        headers["X-Hub-Signature-256"] = _sign(body)
    elif signature is not None:
        headers["X-Hub-Signature-256"] = signature
    return httpx.post(f"{server.url}/api/webhooks/github", content=body, headers=headers)


def _deliveries(server: Running) -> list[dict[str, Any]]:
    with server.client(server.admin_token) as http:
        answer = http.post("/api/deliveries/list", json={})
    assert answer.status_code == 200
    result: list[dict[str, Any]] = answer.json()
    return result


def _fake(server: Running) -> FakeController:
    assert isinstance(server.controller, FakeController)
    return server.controller


def test_valid_push_queues_a_reconcile(server: Running) -> None:
    answer = _github(server, _push(), delivery="d-valid")
    assert answer.status_code == 202
    assert answer.json()["outcome"] == "queued" and answer.json()["reconcile_id"]
    assert _fake(server).reconciles == [("main", "webhook", "d-valid", SHA)]
    [delivery] = _deliveries(server)
    assert delivery["delivery_id"] == "d-valid" and delivery["outcome"] == "queued"
    with server.client(server.admin_token) as http:
        reconciles = http.post("/api/project/main/reconciles/list", json={}).json()
    assert [r["delivery_id"] for r in reconciles] == ["d-valid"]


def test_invalid_signature_is_401_and_nothing_recorded(server: Running) -> None:
    body = _push()
    bad = _sign(body, "another-secret")
    for signature in (bad, None, "sha256=", "sha1=abc", _sign(b"other body")):
        answer = _github(server, body, signature=signature, delivery="d-forged")
        assert answer.status_code == 401, signature
    assert _fake(server).reconciles == []
    assert _deliveries(server) == []
    # the real delivery with that id still goes through: forgeries did not take its id
    assert _github(server, body, delivery="d-forged").json()["outcome"] == "queued"


def test_replayed_delivery_is_deduplicated(server: Running) -> None:
    first = _github(server, _push(), delivery="d-replay")
    second = _github(server, _push(), delivery="d-replay")
    assert first.json()["outcome"] == "queued"
    assert second.status_code == 202 and second.json()["outcome"] == "duplicate"
    assert len(_fake(server).reconciles) == 1
    assert len(_deliveries(server)) == 1


def test_other_branch_tag_and_deleted_branch_are_ignored_with_reason(server: Running) -> None:
    cases = [
        _push("refs/heads/feature"),
        _push("refs/tags/v1"),
        _push("refs/heads/main", after="0" * 40),
    ]
    for body in cases:
        answer = _github(server, body)
        assert answer.status_code == 202
        assert answer.json()["outcome"] == "ignored" and answer.json()["reason"]
    assert "refs/heads/feature" in _deliveries(server)[-1]["reason"]
    assert _fake(server).reconciles == []


def test_ping_and_pull_request(server: Running) -> None:
    ping = _github(server, b'{"zen": "Keep it logically awesome."}', event="ping")
    assert ping.status_code == 202 and ping.json()["outcome"] == "pong"
    pr = {"action": "opened", "pull_request": {"head": {"sha": SHA}, "base": {"ref": "main"}}}
    answer = _github(server, json.dumps(pr).encode(), event="pull_request")
    assert answer.status_code == 202 and answer.json()["outcome"] == "ignored"
    assert _fake(server).reconciles == []
    assert {d["event"] for d in _deliveries(server)} == {"ping", "pull_request"}


def test_oversize_body_is_413(server: Running) -> None:
    limit = server.settings.max_webhook_bytes
    # A declared length over the limit is refused before any body byte is read.
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /api/webhooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
            + f"Content-Length: {limit + 1}\r\n\r\n".encode()
        )
        status_line = sock.recv(4096).split(b"\r\n", 1)[0]
    assert b" 413 " in status_line

    def chunks() -> Any:  # no Content-Length: the server must count the stream
        block = b" " * (1024 * 1024)
        for _ in range(limit // len(block) + 2):
            yield block

    forged = "sha256=" + "0" * 64  # shaped as a signature, so the body is read (and hashed)
    streamed = httpx.post(
        f"{server.url}/api/webhooks/github",
        content=chunks(),
        headers={
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "d-big",
            "X-Hub-Signature-256": forged,
        },
    )
    assert streamed.status_code == 413
    assert _deliveries(server) == [] and _fake(server).reconciles == []


def test_bad_json_with_valid_signature_is_400(server: Running) -> None:
    answer = _github(server, b"not json")
    assert answer.status_code == 400
    assert _fake(server).reconciles == []


def _gitlab(
    server: Running, body: bytes, token: str | None, uuid_: str, event: str
) -> httpx.Response:
    headers = {"X-Gitlab-Event": event, "X-Gitlab-Event-UUID": uuid_}
    if token is not None:
        headers["X-Gitlab-Token"] = token
    return httpx.post(f"{server.url}/api/webhooks/gitlab", content=body, headers=headers)


def test_gitlab_token_push_and_merge_request(server: Running) -> None:
    push = json.dumps(
        {"object_kind": "push", "ref": "refs/heads/main", "after": SHA, "checkout_sha": SHA}
    ).encode()
    assert _gitlab(server, push, None, "g1", "Push Hook").status_code == 401
    assert _gitlab(server, push, "wrong", "g1", "Push Hook").status_code == 401
    assert _fake(server).reconciles == []
    ok = _gitlab(server, push, WEBHOOK_SECRET, "g1", "Push Hook")
    assert ok.status_code == 202 and ok.json()["outcome"] == "queued"
    again = _gitlab(server, push, WEBHOOK_SECRET, "g1", "Push Hook")
    assert again.json()["outcome"] == "duplicate"
    mr = json.dumps(
        {
            "object_attributes": {
                "action": "open",
                "target_branch": "main",
                "last_commit": {"id": SHA},
            }
        }
    ).encode()
    answer = _gitlab(server, mr, WEBHOOK_SECRET, "g2", "Merge Request Hook")
    assert answer.status_code == 202 and answer.json()["outcome"] == "ignored"
    assert _fake(server).reconciles == [("main", "webhook", "g1", SHA)]


def test_webhook_metrics_count_outcomes(server: Running) -> None:
    _github(server, _push())
    _github(server, _push(), signature="sha256=00")
    with server.client(server.admin_token) as http:
        text = http.get("/metrics").text
    assert 'dockyard_webhook_deliveries_total{outcome="queued",provider="github"} 1.0' in text
    assert 'dockyard_webhook_deliveries_total{outcome="rejected",provider="github"} 1.0' in text
    assert 'dockyard_reconciles{status="queued"} 1.0' in text
    assert "dockyard_worker_lag_seconds" in text


def test_queue_failures_are_answered_by_kind(tmp_path: Any) -> None:
    from reconciler.errors import TransientError, UsageError
    from tests.web.serving import running_server

    class NoRepo(FakeController):
        calls = 0

        async def request_reconcile(self, project: str, **kwargs: Any) -> str:
            NoRepo.calls += 1
            if NoRepo.calls == 1:
                raise UsageError("this server watches no config repo")
            raise TransientError("database busy")

    with running_server(tmp_path, lambda s, store: NoRepo(store)) as srv:
        ignored = _github(srv, _push(), delivery="n1")
        busy = _github(srv, _push(), delivery="n2")
        outcomes = {d["delivery_id"]: (d["outcome"], d["reason"]) for d in _deliveries(srv)}
    assert ignored.status_code == 202 and ignored.json()["outcome"] == "ignored"
    assert "no config repo" in ignored.json()["reason"]
    assert busy.status_code == 503
    assert outcomes == {
        "n1": ("ignored", "this server watches no config repo"),
        "n2": ("error", "database busy"),
    }
