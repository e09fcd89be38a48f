"""An in-memory `Leasing` with the store's semantics, for testing the worker step alone.

Rows are due when their `due_at` has passed and they hold no live lease; a lease expires
at `lease_seconds` after its claim or last renewal. Time is the test's `now` attribute.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from reconciler.engine.worker import Lease
from reconciler.ports import WorkKind


@dataclass
class _Row:
    due_at: float = 0.0
    token: str | None = None
    expires_at: float = 0.0
    owner: str | None = None
    releases: list[float] = field(default_factory=list)


class MemoryLeasing:
    def __init__(self) -> None:
        self.now = 0.0
        self.rows: dict[tuple[WorkKind, str], _Row] = {}

    def add(self, kind: WorkKind, row_id: str, *, due_at: float = 0.0) -> None:
        self.rows[(kind, row_id)] = _Row(due_at=due_at)

    def _free(self, row: _Row) -> bool:
        return row.token is None or row.expires_at <= self.now

    async def claim_due(
        self, kind: WorkKind, *, owner: str, limit: int, lease_seconds: float
    ) -> Sequence[Lease]:
        leases: list[Lease] = []
        for (k, row_id), row in sorted(self.rows.items()):
            if len(leases) >= limit:
                break
            if k == kind and row.due_at <= self.now and self._free(row):
                row.token, row.owner = uuid.uuid4().hex, owner
                row.expires_at = self.now + lease_seconds
                leases.append(Lease(kind, row_id, row.token))
        return leases

    async def renew(self, leases: Sequence[Lease], *, lease_seconds: float) -> set[str]:
        kept: set[str] = set()
        for lease in leases:
            row = self.rows[(lease.kind, lease.row_id)]
            if row.token == lease.token and row.expires_at > self.now:
                row.expires_at = self.now + lease_seconds
                kept.add(lease.token)
        return kept

    async def release(self, lease: Lease, *, due_in: float) -> None:
        row = self.rows[(lease.kind, lease.row_id)]
        if row.token != lease.token:
            return
        row.token, row.owner = None, None
        row.due_at = self.now + due_in
        row.releases.append(due_in)

    async def next_due(self, kind: WorkKind) -> float | None:
        times = [
            max(row.due_at, row.expires_at if row.token else 0.0)
            for (k, _), row in self.rows.items()
            if k == kind
        ]
        return max(0.0, min(times) - self.now) if times else None
