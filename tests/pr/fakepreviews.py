"""The fake GitHub and GitLab of `tests/pr/fakehost.py`, plus what preview runs ask.

A real HTTP server on loopback recording every request (`state.requests`), as the other
PR tests use. On top of comments, notes, statuses and files it answers, from `PullState`:
GitHub `pulls/{n}` (state, merged, labels, head and base repositories),
`issues/{n}/events` (labeled / unlabeled with the actor), `collaborators/{login}/permission`;
GitLab `merge_requests/{iid}` (state, labels, source and target project),
`resource_label_events`, `users?username=`, `members/all/{id}`, `repository/tree` and raw
blobs of `state.files`.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.pr.fakehost import GITLAB_TOKEN, TOKEN, HostState, Recorded, _Handler

LABEL = "dockyard:preview"


@dataclass
class PullState:
    """One PR as the host's API shows it."""

    state: str = "open"
    """open | closed | merged."""
    labels: list[str] = field(default_factory=list)
    label_events: list[tuple[str, str]] = field(default_factory=list)
    """(`labeled` | `unlabeled`, login), oldest first."""
    fork: bool = False

    def label(self, login: str) -> None:
        self.labels.append(LABEL)
        self.label_events.append(("labeled", login))

    def unlabel(self, login: str) -> None:
        self.labels.remove(LABEL)
        self.label_events.append(("unlabeled", login))


@dataclass
class PreviewHostState(HostState):
    pull: PullState = field(default_factory=PullState)
    writers: set[str] = field(default_factory=lambda: {"maintainer"})
    """Logins with write access (GitHub `write`; GitLab Developer)."""

    def calls(self, fragment: str) -> list[Recorded]:
        return [r for r in self.requests if fragment in r.path]


def _user_id(login: str) -> int:
    return sum(map(ord, login))


class _PreviewHandler(_Handler):
    state: PreviewHostState

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _raw(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _preview_get(self) -> bool:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        state = self.state
        gitlab = path.startswith("/api/v4/")
        if gitlab and self.headers.get("PRIVATE-TOKEN") != GITLAB_TOKEN:
            return False
        if not gitlab and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return False
        answer = _gitlab(state, path[7:], query) if gitlab else _github(state, path, query)
        if answer is None:
            return False
        with state.lock:
            headers = {k.lower(): v for k, v in self.headers.items()}
            state.requests.append(Recorded("GET", self.path, headers, None))
        if isinstance(answer[1], bytes):
            self._raw(answer[1])
        else:
            self._json(*answer)
        return True

    def do_GET(self) -> None:
        if not self._preview_get():
            self._handle()


def _pages(items: list[Any], query: dict[str, str]) -> list[Any]:
    size = int(query.get("per_page", 30))
    page = int(query.get("page", 1))
    return items[(page - 1) * size : page * size]


def _github(state: PreviewHostState, path: str, query: dict[str, str]) -> tuple[int, Any] | None:
    pull = state.pull
    if re.fullmatch(r"/repos/[^/]+/[^/]+/pulls/\d+", path):
        head_repo = "someone/cfg" if pull.fork else "acme/cfg"
        return 200, {
            "state": "closed" if pull.state != "open" else "open",
            "merged": pull.state == "merged",
            "labels": [{"name": name} for name in pull.labels],
            "head": {"sha": state.head, "ref": "feature", "repo": {"full_name": head_repo}},
            "base": {"ref": "main", "repo": {"full_name": "acme/cfg"}},
        }
    if re.fullmatch(r"/repos/[^/]+/[^/]+/issues/\d+/events", path):
        events = [
            {"event": kind, "label": {"name": LABEL}, "actor": {"login": login}}
            for kind, login in pull.label_events
        ]
        return 200, _pages(events, query)
    if m := re.fullmatch(r"/repos/[^/]+/[^/]+/collaborators/([^/]+)/permission", path):
        login = m.group(1)
        permission = "write" if login in state.writers else "read"
        return 200, {"permission": permission, "role_name": permission}
    return None


def _gitlab(state: PreviewHostState, path: str, query: dict[str, str]) -> tuple[int, Any] | None:
    pull = state.pull
    if re.fullmatch(r"/projects/[^/]+/[^/]+/merge_requests/\d+", path):
        gitlab_state = {"open": "opened"}.get(pull.state, pull.state)
        return 200, {
            "iid": 1,
            "sha": state.head,
            "state": gitlab_state,
            "labels": list(pull.labels),
            "source_project_id": 2 if pull.fork else 1,
            "target_project_id": 1,
        }
    if re.fullmatch(r"/projects/[^/]+/[^/]+/merge_requests/\d+/resource_label_events", path):
        events = [
            {
                "action": "add" if kind == "labeled" else "remove",
                "label": {"name": LABEL},
                "user": {"id": _user_id(login), "username": login},
            }
            for kind, login in pull.label_events
        ]
        return 200, _pages(events, query)
    if path == "/users":
        login = query.get("username", "")
        return 200, [{"id": _user_id(login), "username": login}]
    if m := re.fullmatch(r"/projects/[^/]+/[^/]+/members/all/(\d+)", path):
        for login in state.writers:
            if _user_id(login) == int(m.group(1)):
                return 200, {"id": _user_id(login), "username": login, "access_level": 30}
        return 404, {"message": "404 Not found"}
    if m := re.fullmatch(r"/projects/[^/]+/[^/]+/merge_requests/\d+/notes/(\d+)", path):
        note = state.comments.get(int(m.group(1)))
        return (200, note) if note is not None else (404, {"message": "404 Not found"})
    if path.endswith("/repository/tree"):
        entries = [
            {"id": base64.b32encode(p.encode()).decode(), "path": p, "type": "blob"}
            for p in state.files
        ]
        return 200, _pages(entries, query)
    if m := re.search(r"/repository/blobs/([A-Z2-7=]+)/raw$", path):
        return 200, state.files[base64.b32decode(m.group(1)).decode()]
    return None


@dataclass
class FakePreviewHost:
    url: str
    state: PreviewHostState

    @property
    def gitlab_url(self) -> str:
        return f"{self.url}/api/v4"


@contextmanager
def fake_preview_host() -> Iterator[FakePreviewHost]:
    state = PreviewHostState()
    handler = type("Handler", (_PreviewHandler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakePreviewHost(f"http://127.0.0.1:{server.server_address[1]}", state)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
