"""A git tree's object id from a listing of its entries (pure, no I/O).

Approvals of a policy exception are keyed by the git tree of the approved head commit
(`reconciler.pr.approving`). GitHub's API says a commit's tree SHA; GitLab's does not, but
`GET /projects/:id/repository/tree?ref=SHA` lists the root tree's entries (mode, type,
name, object id), and a tree's id is the hash of exactly that: `tree <size>\\0` followed by
`<mode> <name>\\0<binary id>` per entry in git's order (names compared as bytes, a
subtree's as if it ended with `/`). `GitLab.commit_tree` lists the entries and asks
`tree_id` here; tests/pr/test_gittrees.py checks it against `git rev-parse SHA^{tree}` of
real repositories. SHA-1 ids (40 hex digits) and SHA-256 ids (64) are both handled.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_MODES = {"100644", "100755", "120000", "160000", "040000", "40000"}
_HEX = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


class TreeListingError(ValueError):
    """A listed entry is not something a git tree can hold."""


@dataclass(frozen=True, slots=True)
class TreeEntry:
    mode: str
    name: str
    id: str

    @property
    def is_tree(self) -> bool:
        return self.mode.lstrip("0") == "40000"


def entry_of(item: Mapping[str, Any]) -> TreeEntry:
    """A tree entry from a host's listing (`mode`, `name`, `id`), checked."""
    mode, name, ident = item.get("mode"), item.get("name"), item.get("id")
    if not isinstance(mode, str) or mode not in _MODES:
        raise TreeListingError(f"entry {name!r} has mode {mode!r}, not a git tree entry mode")
    if not isinstance(name, str) or not name or "/" in name or "\0" in name:
        raise TreeListingError(f"entry name {name!r} is not a file name")
    if not isinstance(ident, str) or not _HEX.match(ident):
        raise TreeListingError(f"entry {name!r} has id {ident!r}, not an object id")
    return TreeEntry(mode, name, ident)


def tree_id(entries: Iterable[TreeEntry]) -> str:
    """The object id of the tree holding exactly `entries` (git's hash of the tree)."""
    listed = list(entries)
    sizes = {len(e.id) for e in listed}
    if len(sizes) > 1:
        raise TreeListingError("the entries mix SHA-1 and SHA-256 object ids")
    names = [e.name for e in listed]
    if len(set(names)) != len(names):
        raise TreeListingError("two entries have the same name")
    body = b"".join(
        f"{_git_mode(e)} {e.name}".encode() + b"\0" + bytes.fromhex(e.id)
        for e in sorted(listed, key=_order)
    )
    digest = hashlib.sha256 if sizes == {64} else hashlib.sha1
    return digest(b"tree %d\0" % len(body) + body).hexdigest()


def _git_mode(entry: TreeEntry) -> str:
    return "40000" if entry.is_tree else entry.mode


def _order(entry: TreeEntry) -> bytes:
    return entry.name.encode() + (b"/" if entry.is_tree else b"")
