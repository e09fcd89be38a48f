"""The proxy's token check on a real SQLite store: members pass, answers are remembered
for a few seconds (the clock is injected), revocation takes effect once they expire."""

from __future__ import annotations

from pathlib import Path

from reconciler.adapters.db.readmodels.accounts import refresh_token
from reconciler.adapters.db.readmodels.database import Database
from reconciler.adapters.db.store import Store
from reconciler.web.auth import token_authorizer
from tests.store.members import new_token, set_member


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_members_pass_and_revocation_lands_after_the_ttl(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", migrate=True)
    project = store.get_or_create_project("main")
    other = store.get_or_create_project("other")
    user = store.create_user("ana")
    set_member(store, project.id, "ana", "user")
    token = new_token(store, user.id)
    clock = Clock()
    authorize = token_authorizer(Database(store.engine), ttl=5.0, clock=clock)

    assert await authorize("main", token)
    assert not await authorize("other", token), "not a member of that project"
    assert not await authorize("main", "not-a-token")
    assert not await authorize("main", None)
    assert other.name == "other"

    with store.writing() as session:  # the API's revocation: a new token, the old ones gone
        refresh_token(session, "ana", store.now())
    clock.now += 4.0
    assert await authorize("main", token), "remembered for the ttl: no query per request"
    clock.now += 1.5
    assert not await authorize("main", token), "revoked tokens stop passing after the ttl"
    store.close()
