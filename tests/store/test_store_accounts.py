"""Projects, users, tokens, members and secrets through the `Store`, on both databases."""

from __future__ import annotations

import hashlib
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Project, Secret, Token
from reconciler.domain.memberships import MembershipRefusedError
from reconciler.errors import UsageError
from tests.store.conftest import FakeClock


def test_get_or_create_project_is_idempotent_under_threads(store: Store) -> None:
    ids: list[str] = []
    barrier = threading.Barrier(4)

    def create() -> None:
        barrier.wait()
        ids.append(store.get_or_create_project("main").id)

    threads = [threading.Thread(target=create) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(ids) == 4 and len(set(ids)) == 1
    with store.reading() as session:
        assert session.scalars(select(Project.name)).all() == ["main"]
    assert store.get_project("main") is not None and store.get_project("other") is None


def test_token_is_stored_as_hash_and_resolves_to_its_user(store: Store, clock: FakeClock) -> None:
    alice = store.create_user("alice", global_role="admin")
    token = store.create_token(alice.id)
    with store.reading() as session:
        stored = session.scalars(select(Token)).one()
    assert stored.token_hash == hashlib.sha256(token.encode()).hexdigest() != token
    assert stored.last_used_at is None
    clock.advance(60)
    user = store.resolve_token(token)
    assert user is not None and (user.name, user.global_role) == ("alice", "admin")
    assert store.get(Token, stored.id).last_used_at == store.now()  # type: ignore[union-attr]
    assert store.resolve_token(token + "x") is None
    assert store.revoke_tokens(alice.id) == 1
    assert store.resolve_token(token) is None


def test_users_are_unique_and_roles_checked(store: Store) -> None:
    store.create_user("bob")
    with pytest.raises(UsageError, match="already exists"):
        store.create_user("bob")
    with pytest.raises(UsageError, match="unknown global role"):
        store.create_user("carol", global_role="root")
    assert [u.name for u in store.list_users()] == ["bob"]


def test_members_set_update_list_remove(store: Store) -> None:
    project = store.get_or_create_project("main")
    bob, amy = store.create_user("bob"), store.create_user("amy")
    store.set_member(project.id, bob.id, "user")
    store.set_member(project.id, amy.id, "manager")
    store.set_member(project.id, bob.id, "admin")
    assert [(u.name, role) for u, role in store.list_members(project.id)] == [
        ("amy", "manager"),
        ("bob", "admin"),
    ]
    assert store.get_member_role(project.id, bob.id) == "admin"
    store.set_member(project.id, amy.id, "admin")  # bob is not the last admin any more
    assert store.remove_member(project.id, bob.id)
    assert not store.remove_member(project.id, bob.id)
    assert store.get_member_role(project.id, bob.id) is None
    with pytest.raises(UsageError, match="unknown project role"):
        store.set_member(project.id, amy.id, "owner")


def test_the_store_never_leaves_a_project_without_an_admin(store: Store) -> None:
    """dstack's rule holds in the store itself, not only in the routes: the last admin
    can be neither demoted nor removed (refused, nothing written), whoever calls."""
    project = store.get_or_create_project("solo")
    ada, ben = store.create_user("ada"), store.create_user("ben")
    store.set_member(project.id, ada.id, "admin")
    store.set_member(project.id, ben.id, "manager")
    with pytest.raises(MembershipRefusedError, match="without an admin"):
        store.set_member(project.id, ada.id, "user")
    with pytest.raises(MembershipRefusedError, match="without an admin"):
        store.remove_member(project.id, ada.id)
    assert store.get_member_role(project.id, ada.id) == "admin"
    assert store.remove_member(project.id, ben.id)  # others come and go


def test_secrets_store_ciphertext_per_project(store: Store, clock: FakeClock) -> None:
    main, other = store.get_or_create_project("main"), store.get_or_create_project("other")
    store.put_secret(main.id, "HF_TOKEN", "cipher-1")
    store.put_secret(other.id, "HF_TOKEN", "cipher-other")
    clock.advance(5)
    store.put_secret(main.id, "HF_TOKEN", "cipher-2")
    store.put_secret(main.id, "AWS_KEY", "cipher-3")
    assert store.get_secret_ciphertext(main.id, "HF_TOKEN") == "cipher-2"
    assert store.get_secret_ciphertext(other.id, "HF_TOKEN") == "cipher-other"
    assert store.list_secret_names(main.id) == ["AWS_KEY", "HF_TOKEN"]
    with store.reading() as session:
        row = session.scalars(
            select(Secret).where(Secret.project_id == main.id, Secret.name == "HF_TOKEN")
        ).one()
    assert row.updated_at == store.now() == row.created_at + timedelta(seconds=5)
    assert store.delete_secret(main.id, "HF_TOKEN")
    assert store.get_secret_ciphertext(main.id, "HF_TOKEN") is None
    assert not store.delete_secret(main.id, "HF_TOKEN")
