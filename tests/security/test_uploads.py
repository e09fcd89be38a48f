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
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.bombs import tar_gz_bomb
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server

QUOTA = 300_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
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
    return {p.name for p in files.iterdir() if p.is_file()} if files.is_dir() else set()


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


def test_the_upload_quota_is_per_user(server: Running) -> None:
    member, other = _user(server, "member"), _user(server, "other")
    archives = [_incompressible_tar_gz(f"f{i}", 90_000) for i in range(4)]
    with server.client(member) as http:
        for archive in archives[:3]:
            assert http.post("/api/files/upload_archive", content=archive).status_code == 200
        again = http.post("/api/files/upload_archive", content=archives[0])
        assert again.status_code == 200  # the same archive again costs nothing more
        refused = http.post("/api/files/upload_archive", content=archives[3])
    assert refused.status_code == 400
    assert "upload quota reached" in refused.text and "upload-quota-bytes" in refused.text
    assert hashlib.sha256(archives[3]).hexdigest() not in _stored(server)
    with server.client(other) as http:
        assert http.post("/api/files/upload_archive", content=archives[3]).status_code == 200
