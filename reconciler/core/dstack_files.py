"""dstack's `files:` archives, read into Dockyard's (pure: bytes in, bytes out; no I/O).

dstack 0.22.5's client packs each `files:` entry (`local_path:path`) as a plain tar whose
members are named from the local path's own name (`data/a.txt` for a directory `data`,
`f.txt` for a file), uploads it to `/api/files/upload_archive` as multipart form data (one
part, `file`, named with the tar's sha256) and expects `{id: <UUID>, hash}` back; the run
spec then names it `file_archives: [{id, path}]`, `path` being where it lands in the job.

Dockyard keeps gzip tars named by their sha256 (`routes_files`), extracted by the agent
at a directory (`agent.server.archives`). So: `multipart_file` takes the part out of the
body, `gzipped` makes it a gzip tar, `archive_id` gives the UUID dstack wants (the
digest's first 128 bits, so `id_prefix` finds the archive again), and `placed` renames the
members so that they land at `path` (the top name becomes `path`'s own name, extracted in
its parent directory). Called by `routes_files` (upload) and `routes_dstack` (run specs).
"""

from __future__ import annotations

import gzip
import io
import posixpath
import re
import tarfile
import uuid

GZIP_MAGIC = b"\x1f\x8b"
_BOUNDARY = re.compile(r'boundary="?([^";]{1,200})"?', re.IGNORECASE)


class DstackArchiveError(ValueError):
    """The upload or the archive is not what dstack's client sends."""


def is_multipart(content_type: str) -> bool:
    return content_type.lower().startswith("multipart/form-data")


def multipart_file(body: bytes, content_type: str) -> tuple[str, bytes]:
    """(the part's filename, its bytes) of a one-part `multipart/form-data` body."""
    found = _BOUNDARY.search(content_type)
    if found is None:
        raise DstackArchiveError("multipart upload without a boundary")
    delimiter = b"--" + found.group(1).encode()
    start = body.find(delimiter)
    head_end = body.find(b"\r\n\r\n", start)
    end = body.rfind(b"\r\n" + delimiter)
    if start < 0 or head_end < 0 or end < head_end:
        raise DstackArchiveError("multipart upload: no file part")
    headers = body[start + len(delimiter) : head_end].decode("utf-8", "replace")
    name = re.search(r'filename="([^"]*)"', headers)
    return (name.group(1)[:256] if name else ""), body[head_end + 4 : end]


def gzipped(data: bytes) -> bytes:
    """A gzip tar of `data` (a plain tar; a gzip one is returned as it is)."""
    if data.startswith(GZIP_MAGIC):
        return data
    return gzip.compress(data, mtime=0)


def archive_id(digest: str) -> str:
    """The UUID dstack's client reads for the archive whose sha256 is `digest`."""
    return str(uuid.UUID(hex=digest[:32]))


def id_prefix(archive: str) -> str | None:
    """The digest prefix a dstack archive id stands for (None: not one of ours)."""
    try:
        return uuid.UUID(archive).hex
    except ValueError:
        return None


def placed(archive: bytes, path: str) -> tuple[str, bytes]:
    """(the directory to extract in, a gzip tar) that puts dstack's archive at `path`."""
    target = posixpath.normpath(path.rstrip("/")) if path.rstrip("/") else ""
    parent, base = posixpath.split(target)
    if not base or base in (".", ".."):
        raise DstackArchiveError(f"files: {path!r}: name a file or directory to create")
    out = io.BytesIO()
    try:
        with (
            tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as source,
            gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as zipped,
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for member in source:
                top, _, rest = member.name.strip("/").partition("/")
                if not top:
                    continue
                member.name = f"{base}/{rest}" if rest else base
                data = source.extractfile(member) if member.isfile() else None
                tar.addfile(member, data)
    except (tarfile.TarError, EOFError, OSError) as error:
        raise DstackArchiveError(f"files: {path!r}: not a readable tar: {error}") from error
    return parent or ".", out.getvalue()
