"""The lease of a periodic maintenance task (one `maintenance` row per task, by name).

The retention sweep (`engine.retention`) and the preview-runs sweep (`engine.previewruns`)
each take their task's row with a lease, so with several replicas one at a time runs it:
`claim` (the token, or None when another replica holds it or it is not due), `renew`
between batches, `release` with the next due time and what the pass recorded. Each is
one transaction (`Leases`).
"""

from __future__ import annotations

from typing import Any

from reconciler.adapters.db.leasing import Leases
from reconciler.adapters.db.models import Maintenance


class MaintenanceLeases:
    """Named lease operations on the `maintenance` row of one task at a time."""

    def __init__(self, leases: Leases) -> None:
        self._leases = leases

    def claim(self, task: str, *, owner: str, lease_seconds: float) -> str | None:
        """The lease token of task `task` if it is due and free, else None."""
        claimed = self._leases.claim_due(
            Maintenance,
            owner=owner,
            limit=1,
            lease_seconds=lease_seconds,
            where=Maintenance.id == task,  # the table holds other tasks' rows too
        )
        return claimed[0][1] if claimed else None

    def renew(self, task: str, token: str, *, lease_seconds: float) -> bool:
        """Extend the lease; False when it was lost."""
        return bool(self._leases.renew(Maintenance, [(task, token)], lease_seconds=lease_seconds))

    def release(self, task: str, token: str, *, due_in: float, last_result: Any = None) -> bool:
        """Drop the lease, due again in `due_in` seconds; `last_result` recorded when given."""
        values = {} if last_result is None else {"last_result": last_result}
        return self._leases.release(Maintenance, task, token, due_in=due_in, values=values)
