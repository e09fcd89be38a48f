"""Placement candidates for the planner's warnings: `Store.placement_candidates` by name.

Kept for `previewing.py` while it moves to the store's operation (the jobs worker places
through `Store.record_job_step`, see `reconciler.adapters.db.jobsteps`).
"""

from __future__ import annotations

from reconciler.adapters.db.store import Store
from reconciler.core.scheduling import Candidate


def load_candidates(store: Store, project_id: str) -> list[Candidate]:
    """Every idle or busy instance of the project's fleets, with the GPUs in use."""
    return store.placement_candidates(project_id)
