"""`/api/files/*`: archives stored once by hash; applies naming an unknown one are refused."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
from pathlib import Path

from reconciler.adapters.blobs import BlobStore
from reconciler.web.routes_files import MAX_ARCHIVE_BYTES
from tests.web.serving import Running


def tar_gz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_upload_lookup_and_refusals(server: Running) -> None:
    data = tar_gz({"train.py": b"print('hi')\n"})
    digest = hashlib.sha256(data).hexdigest()
    with server.client(server.admin_token) as http:
        missing = http.post("/api/files/get_archive_by_hash", json={"hash": digest})
        assert missing.status_code == 400  # dstack's "resource_not_exists", so it uploads
        assert missing.json()["detail"][0]["code"] == "resource_not_exists"
        stored = http.post("/api/files/upload_archive", content=data).json()
        assert stored == {"id": digest, "blob_hash": digest}
        found = http.post("/api/files/get_archive_by_hash", json={"hash": digest})
        assert found.status_code == 200
        assert (server.settings.data_dir / "files" / digest).read_bytes() == data
        too_big = http.post("/api/files/upload_archive", content=b"x" * (MAX_ARCHIVE_BYTES + 1))
        assert too_big.status_code == 413 and "upload-max-bytes" in too_big.text
        not_gzip = http.post("/api/files/upload_archive", content=b"\x1f\x8b not really gzip")
        assert not_gzip.status_code == 400 and "not a readable tar.gz" in not_gzip.text
        assert http.post("/api/files/upload_archive", content=b"").status_code == 400
        unknown = http.post(
            "/api/project/main/runs/get_plan",
            json={
                "text": "type: task\nname: tt\ncommands: [ls]\n",
                "file_archives": [{"id": "0" * 64, "path": "."}],
            },
        )
        assert unknown.status_code == 400 and "was not uploaded" in unknown.text
    with server.client() as anonymous:
        assert anonymous.post("/api/files/upload_archive", content=data).status_code == 401


def test_an_upload_now_and_then_sweeps_archives_no_run_names(server: Running) -> None:
    files = server.settings.data_dir / "files"
    files.mkdir(parents=True, exist_ok=True)
    old = files / ("a" * 64)
    old.write_bytes(b"old")
    two_days_ago = time.time() - 2 * 86400
    os.utime(old, (two_days_ago, two_days_ago))
    with server.client(server.admin_token) as http:
        new = tar_gz({"new": b"new"})
        assert http.post("/api/files/upload_archive", content=new).status_code == 200
    assert not old.exists(), "an old archive no run names is deleted"
    assert (files / hashlib.sha256(new).hexdigest()).exists(), "the new one stays"


def test_sweep_keeps_named_and_recent_archives(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "files")
    named, recent, stale = blobs.put(b"named"), blobs.put(b"recent"), blobs.put(b"stale")
    for digest in (named, stale):
        os.utime(blobs.root / digest, (1000.0, 1000.0))
    os.utime(blobs.root / recent, (90_000.0, 90_000.0))
    assert blobs.sweep({named}, now=100_000.0, grace=86_400.0) == 1
    assert blobs.has(named) and blobs.has(recent) and not blobs.has(stale)
