"""The sources the server follows, as named units of work (a part of `Store`).

Admins add, change and delete `api` sources (`reconciler.web.routes_sources`); the
`--sources-config` file's and the `--repo` flags' sources are written again at each
start (`declare_sources`), and may only be suspended or resumed through the API. One
source per project: checked with both names in the message, and held by the table's
unique `project_name` whichever replica writes. The loops read `list_sources`
(`reconciler.engine.sourceloops`) and the webhooks (`reconciler.web.webhooks`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Project, Reconcile
from reconciler.adapters.db.models.sources import SourceRow
from reconciler.adapters.db.sessions import StoreBase
from reconciler.core.sources import project_conflict
from reconciler.domain.sources import Source, SourceOrigin
from reconciler.errors import ConflictError, NotFoundError, UsageError

_ORIGINS: dict[str, SourceOrigin] = {"api": "api", "file": "file", "flags": "flags"}
_WHERE_DECLARED = {
    "file": "it is declared in the --sources-config file: edit the file and restart",
    "flags": "it is the server's --repo/--project: change the flags and restart",
}


_FINISHED = ("succeeded", "failed", "aborted")


@dataclass(frozen=True, slots=True)
class LastReconcile:
    id: str
    status: str
    error: str | None


def source_of(row: SourceRow) -> Source:
    return Source(
        name=row.name,
        repo=row.repo,
        project=row.project_name,
        branch=row.branch,
        paths=tuple(row.paths or ()),
        fetch_interval=row.fetch_interval,
        suspended=bool(row.suspended),
        webhook_secret_ref=row.webhook_secret_ref,
        credentials_ref=row.credentials_ref,
        origin=_ORIGINS.get(row.origin, "api"),
    )


def _fill(row: SourceRow, source: Source) -> None:
    row.name, row.project_name, row.repo = source.name, source.project, source.repo
    row.branch, row.paths = source.branch, list(source.paths)
    row.fetch_interval, row.suspended = source.fetch_interval, source.suspended
    row.webhook_secret_ref, row.credentials_ref = source.webhook_secret_ref, source.credentials_ref
    row.origin = source.origin


def _all(session: Session) -> list[SourceRow]:
    return list(session.scalars(select(SourceRow).order_by(SourceRow.name).with_for_update()))


class SourcesStore(StoreBase):
    def list_sources(self, project: str | None = None) -> list[Source]:
        """Every source (of `project`), by name."""
        query = select(SourceRow).order_by(SourceRow.name)
        if project is not None:
            query = query.where(SourceRow.project_name == project)
        with self.reading() as session:
            return [source_of(row) for row in session.scalars(query)]

    def get_source(self, name: str) -> Source | None:
        with self.reading() as session:
            row = session.scalars(select(SourceRow).where(SourceRow.name == name)).first()
            return None if row is None else source_of(row)

    def add_source(self, source: Source) -> Source:
        """Store a new source; `ConflictError` when the name is taken or its project is
        fed by another source (both named)."""
        now = self.now()
        try:
            with self.writing() as session:
                rows = _all(session)
                if any(r.name == source.name for r in rows):
                    raise ConflictError(f"a source named {source.name!r} exists")
                why = project_conflict([source_of(r) for r in rows], source)
                if why is not None:
                    raise ConflictError(why)
                row = SourceRow(
                    name="",
                    project_name="",
                    repo="",
                    branch="",
                    paths=[],
                    origin="api",
                    created_at=now,
                    updated_at=now,
                )
                _fill(row, source)
                session.add(row)
        except IntegrityError:  # another replica added one just now
            raise ConflictError(
                f"source {source.name!r} or another source of project {source.project!r} "
                "was added meanwhile"
            ) from None
        return source

    def update_source(self, name: str, source: Source) -> Source:
        """Replace an `api` source's fields (the name stays); refused for declared ones."""
        try:
            with self.writing() as session:
                rows = _all(session)
                row = next((r for r in rows if r.name == name), None)
                if row is None:
                    raise NotFoundError(f"no source named {name!r}")
                if row.origin in _WHERE_DECLARED:
                    raise ConflictError(
                        f"source {name!r} cannot be changed here: {_WHERE_DECLARED[row.origin]}"
                    )
                changed = replace(source, name=name, origin="api")
                why = project_conflict([source_of(r) for r in rows], changed)
                if why is not None:
                    raise ConflictError(why)
                _fill(row, changed)
                row.updated_at = self.now()
        except IntegrityError:
            raise ConflictError(
                f"project {source.project!r} got another source meanwhile"
            ) from None
        return changed

    def delete_source(self, name: str) -> Source:
        with self.writing() as session:
            row = session.scalars(select(SourceRow).where(SourceRow.name == name)).first()
            if row is None:
                raise NotFoundError(f"no source named {name!r}")
            if row.origin in _WHERE_DECLARED:
                raise ConflictError(
                    f"source {name!r} cannot be deleted here: {_WHERE_DECLARED[row.origin]}"
                )
            gone = source_of(row)
            session.delete(row)
            return gone

    def set_source_suspended(self, name: str, suspended: bool) -> Source:
        """Suspend or resume any source (a declared one until the next start)."""
        with self.writing() as session:
            row = session.scalars(select(SourceRow).where(SourceRow.name == name)).first()
            if row is None:
                raise NotFoundError(f"no source named {name!r}")
            row.suspended, row.updated_at = suspended, self.now()
            return source_of(row)

    def last_reconciles(self, projects: Collection[str]) -> dict[str, LastReconcile]:
        """Each project's newest finished reconcile (`source list`'s state), one indexed
        read per project (`ix_reconciles_project_created`)."""
        found: dict[str, LastReconcile] = {}
        with self.reading() as session:
            for project in projects:
                row = session.execute(
                    select(Reconcile.id, Reconcile.status, Reconcile.error)
                    .join(Project, Project.id == Reconcile.project_id)
                    .where(Project.name == project, Reconcile.status.in_(_FINISHED))
                    .order_by(Reconcile.created_at.desc())
                    .limit(1)
                ).first()
                if row is not None:
                    found[project] = LastReconcile(row[0], row[1], row[2])
        return found

    def declare_sources(self, origins: Collection[str], sources: Sequence[Source]) -> None:
        """At start: the sources of `origins` become exactly `sources` (their rows
        replaced); `UsageError` naming both when one would feed an `api` source's project
        or take its name."""
        now = self.now()
        with self.writing() as session:
            kept = [r for r in _all(session) if r.origin not in origins]
            for source in sources:
                for row in kept:
                    if row.name == source.name:
                        raise UsageError(
                            f"source {source.name!r} ({source.origin}) has the name of a source "
                            "added through the API: rename one (dockyard source delete NAME)"
                        )
                why = project_conflict([source_of(r) for r in kept], source)
                if why is not None:
                    raise UsageError(f"{why}; the server does not start")
            session.execute(delete(SourceRow).where(SourceRow.origin.in_(list(origins))))
            session.flush()
            for source in sources:
                row = SourceRow(
                    name="",
                    project_name="",
                    repo="",
                    branch="",
                    paths=[],
                    origin="api",
                    created_at=now,
                    updated_at=now,
                )
                _fill(row, source)
                session.add(row)
