"""Who may change a project's members, and to what (dstack's rule): the pure decision.

The member routes (`reconciler.web.routes_core`: `set_members`, `add_members`,
`remove_members`) compute the member list a call would leave and ask `membership_refusal`
inside the same transaction that writes it, so nothing changes when it refuses:

- a project **manager** may add, remove and re-role users and managers, but may not grant
  the admin role, nor change or remove an admin (dstack: "changing project admins");
- a project **admin** (or a global admin) may do anything else;
- **no call** leaves a project that has an admin without one (removing or demoting the
  last admin is refused, whoever asks; `users/delete` asks it for each project of the
  user, in `readmodels.accounts.delete_user`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.errors import DockyardError


@dataclass(frozen=True, slots=True)
class MembershipRefusal:
    """Why a member change is refused; `forbidden`: the caller's role may not do it (403),
    else the change itself is wrong for anyone (400)."""

    message: str
    forbidden: bool


class MembershipRefusedError(DockyardError):
    """Raised by the store's member writes (inside their transaction) with the refusal;
    the routes answer 403 or 400 with its message."""

    def __init__(self, refusal: MembershipRefusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def membership_refusal(
    before: Mapping[str, str], after: Mapping[str, str], *, caller_may_change_admins: bool
) -> MembershipRefusal | None:
    """`before`/`after`: `username: role` of the project's members; None when allowed."""
    admins_before = {name for name, role in before.items() if role == "admin"}
    admins_after = {name for name, role in after.items() if role == "admin"}
    if not caller_may_change_admins:
        granted = sorted(admins_after - admins_before)
        if granted:
            return MembershipRefusal(
                f"a project manager may not make {', '.join(granted)} admin: "
                "only a project admin may grant the admin role",
                forbidden=True,
            )
        touched = sorted(admins_before - admins_after)
        if touched:
            return MembershipRefusal(
                f"a project manager may not change or remove admin {', '.join(touched)}: "
                "ask a project admin",
                forbidden=True,
            )
    if admins_before and not admins_after:
        now = ", ".join(sorted(admins_before))
        return MembershipRefusal(
            f"this would leave the project without an admin (now: {now}): "
            "make someone else admin first",
            forbidden=False,
        )
    return None
