"""Which TCP sockets listen on a port for connections to 127.0.0.1: (uid, inode) of each.

`agent.server.portholders` asks this for every connection to a job's port, so it must be
cheap. The kernel answers through sock_diag netlink (`netlink_listeners`): a dump of the
LISTEN sockets only, which walks the listening hash and nothing else. Reading
`/proc/net/tcp` and `/proc/net/tcp6` instead walks every established bucket too: about
2 ms per file on the 2-core test VM whatever the number of sockets (bench/port_check.py),
so it is only the fallback where netlink is refused (`proc_listeners`, whose parsing is
`listening_sockets`, pure; the row layout is `peers.established_socket`'s).

A socket counts when its address takes a connection to 127.0.0.1: 0.0.0.0, 127.0.0.1,
::, ::ffff:127.0.0.1 and ::ffff:0.0.0.0 (a `::1` or 10.x listener never gets one).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from pathlib import Path

_LISTEN = b"0A"  # `st` of /proc/net/tcp (include/net/tcp_states.h)
_TCP_LISTEN = 10
# Local addresses, as /proc/net/tcp{,6} print them, that take a connection to 127.0.0.1.
_LOOPBACK_ACCEPTING = frozenset(
    {
        b"00000000",  # 0.0.0.0
        b"0100007F",  # 127.0.0.1
        b"00000000000000000000000000000000",  # ::
        b"0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1
        b"0000000000000000FFFF000000000000",  # ::ffff:0.0.0.0
    }
)
# The same addresses as netlink gives them (network order), by family.
_ACCEPTING = {
    socket.AF_INET: frozenset({bytes(4), socket.inet_aton("127.0.0.1")}),
    socket.AF_INET6: frozenset(
        socket.inet_pton(socket.AF_INET6, address) for address in ("::", "::ffff:127.0.0.1")
    )
    | {socket.inet_pton(socket.AF_INET6, "::ffff:0.0.0.0")},
}
TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
Listener = tuple[int, int]  # (uid, inode)

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_REQUEST = struct.Struct("=BBBBI48x")  # inet_diag_req_v2: family, protocol, ext, pad, states
_MESSAGE = struct.Struct("=BBBB2s2s16s16sI8sIIIII")  # inet_diag_msg


def listening_sockets(tables: Iterable[bytes], port: int) -> list[Listener]:
    """(uid, inode) of each LISTEN socket on `port` that a connection to 127.0.0.1 reaches,
    from the text of /proc/net/tcp and /proc/net/tcp6."""
    suffix = f":{port:04X}".encode()
    found = []
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            # sl, local, remote, st, tx:rx, tr:when, retrnsmt, uid, timeout, inode
            if len(fields) < 10 or fields[3] != _LISTEN or not fields[1].endswith(suffix):
                continue
            if fields[1][: -len(suffix)] in _LOOPBACK_ACCEPTING:
                found.append((int(fields[7]), int(fields[9])))
    return found


def proc_listeners(port: int, tables: Iterable[Path] = TABLES) -> list[Listener]:
    """`listening_sockets` of the tables (a missing tcp6 table: no IPv6 here)."""
    texts = []
    for table in tables:
        try:
            texts.append(table.read_bytes())
        except FileNotFoundError:
            continue
    if not texts:
        raise OSError(f"none of {', '.join(map(str, tables))} can be read")
    return listening_sockets(texts, port)


def _dump(sock: socket.socket, family: int, seq: int) -> Iterable[bytes]:
    """The inet_diag_msg payloads of a LISTEN-only dump of `family`'s TCP sockets."""
    request = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << _TCP_LISTEN)
    flags = _NLM_F_REQUEST | _NLM_F_DUMP
    header = _HEADER.pack(_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, flags, seq, 0)
    sock.send(header + request)
    while True:
        data = sock.recv(65536)
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
            if kind == _NLMSG_DONE:
                return
            if kind == _NLMSG_ERROR or length < _HEADER.size:
                raise OSError(f"sock_diag refused the dump (message type {kind})")
            yield data[offset + _HEADER.size : offset + length]
            offset += (length + 3) & ~3


def netlink_listeners(port: int) -> list[Listener]:
    """(uid, inode) of each LISTEN socket on `port` that takes a connection to 127.0.0.1,
    from the kernel's sock_diag netlink (IPv4 and IPv6). OSError where it is refused."""
    found = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as sock:
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            for payload in _dump(sock, family, seq):
                if len(payload) < _MESSAGE.size:
                    continue
                fields = _MESSAGE.unpack_from(payload)
                sport, source, uid, inode = fields[4], fields[6], fields[13], fields[14]
                address = source[:4] if family == socket.AF_INET else source
                if int.from_bytes(sport, "big") == port and address in _ACCEPTING[family]:
                    found.append((uid, inode))
    return found


def listeners(port: int) -> list[Listener]:
    """`netlink_listeners`, else (netlink refused) `proc_listeners`."""
    try:
        return netlink_listeners(port)
    except OSError:
        return proc_listeners(port)
