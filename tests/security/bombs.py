"""Decompression bombs for the security tests and bench/bounds.py.

`tar_gz_bomb(size)`: one gzip member (as `tarfile` and `tar xz` read it) holding a tar with
one file of `size` zero bytes: 2 GiB compress to about 2 MB. Built without compressing
2 GiB: a 16 MiB run of zeros is deflated once after a full flush (the dictionary
restarts, so the block is the same every time) and repeated; the CRC of the zeros is
computed as zlib's `crc32_combine` does (GF(2) matrices), not by reading 2 GiB.
"""

from __future__ import annotations

import struct
import tarfile
import zlib

_CHUNK = 16 * 2**20


def tar_gz_bomb(size: int = 2 * 2**30, name: str = "zeros.bin") -> bytes:
    if size % _CHUNK:
        raise ValueError("size must be a multiple of 16 MiB")
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    zeros = bytes(_CHUNK)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(header) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.compress(bytes(1024)) + compressor.flush()
    crc = zlib.crc32(bytes(1024), _crc32_zeros(zlib.crc32(header), size))
    total = len(header) + size + 1024
    gzip_head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc & 0xFFFFFFFF, total & 0xFFFFFFFF)
    return gzip_head + head + block * (size // _CHUNK) + tail + trailer


def _gf2_times(matrix: list[int], vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[n]) for n in range(32)]


def _crc32_zeros(crc: int, length: int) -> int:
    """The CRC-32 of (what gave `crc`) followed by `length` zero bytes."""
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    crc ^= 0xFFFFFFFF
    while length:
        even = _gf2_square(odd)
        if length & 1:
            crc = _gf2_times(even, crc)
        length >>= 1
        if not length:
            break
        odd = _gf2_square(even)
        if length & 1:
            crc = _gf2_times(odd, crc)
        length >>= 1
    return crc ^ 0xFFFFFFFF
