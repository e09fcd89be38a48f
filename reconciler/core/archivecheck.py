"""What an uploaded archive must be before the server keeps it (pure: bytes in, verdict out).

Called by `reconciler.web.routes_files` for `/api/files/upload_archive`: the body must be
a gzip-compressed tar (what `dockyard apply` packs, as dstack does), readable to its end
marker, with at most `max_files` members that extract to at most `max_bytes` in all.
The stream is inflated once, at most `_STEP` bytes at a time, and each member's size is
counted from its header before its data is skipped, so a decompression bomb is refused
at its first oversized member and never expands in memory or on disk. The agent bounds
the extraction again (`agent.server.archives`).
"""

from __future__ import annotations

import tarfile
import zlib

GZIP_MAGIC = b"\x1f\x8b"
_BLOCK = 512
_STEP = 1024 * 1024
"""Bytes inflated at a time: memory stays flat whatever the archive expands to."""
_META = frozenset(
    {tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
     tarfile.SOLARIS_XHDTYPE}
)  # fmt: skip


class _Inflated:
    """The decompressed stream of (possibly several concatenated) gzip members."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._inflater = zlib.decompressobj(31)
        self._pending = b""

    def _more(self, want: int) -> bytes:
        inflater = self._inflater
        if inflater.unconsumed_tail:
            source: bytes = inflater.unconsumed_tail
        elif inflater.eof and inflater.unused_data:
            source = inflater.unused_data
            self._inflater = inflater = zlib.decompressobj(31)
        elif self._pos < len(self._data):
            source = bytes(self._data[self._pos : self._pos + _STEP])
            self._pos += len(source)
        else:
            raise EOFError("unexpected end of data")
        return inflater.decompress(source, want)

    def read(self, size: int) -> bytes:
        while len(self._pending) < size:
            self._pending += self._more(size - len(self._pending))
        block, self._pending = self._pending[:size], self._pending[size:]
        return block

    def skip(self, size: int) -> None:
        dropped = min(size, len(self._pending))
        self._pending = self._pending[dropped:]
        size -= dropped
        while size > 0:
            size -= len(self._more(min(size, _STEP)))


def archive_problem(data: bytes, *, max_bytes: int, max_files: int) -> str | None:
    """Why `data` is not an archive the server keeps, or None."""
    if not data.startswith(GZIP_MAGIC):
        return "the archive is not a gzip-compressed tar (.tar.gz)"
    stream = _Inflated(data)
    files = total = 0
    try:
        while (header := stream.read(_BLOCK)) != bytes(_BLOCK):
            member = tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape")
            stored = -(-max(member.size, 0) // _BLOCK) * _BLOCK
            if member.type not in _META:
                files += 1
                total += max(member.size, 0)
            if files > max_files:
                return (
                    f"the archive has more than {max_files} files (archive-max-files): "
                    "bring fewer files, or raise DOCKYARD_ARCHIVE_MAX_FILES"
                )
            if total > max_bytes:
                return (
                    f"the archive extracts to more than {max_bytes} bytes "
                    "(archive-max-extracted-bytes): bring less, or raise "
                    "DOCKYARD_ARCHIVE_MAX_EXTRACTED_BYTES"
                )
            stream.skip(stored)
    except (tarfile.TarError, EOFError, zlib.error) as error:
        return f"the archive is not a readable tar.gz: {str(error)[:200]}"
    return None
