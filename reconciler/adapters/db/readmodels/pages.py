"""dstack's global lists with keyset paging: `/api/runs/list` (and its `prev_*` cursor).

dstack pages every list by the last row seen: `prev_submitted_at` + `prev_run_id` for runs,
newest first unless `ascending`, at most `limit` rows. A caller sees the projects it is a
member of (global admins: all), optionally one (`project_name`), and only active runs with
`only_active`. `username` filters by who applied the run (`gitops` for runs of the config
repo). Called by `routes_runs` through `Database.read`.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, Select, and_, or_, select
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Member, Project, Resource, Run
from reconciler.adapters.db.readmodels.runs import FINISHED_RUN, to_run
from reconciler.api import models as wire
from reconciler.api import requests as req
from reconciler.domain.principals import Principal


def list_runs_paged(
    session: Session, caller: Principal, body: req.GlobalRunsListRequest, now: datetime
) -> list[wire.Run]:
    query = _visible(caller, body)
    if body.prev_submitted_at is not None:
        query = query.where(_after(body.prev_submitted_at, body.prev_run_id or "", body.ascending))
    if body.ascending:
        query = query.order_by(Run.submitted_at, Run.id)
    else:
        query = query.order_by(Run.submitted_at.desc(), Run.id.desc())
    rows = session.execute(query.limit(body.limit)).all()
    return [to_run(session, project, run, now) for run, project in rows]


def _visible(caller: Principal, body: req.GlobalRunsListRequest) -> Select[Run, str]:
    """The runs the caller may list, with the body's filters (no cursor, no order)."""
    query: Select[Run, str] = (
        select(Run, Project.name)
        .join(Project, Project.id == Run.project_id)
        .where(Run.deleted.is_(False))
    )
    if not caller.is_admin:
        query = query.join(
            Member, and_(Member.project_id == Project.id, Member.user_id == caller.user_id)
        )
    if body.project_name is not None:
        query = query.where(Project.name == body.project_name)
    if body.only_active:
        query = query.where(Run.status.not_in(FINISHED_RUN))
    if body.username is not None:
        query = query.outerjoin(Resource, Resource.id == Run.resource_id)
        if body.username == "gitops":
            query = query.where(or_(Resource.origin.is_(None), ~Resource.origin.like("cli:%")))
        else:
            query = query.where(Resource.origin == f"cli:{body.username}")
    return query


def _after(at: datetime, last: str, ascending: bool) -> ColumnElement[bool]:
    """Rows past the cursor (submitted_at, id) in the page order: ties broken by id."""
    if ascending:
        return or_(Run.submitted_at > at, and_(Run.submitted_at == at, Run.id > last))
    return or_(Run.submitted_at < at, and_(Run.submitted_at == at, Run.id < last))
