"""Uploads are checked and bounded before they are kept (issue 12, findings 5 and 6).

Against a real server: the 2 MB tar bomb that extracted to 2 GiB in a job is refused at
upload, naming `archive-max-extracted-bytes`; a body that is not a gzip tar is refused; a
user who has filled `upload-quota-bytes` is refused further uploads, another user is not;
and nothing refused is stored.
"""

from __future__ import annotations

import hashlib
import io
import os
import select
import socket
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.adapters.db import Store
from reconciler.engine.controller import build_controller
from reconciler.ports import Controller
from reconciler.settings import Settings
from tests.security.bombs import tar_gz_bomb
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server

QUOTA = 300_000
PROJECT_QUOTA = 250_000
MiB = 2**20


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    with running_server(tmp_path, lambda settings, store: FakeController(store)) as running:
        yield running


@pytest.fixture
def small_quota(tmp_path: Path) -> Iterator[Running]:
    with running_server(
        tmp_path, lambda settings, store: FakeController(store), upload_quota_bytes=QUOTA
    ) as running:
        yield running


def _incompressible_tar_gz(name: str, size: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = size
        tar.addfile(info, io.BytesIO(os.urandom(size)))
    return buffer.getvalue()


def _stored(server: Running) -> set[str]:
    files = server.settings.data_dir / "files"
    if not files.is_dir():
        return set()
    return {p.name for p in files.iterdir() if p.is_file() and not p.name.startswith(".")}


def _user(server: Running, name: str) -> str:
    with server.client(server.admin_token) as http:
        made = http.post("/api/users/create", json={"username": name}).json()
    token: str = made["token"]
    return token


def test_a_tar_bomb_is_refused_at_upload(server: Running) -> None:
    bomb = tar_gz_bomb(2 * 2**30)  # 2 MB on the wire, 2 GiB once extracted
    assert len(bomb) < 3 * 2**20
    with server.client(_user(server, "bomber")) as http:
        answer = http.post("/api/files/upload_archive", content=bomb)
    assert answer.status_code == 400
    assert "archive-max-extracted-bytes" in answer.text
    assert "DOCKYARD_ARCHIVE_MAX_EXTRACTED_BYTES" in answer.text
    assert hashlib.sha256(bomb).hexdigest() not in _stored(server)


@pytest.mark.parametrize(
    "body",
    [b"PK\x03\x04 a zip file", b"just text", b"\x1f\x8b\x08\x00 truncated gzip"],
)
def test_only_gzip_tars_are_kept(server: Running, body: bytes) -> None:
    with server.client(_user(server, "sender")) as http:
        answer = http.post("/api/files/upload_archive", content=body)
    assert answer.status_code == 400
    assert "tar.gz" in answer.text
    assert _stored(server) == set()


def test_the_upload_quota_is_per_user(small_quota: Running) -> None:
    server = small_quota
    member, other = _user(server, "member"), _user(server, "other")
    archives = [_incompressible_tar_gz(f"f{i}", 90_000) for i in range(4)]
    with server.client(member) as http:
        for archive in archives[:3]:
            assert http.post("/api/files/upload_archive", content=archive).status_code == 200
        again = http.post("/api/files/upload_archive", content=archives[0])
        assert again.status_code == 200  # the same archive again costs nothing more
        refused = http.post("/api/files/upload_archive", content=archives[3])
    assert refused.status_code == 413
    assert "upload quota reached" in refused.text and "upload-quota-bytes" in refused.text
    assert hashlib.sha256(archives[3]).hexdigest() not in _stored(server)
    with server.client(other) as http:
        assert http.post("/api/files/upload_archive", content=archives[3]).status_code == 200


def _stream(server: Running, token: str, total: int) -> tuple[str, int, bool]:
    """POST `total` bytes chunked (a gzip header, then zeros), 1 MiB at a time, until the
    server answers: its status line, the MiB sent, and whether it closed the connection."""
    port = int(server.url.rsplit(":", 1)[1])
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(
            b"POST /api/files/upload_archive HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"\x1f\x8b" + bytes(MiB - 2)
        while sent < total and not select.select([conn], [], [], 0)[0]:
            try:
                conn.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            except OSError:
                break
            sent += len(chunk)
        # the server's answer, then its end of the connection: EOF or a reset is closed; no
        # byte and no EOF for 30 s is a server holding the connection open to read on
        conn.settimeout(30)
        answer = b""
        try:
            while part := conn.recv(65536):
                answer += part
            closed = True
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            closed = False
    status = answer.split(b"\r\n", 1)[0].decode(errors="replace")
    body = answer.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
    return (
        f"{status} {body}",
        sent // MiB,
        closed,
    )


def test_a_chunked_upload_is_refused_as_it_streams(server: Running) -> None:
    answer, sent_mib, closed = _stream(server, _user(server, "streamer"), 64 * MiB)
    assert answer.startswith("HTTP/1.1 413"), answer
    assert "upload-max-bytes" in answer
    assert sent_mib < 40, f"the server read on: {sent_mib} MiB sent before it answered"
    assert closed, "the connection stays open: the rest would be read"
    assert _stored(server) == set()


def test_a_full_quota_stops_a_stream_at_what_is_left(small_quota: Running) -> None:
    token = _user(small_quota, "filler")
    with small_quota.client(token) as http:
        archive = _incompressible_tar_gz("f", 250_000)
        assert http.post("/api/files/upload_archive", content=archive).status_code == 200
    answer, sent_mib, _ = _stream(small_quota, token, 64 * MiB)
    assert answer.startswith("HTTP/1.1 413") and "upload quota reached" in answer, answer
    assert "bytes left" in answer and "upload-quota-bytes" in answer
    assert sent_mib < 24, f"read up to the upload limit, not the quota: {sent_mib} MiB"


@pytest.fixture
def projects(tmp_path: Path) -> Iterator[Running]:
    """A server with the real controller (runs are stored), a small project quota."""

    def controller(settings: Settings, store: Store) -> Controller:
        return build_controller(settings, store, engines={})

    with running_server(tmp_path, controller, project_upload_quota_bytes=PROJECT_QUOTA) as running:
        yield running


def _member(server: Running, name: str, project: str) -> str:
    token = _user(server, name)
    body = {"members": [{"username": name, "project_role": "user"}]}
    with server.client(server.admin_token) as http:
        added = http.post(f"/api/projects/{project}/add_members", json=body)
    assert added.status_code == 200, added.text
    return token


def _apply(http: httpx.Client, project: str, name: str, archive: str) -> httpx.Response:
    text = f"type: task\nname: {name}\ncommands: [ls]\n"
    body = {"text": text, "path": f"{name}.dstack.yml", "file_archives": [
        {"id": archive, "path": "."}
    ]}  # fmt: skip
    return http.post(f"/api/project/{project}/runs/apply", json=body)


def test_a_member_fills_one_projects_quota_and_not_another(projects: Running) -> None:
    with projects.client(projects.admin_token) as http:
        assert http.post("/api/projects/create", json={"project_name": "other"}).is_success
    member, neighbour = _member(projects, "filler", "main"), _member(projects, "nb", "other")
    archives = [_incompressible_tar_gz(f"f{i}", 100_000) for i in range(3)]
    with projects.client(member) as http:
        ids = [http.post("/api/files/upload_archive", content=a).json()["id"] for a in archives]
        for index in range(2):  # 2 x 100 KB attached to runs of main: within 250 KB
            assert _apply(http, "main", f"r{index}", ids[index]).status_code == 200
        refused = _apply(http, "main", "r2", ids[2])
        again = _apply(http, "main", "r3", ids[0])  # named already: adds nothing
    assert refused.status_code == 400, refused.text
    assert "project upload quota reached" in refused.text and "project main" in refused.text
    assert "project-upload-quota-bytes" in refused.text
    assert "DOCKYARD_PROJECT_UPLOAD_QUOTA_BYTES" in refused.text
    assert again.status_code == 200, again.text
    with projects.client(neighbour) as http:
        mine = http.post("/api/files/upload_archive", content=archives[2]).json()["id"]
        assert _apply(http, "other", "theirs", mine).status_code == 200
