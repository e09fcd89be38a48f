"""`Client`: the Python API of a Dockyard server (httpx, typed); the CLI is built on it.

    from reconciler.api import Client

    with Client.from_config() as dockyard:          # ~/.dockyard/config.yml, default project
        plan = dockyard.apply(open("train.dstack.yml").read(), path="train.dstack.yml")
        run = dockyard.get_run("train")
        print(run.status, run.service.url if run.service else "")

Every call is one POST with a JSON body (dstack's style). Errors become `reconciler.errors`
classes with the server's one-line message (`ApiError`, with `.status_code`), an invalid
configuration becomes `schemas.ConfigError` with the server's file:line problems, and a
server that cannot be reached becomes `ServerUnreachableError`.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from reconciler.api import models as wire
from reconciler.api.errors import NotFoundError, raise_for_answer, unreachable

if TYPE_CHECKING:  # the config models load only when a caller passes one (fast CLI start)
    from schemas import AnyConfig

M = TypeVar("M", bound=BaseModel)


class Client:
    """One server, one project, one token."""

    def __init__(
        self,
        url: str,
        token: str,
        project: str = "main",
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.project = project
        self.token = token
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "X-API-VERSION": "1"},
            timeout=timeout,
            transport=transport,
        )

    @classmethod
    def from_config(
        cls, project: str | None = None, environ: Mapping[str, str] | None = None
    ) -> Client:
        """A client for `project` (or the default one) of the CLI config file."""
        from reconciler.api.config import resolve_project

        found = resolve_project(project, environ)
        return cls(found.url, found.token, found.name)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    def post(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """POST `body` to `path` (absolute, or relative to `/api/project/<project>/`)."""
        if not path.startswith("/"):
            path = f"/api/project/{self.project}/{path}"
        try:
            answer = self._http.post(path, json=dict(body or {}))
        except httpx.HTTPError as exc:
            raise unreachable(self.url, exc) from None
        raise_for_answer(answer)
        return answer.json()

    def _one(self, model: type[M], path: str, body: Mapping[str, Any] | None = None) -> M:
        return model.model_validate(self.post(path, body))

    def _many(self, model: type[M], path: str, body: Mapping[str, Any] | None = None) -> list[M]:
        data = self.post(path, body)
        if isinstance(data, list):  # the model's own validator: no new schema to build
            return [model.model_validate(item) for item in data]
        return TypeAdapter(list[model]).validate_python(data)  # type: ignore[valid-type]

    # -- server, users, projects ------------------------------------------------------------

    def me(self) -> wire.User:
        return self._one(wire.User, "/api/users/get_my_user")

    def list_users(self) -> list[wire.User]:
        return self._many(wire.User, "/api/users/list")

    def create_user(self, username: str, global_role: str = "user") -> wire.UserWithToken:
        body = {"username": username, "global_role": global_role}
        return self._one(wire.UserWithToken, "/api/users/create", body)

    def refresh_token(self, username: str) -> wire.UserWithToken:
        return self._one(wire.UserWithToken, "/api/users/refresh_token", {"username": username})

    def delete_user(self, username: str) -> None:
        self.post("/api/users/delete", {"username": username})

    def list_projects(self) -> list[wire.Project]:
        return self._many(wire.Project, "/api/projects/list")

    def create_project(self, name: str) -> wire.Project:
        return self._one(wire.Project, "/api/projects/create", {"project_name": name})

    def get_project(self, name: str | None = None) -> wire.Project:
        return self._one(wire.Project, f"/api/projects/{name or self.project}/get")

    def delete_project(self, name: str) -> None:
        self.post(f"/api/projects/{name}/delete")

    def remove_members(self, usernames: list[str], project: str | None = None) -> wire.Project:
        path = f"/api/projects/{project or self.project}/remove_members"
        return self._one(wire.Project, path, {"usernames": usernames})

    # -- configurations, runs ---------------------------------------------------------------

    @staticmethod
    def _config_body(config: str | AnyConfig, path: str) -> dict[str, Any]:
        if isinstance(config, str):
            return {"text": config, "path": path}
        data = config.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return {"configuration": data, "path": path}

    def get_plan(
        self,
        config: str | AnyConfig,
        path: str = ".dstack.yml",
        *,
        file_archives: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        """The plan of applying one configuration (YAML text or a `schemas` model), with
        the archives (`upload_archive`) its job brings: `[{"id", "path"}]`."""
        body = {**self._config_body(config, path), "file_archives": file_archives or []}
        plan: dict[str, Any] = self.post("runs/get_plan", body)
        return plan

    def apply(
        self,
        config: str | AnyConfig,
        path: str = ".dstack.yml",
        *,
        force: bool = False,
        file_archives: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        """Apply one configuration as an unmanaged resource; returns the plan applied."""
        body = {
            **self._config_body(config, path),
            "force": force,
            "file_archives": file_archives or [],
        }
        plan: dict[str, Any] = self.post("runs/apply", body)
        return plan

    def upload_archive(self, data: bytes) -> str:
        """Store a tar.gz on the server (once: by its sha256) and return its id."""
        digest = hashlib.sha256(data).hexdigest()
        try:
            self.post("/api/files/get_archive_by_hash", {"hash": digest})
            return digest
        except NotFoundError:
            pass
        try:
            answer = self._http.post(
                "/api/files/upload_archive",
                content=data,
                headers={"content-type": "application/octet-stream"},
            )
        except httpx.HTTPError as exc:
            raise unreachable(self.url, exc) from None
        raise_for_answer(answer)
        return str(answer.json()["id"])

    def list_runs(self, *, all: bool = False, limit: int = 100) -> list[wire.Run]:
        return self._many(wire.Run, "runs/list", {"all": all, "limit": limit})

    def iter_runs(
        self,
        *,
        project: str | None = None,
        only_active: bool = False,
        page_size: int = 100,
    ) -> Iterator[wire.Run]:
        """Every run of the caller's projects (or of `project`), newest first, fetched a
        page at a time from dstack's `/api/runs/list` (its `prev_*` cursor)."""
        cursor: dict[str, Any] = {}
        while True:
            body = {"project_name": project, "only_active": only_active, "limit": page_size}
            page = self._many(wire.Run, "/api/runs/list", {**body, **cursor})
            yield from page
            if len(page) < page_size:
                return
            last = page[-1]
            cursor = {"prev_submitted_at": last.submitted_at.isoformat(), "prev_run_id": last.id}

    def get_run(self, name: str) -> wire.Run:
        return self._one(wire.Run, "runs/get", {"run_name": name})

    def stop_runs(self, names: list[str], *, abort: bool = False) -> list[str]:
        """Stop runs; the server's warnings (a Git-owned run's next reconcile)."""
        answer = self.post("runs/stop", {"runs_names": names, "abort": abort})
        warnings = answer.get("warnings") if isinstance(answer, dict) else None
        return [str(w) for w in warnings] if isinstance(warnings, list) else []

    def delete_runs(self, names: list[str]) -> None:
        self.post("runs/delete", {"runs_names": names})

    # -- fleets, volumes, gateways, offers --------------------------------------------------

    def list_fleets(self) -> list[wire.Fleet]:
        return self._many(wire.Fleet, "fleets/list")

    def get_fleet(self, name: str) -> wire.Fleet:
        return self._one(wire.Fleet, "fleets/get", {"name": name})

    def list_volumes(self, kind: str = "volume") -> list[wire.Volume]:
        """Volumes, or gateways with `kind="gateway"`."""
        return self._many(wire.Volume, f"{kind}s/list")

    def get_volume(self, name: str, kind: str = "volume") -> wire.Volume:
        return self._one(wire.Volume, f"{kind}s/get", {"name": name})

    def delete(self, kind: str, names: list[str]) -> None:
        """Delete fleets, volumes or gateways (`kind` is fleet|volume|gateway) by name."""
        self.post(f"{kind}s/delete", {"names": names})

    def list_offers(self, gpu: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        offers: list[dict[str, Any]] = self.post("offers/list", {"gpu": gpu, "limit": limit})[
            "offers"
        ]
        return offers

    # -- logs --------------------------------------------------------------------------------

    def poll_logs(
        self, run: str, *, job_num: int = 0, replica_num: int = 0, offset: int = 0
    ) -> tuple[bytes, wire.LogChunk]:
        """One chunk of the job's log from byte `offset`: (bytes, chunk info)."""
        body = {"run_name": run, "job_num": job_num, "replica_num": replica_num, "offset": offset}
        chunk = self._one(wire.LogChunk, "logs/poll", body)
        return base64.b64decode(chunk.data), chunk

    def stream_logs(
        self, run: str, *, job_num: int = 0, replica_num: int = 0, offset: int = 0
    ) -> Iterator[bytes]:
        """The job's log from `offset`, live, until the job has finished."""
        body = {"run_name": run, "job_num": job_num, "replica_num": replica_num, "offset": offset}
        path = f"/api/project/{self.project}/logs/stream"
        try:
            with self._http.stream("POST", path, json=body, timeout=None) as answer:
                if answer.status_code >= 400:
                    answer.read()
                    raise_for_answer(answer)
                yield from answer.iter_raw()
        except httpx.HTTPError as exc:
            raise unreachable(self.url, exc) from None

    def job_metrics(self, run: str, *, job_num: int = 0, replica_num: int = 0) -> dict[str, Any]:
        """dstack's `JobMetrics` of one job (`{"metrics": [{name, timestamps, values}]}`)."""
        path = f"/api/project/{self.project}/metrics/job/{run}"
        params = {"job_num": job_num, "replica_num": replica_num}
        try:
            answer = self._http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise unreachable(self.url, exc) from None
        raise_for_answer(answer)
        metrics: dict[str, Any] = answer.json()
        return metrics

    # -- events, reconciles, deliveries, secrets --------------------------------------------

    def list_events(
        self,
        *,
        limit: int = 100,
        since: datetime | None = None,
        target_type: str | None = None,
        target_name: str | None = None,
    ) -> list[wire.Event]:
        body = {
            "limit": limit,
            "since": since.isoformat() if since else None,
            "target_type": target_type,
            "target_name": target_name,
        }
        return self._many(wire.Event, "events/list", body)

    def list_reconciles(self, limit: int = 20) -> list[wire.Reconcile]:
        return self._many(wire.Reconcile, "reconciles/list", {"limit": limit})

    def get_reconcile(self, reconcile_id: str) -> wire.Reconcile:
        return self._one(wire.Reconcile, "reconciles/get", {"id": reconcile_id})

    def trigger_reconcile(self) -> wire.Reconcile:
        return self._one(wire.Reconcile, "reconciles/trigger")

    def list_deliveries(self, limit: int = 50) -> list[wire.Delivery]:
        return self._many(wire.Delivery, "/api/deliveries/list", {"limit": limit})

    def list_secrets(self) -> list[wire.Secret]:
        return self._many(wire.Secret, "secrets/list")

    def get_secret(self, name: str) -> wire.Secret:
        return self._one(wire.Secret, "secrets/get", {"name": name})

    def set_secret(self, name: str, value: str) -> wire.Secret:
        return self._one(wire.Secret, "secrets/create_or_update", {"name": name, "value": value})

    def delete_secret(self, name: str) -> None:
        self.post("secrets/delete", {"name": name})
