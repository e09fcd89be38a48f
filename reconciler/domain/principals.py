"""Who is calling: the `Principal` an API token resolves to.

Built by the web's authentication (`reconciler.web.auth`) and read by the store's read
models (`reconciler.adapters.db.readmodels`) to scope what a caller sees.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    user_id: str
    username: str
    global_role: str

    @property
    def is_admin(self) -> bool:
        return self.global_role == "admin"


@dataclass(frozen=True, slots=True)
class FleetKeyHolders:
    """Who may reach the jobs of a fleet's hosts: the fleet's project and the ids of its
    members and of the global admins (`Store.fleet_key_holders`; `engine.hostkeys`)."""

    project: str
    user_ids: tuple[str, ...]
