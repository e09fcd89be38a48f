"""dstack's `files:` archives read into Dockyard's (reconciler/core/dstack_files.py): the
multipart part, gzip, the UUID id and its digest prefix, members renamed to land at path."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from reconciler.core.dstack_files import (
    DstackArchiveError,
    archive_id,
    gzipped,
    id_prefix,
    multipart_file,
    placed,
)


def _tar(members: dict[str, bytes | None]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _names(archive: bytes) -> dict[str, bytes | None]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return {m.name: (f.read() if (f := tar.extractfile(m)) else None) for m in tar.getmembers()}


def test_the_part_of_a_multipart_body() -> None:
    body = (
        b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="abc123"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n\x00\r\n--bin\r\n\r\n--XyZ--\r\n"
    )
    name, data = multipart_file(body, "multipart/form-data; boundary=XyZ")
    assert (name, data) == ("abc123", b"\x00\r\n--bin\r\n")
    with pytest.raises(DstackArchiveError):
        multipart_file(body, "multipart/form-data")


def test_ids_and_gzip() -> None:
    digest = hashlib.sha256(b"x").hexdigest()
    assert id_prefix(archive_id(digest)) == digest[:32]
    assert id_prefix("not-a-uuid") is None
    plain = _tar({"f.txt": b"hi"})
    assert gzipped(plain)[:2] == b"\x1f\x8b" and gzipped(gzipped(plain)) == gzipped(plain)


def test_members_land_at_their_path() -> None:
    directory = _tar({"data": None, "data/a.txt": b"a", "data/sub/b.txt": b"b"})
    where, packed = placed(gzipped(directory), "inputs")
    assert where == "." and _names(packed) == {
        "inputs": None,
        "inputs/a.txt": b"a",
        "inputs/sub/b.txt": b"b",
    }
    where, packed = placed(_tar({"one.txt": b"1"}), "/opt/conf/renamed.txt")
    assert where == "/opt/conf" and _names(packed) == {"renamed.txt": b"1"}
    with pytest.raises(DstackArchiveError):
        placed(directory, "/")
    with pytest.raises(DstackArchiveError):
        placed(b"not a tar at all" * 40, "x")
