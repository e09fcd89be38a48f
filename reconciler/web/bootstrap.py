"""First start of a server: the admin user, its token file and the default project.

The unit of work is `reconciler.adapters.db.readmodels.bootstrap.ensure_admin`; the server
imports it by this name.
"""

from __future__ import annotations

from reconciler.adapters.db.readmodels.bootstrap import (
    ADMIN_NAME,
    ensure_admin,
    ensure_project,
    write_private,
)

__all__ = ["ADMIN_NAME", "ensure_admin", "ensure_project", "write_private"]
