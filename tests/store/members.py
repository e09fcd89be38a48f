"""Members and tokens for tests, written through the units the API uses
(`reconciler.adapters.db.readmodels.accounts`), so a test's setup is what the server does.

Called by the store, proxy, host-key and preview tests that need a member or a token.
"""

from __future__ import annotations

from reconciler.adapters.db import Store
from reconciler.adapters.db.readmodels.accounts import (
    find_membership,
    issue_token,
    remove_members,
    set_members,
)


def set_member(store: Store, project_id: str, username: str, role: str) -> None:
    """Give `username` `role` in the project, as a project admin would (`set_members`)."""
    with store.writing() as session:
        set_members(session, project_id, {username: role}, replace=False, may_change_admins=True)


def remove_member(store: Store, project_id: str, username: str) -> None:
    with store.writing() as session:
        remove_members(session, project_id, [username], may_change_admins=True)


def member_role(store: Store, project_name: str, user_id: str) -> str | None:
    with store.reading() as session:
        return find_membership(session, project_name, user_id)[1]


def new_token(store: Store, user_id: str) -> str:
    """A new API token of the user (`issue_token`, as user creation and refresh do)."""
    with store.writing() as session:
        return issue_token(session, user_id, store.now())
