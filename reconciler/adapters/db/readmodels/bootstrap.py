"""First start of a server: the admin user, its token file and the default project.

`ensure_admin` runs at every start and does something only on an empty database: it creates
the global admin `admin`, the project the webhooks reconcile (`main` by default) with the
admin as its admin, and writes the admin's token to `<data-dir>/admin-token` (mode 0600,
created exclusively so it is never world-readable, not even for a moment). It returns the
new token so the caller can put it in the CLI config; on later starts it returns None.
One unit of work: the server's composition root runs it in `Database.write_now`, and the
token file is written inside the transaction (a failed write creates no admin).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Member, Project, User
from reconciler.adapters.db.readmodels.accounts import issue_token

ADMIN_NAME = "admin"


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600 (replacing the file if it exists)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    tmp.replace(path)


def ensure_project(session: Session, name: str, admin_id: str | None, now: datetime) -> str:
    project_id = session.scalar(select(Project.id).where(Project.name == name))
    if project_id is None:
        project = Project(name=name, created_at=now)
        session.add(project)
        session.flush()
        project_id = project.id
        if admin_id is not None:
            session.add(Member(project_id=project_id, user_id=admin_id, role="admin"))
    return project_id


def ensure_admin(session: Session, project: str, token_path: Path, now: datetime) -> str | None:
    """On an empty database: create admin + project, write the token file; return the token."""
    if session.scalar(select(func.count()).select_from(User)):
        admin_id = session.scalar(select(User.id).where(User.global_role == "admin").limit(1))
        ensure_project(session, project, admin_id, now)
        return None
    admin = User(name=ADMIN_NAME, global_role="admin", created_at=now)
    session.add(admin)
    session.flush()
    token = issue_token(session, admin.id, now)
    ensure_project(session, project, admin.id, now)
    write_private(token_path, token + "\n")
    return token
