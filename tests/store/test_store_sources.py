"""The sources table through the store's units of work, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from reconciler.adapters.db import Store
from reconciler.domain.sources import Source
from reconciler.errors import ConflictError, NotFoundError, UsageError


def a(name: str, project: str, **extra: object) -> Source:
    return Source(name=name, repo=f"/repos/{name}", project=project, **extra)  # type: ignore[arg-type]


def test_add_list_get_update_delete(store: Store) -> None:
    store.add_source(a("team-a", "alpha", paths=("teams/a",), webhook_secret_ref="env:A"))
    store.add_source(a("team-b", "beta", fetch_interval=30.0))
    assert [s.name for s in store.list_sources()] == ["team-a", "team-b"]
    assert [s.name for s in store.list_sources("beta")] == ["team-b"]
    got = store.get_source("team-a")
    assert got is not None and got.paths == ("teams/a",) and got.webhook_secret_ref == "env:A"
    changed = store.update_source("team-b", a("ignored", "gamma", branch="prod"))
    assert (changed.name, changed.project, changed.branch) == ("team-b", "gamma", "prod")
    assert store.set_source_suspended("team-b", True).suspended is True
    assert store.delete_source("team-a").name == "team-a"
    assert store.get_source("team-a") is None
    with pytest.raises(NotFoundError):
        store.delete_source("team-a")


def test_one_source_per_project_names_both(store: Store) -> None:
    store.add_source(a("first", "alpha"))
    with pytest.raises(ConflictError) as caught:
        store.add_source(a("second", "alpha"))
    assert "'first'" in str(caught.value) and "'second'" in str(caught.value)
    store.add_source(a("third", "beta"))
    with pytest.raises(ConflictError, match="'first'"):
        store.update_source("third", a("third", "alpha"))
    with pytest.raises(ConflictError, match="exists"):
        store.add_source(a("first", "gamma"))


def test_declared_sources_are_replaced_and_kept_from_the_api(store: Store) -> None:
    store.add_source(a("api-one", "alpha"))
    store.declare_sources(("flags", "file"), [a("old", "beta", origin="file")])
    store.declare_sources(("flags", "file"), [a("new", "gamma", origin="file")])
    assert [(s.name, s.origin) for s in store.list_sources()] == [
        ("api-one", "api"),
        ("new", "file"),
    ]
    with pytest.raises(ConflictError, match="sources-config"):
        store.delete_source("new")
    with pytest.raises(ConflictError, match="sources-config"):
        store.update_source("new", a("new", "delta"))
    with pytest.raises(UsageError) as caught:
        store.declare_sources(("flags", "file"), [a("clash", "alpha", origin="file")])
    assert "'api-one'" in str(caught.value) and "'clash'" in str(caught.value)
    assert [s.name for s in store.list_sources()] == ["api-one", "new"]
