"""The events the notified kinds come from are recorded where they happen: a reconcile
whose policy blocked a run records `reconcile blocked …`, which the follower queues for a
receiver of `reconcile.blocked` (real plan function, reconcile and apply on a real repo)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from reconciler.adapters.db.notifications import NotificationsStore
from reconciler.core.notifying import check_receiver
from reconciler.domain.notifications import Receiver
from tests.engine.fixtures import make_rig, task_yaml

POLICY = "policy:\n  runs:\n    max_gpus: 1\n"
BIG = task_yaml("big").replace("resources:\n", "resources:\n  gpu: 4\n")


async def test_a_policy_block_is_recorded_and_notified(
    tmp_path: Path, engine: Engine, notify_db_url: str
) -> None:
    rig = make_rig(tmp_path, db_url=notify_db_url)
    notes = NotificationsStore(rig.store.engine)
    receiver = Receiver(
        name="policy", kind="slack", url="http://127.0.0.1:9/s", events=("reconcile.blocked",)
    )
    notes.add_receiver(check_receiver(receiver), "admin")
    rig.repo.commit({".dockyard.yml": POLICY, "big.dstack.yml": BIG})
    rig.request()
    assert await rig.worker.process_once() == 1

    blocked = [e for e in rig.store.list_events(target_type="reconcile") if "blocked" in e.message]
    assert len(blocked) == 1
    assert "1 blocked: " in blocked[0].message and "max_gpus" in blocked[0].message
    notes.follow_events()
    [queued] = notes.list_deliveries(viewer=None)
    assert (queued.kind, queued.project) == ("reconcile.blocked", "main")
    assert "run big asks 4 GPUs" in queued.message
