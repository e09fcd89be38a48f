"""A fake GitHub and GitLab REST API on loopback that records every request.

The only fake of the pull-request feature: a real HTTP server (stdlib, one thread per
request) keeping comments, notes and statuses in memory, checking the token header, and
answering with a queued failure (status, headers, body) when a test asks for one.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "ghp_s3cr3tT0kenValue000000000000000000"
GITLAB_TOKEN = "glpat-s3cr3tGitLabT0ken00000"
HEAD_SHA = "f" * 40


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class HostState:
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    statuses: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    failures: list[tuple[int, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    trees: dict[str, str] = field(default_factory=dict)
    """commit SHA → its tree SHA (`git/commits/{sha}`; default: "tree" + the SHA)."""
    head: str = HEAD_SHA
    """The head commit `pulls/{n}` and `merge_requests/{n}` answer."""
    repo: Path | None = None
    """A real git repository GitLab's `repository/tree` and `blobs/{id}/raw` read."""
    next_id: int = 1000
    tokens: set[str] = field(default_factory=set)
    """More tokens either API accepts (a source's own), beside TOKEN and GITLAB_TOKEN."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_next(self, status: int, body: dict[str, Any], **headers: str) -> None:
        self.failures.append((status, headers, body))

    def add_comment(self, body: str, author: str) -> int:
        """A comment written on the host by `author` (as if through its web page)."""
        with self.lock:
            self.next_id += 1
            self.comments[self.next_id] = {
                "id": self.next_id,
                "body": body,
                "user": {"login": author},
                "author": {"username": author, "id": sum(map(ord, author))},
            }
            return self.next_id

    def bodies(self) -> list[str]:
        return [c["body"] for c in self.comments.values()]


class _Handler(BaseHTTPRequestHandler):
    state: HostState

    def log_message(self, format: str, *args: Any) -> None:
        del format, args

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = isinstance(body, bytes)
        data = body if raw else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if raw else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        state = self.state
        parts = urlsplit(self.path)
        with state.lock:
            state.requests.append(
                Recorded(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
            )
            failure = state.failures.pop(0) if state.failures else None
        if failure is not None:
            self._send(failure[0], failure[2], failure[1])
            return
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if parts.path.startswith("/api/v4/"):
            if self.headers.get("PRIVATE-TOKEN") not in {GITLAB_TOKEN, *state.tokens}:
                self._send(401, {"message": "401 Unauthorized"})
                return
            status, answer = _gitlab(state, self.command, unquote(parts.path[7:]), query, body)
        else:
            accepted = {f"Bearer {t}" for t in (TOKEN, *state.tokens)}
            if self.headers.get("Authorization") not in accepted:
                self._send(401, {"message": "Bad credentials"})
                return
            status, answer = _github(state, self.command, parts.path, query, body)
        self._send(status, answer)

    do_GET = do_POST = do_PATCH = do_PUT = _handle


def _page(items: list[Any], query: dict[str, str]) -> list[Any]:
    size = int(query.get("per_page", 30))
    page = int(query.get("page", 1))
    return items[(page - 1) * size : page * size]


def _new_comment(state: HostState, body: dict[str, Any], limit: int) -> tuple[int, Any]:
    text = body.get("body", "")
    if len(text) >= limit:
        return 422, {"message": "Validation Failed: body is too long (maximum is 65536 characters)"}
    with state.lock:
        state.next_id += 1
        state.comments[state.next_id] = {"id": state.next_id, "body": text}
        return 201, state.comments[state.next_id]


def _github(
    state: HostState, method: str, path: str, query: dict[str, str], body: Any
) -> tuple[int, Any]:
    if m := re.fullmatch(r"/repos/[^/]+/[^/]+/issues/\d+/comments", path):
        if method == "GET":
            return 200, _page(list(state.comments.values()), query)
        return _new_comment(state, body, 65_536)
    if m := re.fullmatch(r"/repos/[^/]+/[^/]+/issues/comments/(\d+)", path):
        comment = state.comments.get(int(m.group(1)))
        if comment is None:
            return 404, {"message": "Not Found"}
        if method == "GET":
            return 200, comment
        comment["body"] = body["body"]
        return 200, comment
    if re.fullmatch(r"/repos/[^/]+/[^/]+/pulls/\d+", path):
        return 200, {"head": {"sha": state.head, "ref": "feature"}}
    if m := re.fullmatch(r"/repos/[^/]+/[^/]+/git/commits/(\w+)", path):
        sha = m.group(1)
        return 200, {"sha": sha, "tree": {"sha": state.trees.get(sha, "tree" + sha)}}
    if m := re.fullmatch(r"/repos/[^/]+/[^/]+/statuses/(\w+)", path):
        state.statuses.append((m.group(1), body))
        return 201, {"id": len(state.statuses), **body}
    if re.fullmatch(r"/repos/[^/]+/[^/]+/git/trees/\w+", path):
        tree = [{"path": p, "type": "blob", "sha": p} for p in state.files]
        return 200, {"tree": tree, "truncated": False}
    if m := re.fullmatch(r"/repos/[^/]+/[^/]+/git/blobs/(.+)", path):
        content = base64.b64encode(state.files[m.group(1)]).decode()
        return 200, {"content": content, "encoding": "base64"}
    return 404, {"message": "Not Found"}


def _gitlab(
    state: HostState, method: str, path: str, query: dict[str, str], body: Any
) -> tuple[int, Any]:
    if re.fullmatch(r"/projects/[^/]+/[^/]+/merge_requests/\d+/notes", path):
        if method == "GET":
            return 200, _page(list(state.comments.values()), query)
        return _new_comment(state, body, 1_000_000)
    if m := re.fullmatch(r"/projects/[^/]+/[^/]+/merge_requests/\d+/notes/(\d+)", path):
        note = state.comments.get(int(m.group(1)))
        if note is None:
            return 404, {"message": "404 Not found"}
        if method == "GET":
            return 200, note
        note["body"] = body["body"]
        return 200, note
    if re.fullmatch(r"/projects/[^/]+/[^/]+/merge_requests/\d+", path):
        return 200, {"iid": 1, "sha": state.head}
    if state.repo is not None and path.endswith("/repository/tree"):
        return 200, _page(_git_tree(state.repo, query), query)
    if state.repo is not None and (m := re.search(r"/repository/blobs/(\w+)/raw$", path)):
        return 200, _git(state.repo, "cat-file", "blob", m.group(1))
    if m := re.fullmatch(r"/projects/[^/]+/[^/]+/statuses/(\w+)", path):
        state.statuses.append((m.group(1), body))
        return 201, {"id": len(state.statuses), "status": body["state"]}
    return 404, {"message": "404 Not found"}


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, timeout=30
    ).stdout


def _git_tree(repo: Path, query: dict[str, str]) -> list[dict[str, str]]:
    """GitLab's `repository/tree` entries of `ref` (`recursive`: every path), as `git
    ls-tree` says them."""
    recursive = ["-r", "-t"] if query.get("recursive") == "true" else []
    listing = _git(repo, "ls-tree", "-z", *recursive, query["ref"]).decode()
    entries = []
    for line in filter(None, listing.split("\0")):
        info, path = line.split("\t", 1)
        mode, kind, ident = info.split()
        name = path.rsplit("/", 1)[-1]
        entries.append({"id": ident, "name": name, "type": kind, "path": path, "mode": mode})
    return entries


@dataclass
class FakeHost:
    url: str
    state: HostState

    @property
    def gitlab_url(self) -> str:
        return f"{self.url}/api/v4"


@contextmanager
def fake_host() -> Iterator[FakeHost]:
    state = HostState()
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeHost(f"http://127.0.0.1:{server.server_address[1]}", state)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
