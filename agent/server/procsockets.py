"""Which process holds a socket, read from `/proc/<pid>/fd`: the one scan that the
agent's port-holder check (`agent.server.portholders`) and its API's peer gate
(`agent.server.peers`) both make. Linux only; a process that is gone or not ours to read
is treated as holding nothing."""

from __future__ import annotations

import os


def socket_link(inode: int) -> str:
    """What `readlink` of a descriptor on socket `inode` answers."""
    return f"socket:[{inode}]"


def holds(process: str, link: str) -> bool:
    """Whether the process at `process` (a `/proc/<pid>` path) has a descriptor whose
    link is `link`."""
    try:
        fds = os.scandir(f"{process}/fd")
    except OSError:  # gone, or not ours to read
        return False
    with fds:
        for fd in fds:
            try:
                if os.readlink(fd.path) == link:
                    return True
            except OSError:
                continue
    return False
