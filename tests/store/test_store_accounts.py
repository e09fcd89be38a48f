"""Projects, users, tokens, members and secrets through the `Store`, on both databases."""

from __future__ import annotations

import hashlib
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from reconciler.adapters.db import Store
from reconciler.adapters.db.accounts import hash_token
from reconciler.adapters.db.models import Project, Secret, Token
from reconciler.adapters.db.readmodels.accounts import find_principal, refresh_token
from reconciler.domain.memberships import MembershipRefusedError
from reconciler.errors import UsageError
from tests.store.conftest import FakeClock
from tests.store.members import member_role, new_token, remove_member, set_member


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


def test_token_is_stored_as_hash_and_resolves_to_its_user(store: Store) -> None:
    """The API's units: a token is issued (`issue_token`) and stored only as its sha256
    digest, the caller is found by that digest (`find_principal`), and a refresh
    (`refresh_token`) revokes the old token."""
    alice = store.create_user("alice", global_role="admin")
    token = new_token(store, alice.id)
    with store.reading() as session:
        stored = session.scalars(select(Token)).one()
        found = find_principal(session, hash_token(token))
        assert find_principal(session, hash_token(token + "x")) is None
    assert stored.token_hash == hashlib.sha256(token.encode()).hexdigest() != token
    assert found is not None and (found.username, found.global_role) == ("alice", "admin")
    with store.writing() as session:
        refresh_token(session, "alice", store.now())
    with store.reading() as session:
        assert find_principal(session, hash_token(token)) is None


def test_users_are_unique_and_roles_checked(store: Store) -> None:
    store.create_user("bob")
    with pytest.raises(UsageError, match="already exists"):
        store.create_user("bob")
    with pytest.raises(UsageError, match="unknown global role"):
        store.create_user("carol", global_role="root")
    assert [u.name for u in store.list_users()] == ["bob"]


def test_members_set_update_remove_and_never_without_an_admin(store: Store) -> None:
    """The API's units (`set_members`, `remove_members`): dstack's rule holds whoever calls,
    a project admin too: the last admin can be neither demoted nor removed (refused,
    nothing written). The routes' matrix: tests/security/test_member_roles.py."""
    project = store.get_or_create_project("main")
    bob, amy = store.create_user("bob"), store.create_user("amy")
    set_member(store, project.id, "bob", "user")
    set_member(store, project.id, "amy", "manager")
    set_member(store, project.id, "bob", "admin")
    assert (member_role(store, "main", bob.id), member_role(store, "main", amy.id)) == (
        "admin",
        "manager",
    )
    with pytest.raises(MembershipRefusedError, match="without an admin"):
        set_member(store, project.id, "bob", "user")
    with pytest.raises(MembershipRefusedError, match="without an admin"):
        remove_member(store, project.id, "bob")
    assert member_role(store, "main", bob.id) == "admin"
    set_member(store, project.id, "amy", "admin")  # bob is not the last admin any more
    remove_member(store, project.id, "bob")
    assert member_role(store, "main", bob.id) is None


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
