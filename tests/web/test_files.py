"""`/api/files/*`: archives stored once by hash; applies naming an unknown one are refused."""

from __future__ import annotations

import hashlib

from reconciler.web.routes_files import MAX_ARCHIVE_BYTES
from tests.web.serving import Running


def test_upload_lookup_and_refusals(server: Running) -> None:
    data = b"\x1f\x8b not really gzip, the server does not care"
    digest = hashlib.sha256(data).hexdigest()
    with server.client(server.admin_token) as http:
        missing = http.post("/api/files/get_archive_by_hash", json={"hash": digest})
        assert missing.status_code == 404
        stored = http.post("/api/files/upload_archive", content=data).json()
        assert stored == {"id": digest, "blob_hash": digest}
        found = http.post("/api/files/get_archive_by_hash", json={"hash": digest})
        assert found.status_code == 200
        assert (server.settings.data_dir / "files" / digest).read_bytes() == data
        too_big = http.post("/api/files/upload_archive", content=b"x" * (MAX_ARCHIVE_BYTES + 1))
        assert too_big.status_code == 400 and "MiB" in too_big.text
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
