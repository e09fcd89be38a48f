"""The API's read models of fleets, instances, volumes and gateways: they live in the store.

The queries are `reconciler.adapters.db.readmodels.capacity` (each runs in the one transaction
`Database.read`/`.write` opens); the routes keep importing them by their names here.
"""

from __future__ import annotations

from reconciler.adapters.db.readmodels.capacity import (
    Kind,
    check_exists,
    get_fleet,
    get_volume,
    instance_wire,
    list_fleets,
    list_volumes,
    wake_ssh_fleets,
)

__all__ = [
    "Kind",
    "check_exists",
    "get_fleet",
    "get_volume",
    "instance_wire",
    "list_fleets",
    "list_volumes",
    "wake_ssh_fleets",
]
