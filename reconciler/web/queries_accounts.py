"""The API's read models of accounts, members and tokens: they live in the store.

The queries are `reconciler.adapters.db.readmodels.accounts` (each runs in the one transaction
`Database.read`/`.write` opens); the routes keep importing them by their names here.
"""

from __future__ import annotations

from reconciler.adapters.db.readmodels.accounts import (
    create_project,
    create_user,
    delete_project,
    delete_user,
    get_project,
    get_user,
    get_user_by_name,
    issue_token,
    list_projects,
    list_users,
    refresh_token,
    remove_members,
    set_members,
    to_user,
)

__all__ = [
    "create_project",
    "create_user",
    "delete_project",
    "delete_user",
    "get_project",
    "get_user",
    "get_user_by_name",
    "issue_token",
    "list_projects",
    "list_users",
    "refresh_token",
    "remove_members",
    "set_members",
    "to_user",
]
