"""Approvals of policy exceptions in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import Engine

from reconciler.adapters.db import Store
from reconciler.domain.approvals import Approval
from tests.store.conftest import START, FakeClock

TREE = "a" * 40


def _approval(approver: str = "alice", tree: str = TREE) -> Approval:
    return Approval(
        project="main",
        tree=tree,
        head="b" * 40,
        approver=approver,
        provider="github",
        repo="acme/gpus",
        number=7,
        comment_id=2**40,
        violations=("policy: runs.max_gpus: run train asks 16 GPUs, the policy allows 8",),
    )


def test_an_approval_is_found_by_its_tree_and_survives_a_new_store(
    store: Store, db_engine: Engine, clock: FakeClock
) -> None:
    assert store.approvals_for("main", TREE) == []
    assert store.record_approval(_approval())
    assert not store.record_approval(_approval())  # the same approver, the same tree
    assert store.record_approval(_approval("bob"))
    again = Store(db_engine, clock=clock)  # another replica, or after a restart
    found = again.approvals_for("main", TREE)
    assert [a.approver for a in found] == ["alice", "bob"]
    assert found[0].approved_at == START and found[0].comment_id == 2**40
    assert found[0].violations == _approval().violations
    assert again.approvals_for("main", "c" * 40) == []
    assert again.approvals_for("other", TREE) == []
