"""The agent's HTTP API (FastAPI): thin routes over the ``JobManager``.

Every route is under ``/api/v1`` (``protocol.API_PREFIX``); models come from
``agent/protocol.py`` and ``docs/contracts.md`` ("Agent API") describes them. Errors are
``ErrorBody`` JSON: ``AgentError`` maps to its code and status, a request that does not
validate to ``422 invalid_request``. The app holds no state of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from agent.protocol import (
    API_PREFIX,
    DEFAULT_LOG_LIMIT,
    HEADER_JOB_FINISHED,
    HEADER_LOG_OFFSET,
    HEADER_NEXT_OFFSET,
    MAX_LOG_LIMIT,
    REMOVALS_PATH,
    SUBMISSIONS_PATH,
    ErrorBody,
    ErrorCode,
    Healthcheck,
    HostInfo,
    JobMetrics,
    JobSpec,
    JobState,
    RemovalRequest,
    Removals,
    StopRequest,
    SubmissionRequest,
    Submissions,
    Submitted,
    agent_build,
    agent_version,
)
from agent.server.errors import AgentError
from agent.server.events import router as events_router
from agent.server.events import settled
from agent.server.jobs import JobManager
from agent.server.portholders import PortHolders
from agent.server.portroutes import router as port_routes

log = logging.getLogger(__name__)

HostProbe = Callable[[], Awaitable[HostInfo]]


def create_app(manager: JobManager, host_probe: HostProbe) -> FastAPI:
    """The API; who may connect is decided per connection by `peers` (`serving`)."""
    app = FastAPI(title="dockyard-agent", version=agent_version(), docs_url=None, redoc_url=None)
    # the event feed first: its path would otherwise read as a job id (`/jobs/{job_id}`)
    app.include_router(events_router(manager.events), prefix=API_PREFIX)
    app.include_router(_routes(manager, host_probe), prefix=API_PREFIX)
    app.include_router(port_routes(manager, PortHolders()), prefix=API_PREFIX)
    app.add_exception_handler(AgentError, _agent_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(Exception, _unexpected)
    return app


def _routes(manager: JobManager, host_probe: HostProbe) -> APIRouter:
    router = APIRouter()
    version, build = agent_version(), agent_build()

    @router.get("/healthcheck")
    async def healthcheck() -> Healthcheck:
        disk = await asyncio.to_thread(manager.disk.check)
        return Healthcheck(
            version=version,
            build=build,
            disk_problem=disk.problem,
            disk_free=dict(disk.free),
            epoch=manager.events.epoch,
        )

    @router.get("/host")
    async def host() -> HostInfo:
        return await host_probe()

    @router.post("/jobs")
    async def submit(spec: JobSpec) -> JobState:
        job_id = (await manager.submit(spec)).id
        return await settled(manager.events, lambda: manager.get(job_id))

    @router.post(SUBMISSIONS_PATH)
    async def submit_many(request: SubmissionRequest) -> Submissions:
        async def one(spec: JobSpec) -> Submitted:
            try:
                return Submitted(state=await submit(spec))
            except AgentError as error:  # this job's refusal; the others go on
                body = ErrorBody(error=error.code, message=error.message)
                return Submitted(error=body, http_status=error.http_status)

        # one submit per id (a job named twice gets the same answer twice, as POST /jobs
        # twice would give), all at once
        unique = {spec.id: spec for spec in request.jobs}
        answers = dict(zip(unique, await asyncio.gather(*map(one, unique.values())), strict=True))
        return Submissions(results=[answers[spec.id] for spec in request.jobs])

    @router.get("/jobs")
    async def list_jobs() -> list[JobState]:
        return manager.list()

    @router.get("/jobs/{job_id}")
    async def get_job(job_id: str) -> JobState:
        return manager.get(job_id)

    @router.get("/jobs/{job_id}/logs")
    async def logs(
        job_id: str,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_LOG_LIMIT)] = DEFAULT_LOG_LIMIT,
        ack: Annotated[int | None, Query(ge=0)] = None,  # the server stored the log up to here
    ) -> Response:
        manager.get(job_id)  # 404 before going to a thread
        chunk = await asyncio.to_thread(
            manager.read_logs, job_id, offset=offset, limit=limit, ack=ack
        )
        headers = {
            HEADER_LOG_OFFSET: str(chunk.offset),
            HEADER_NEXT_OFFSET: str(chunk.next_offset),
            HEADER_JOB_FINISHED: "1" if chunk.finished else "0",
        }
        return Response(chunk.data, media_type="application/octet-stream", headers=headers)

    @router.post("/jobs/{job_id}/stop")
    async def stop(job_id: str, request: StopRequest | None = None) -> JobState:
        request = request or StopRequest()
        return await manager.stop(job_id, grace=request.timeout, force=request.force)

    @router.post(REMOVALS_PATH)
    async def remove_many(request: RemovalRequest) -> Removals:
        removed: list[str] = []
        active: list[str] = []
        for job_id in dict.fromkeys(request.job_ids):
            try:
                await manager.remove(job_id)
            except AgentError as error:
                if error.code is not ErrorCode.NOT_FOUND:
                    active.append(job_id)
                    continue
            removed.append(job_id)
        return Removals(removed=removed, active=active)

    @router.delete("/jobs/{job_id}", status_code=204)
    async def remove(job_id: str) -> Response:
        await manager.remove(job_id)
        return Response(status_code=204)

    @router.get("/jobs/{job_id}/metrics")
    async def metrics(job_id: str) -> JobMetrics:
        return await manager.metrics(job_id)

    return router


async def _agent_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, AgentError)
    body = ErrorBody(error=error.code, message=error.message)
    return JSONResponse(body.model_dump(mode="json"), status_code=error.http_status)


async def _invalid_request(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(part) for part in problem.get('loc', ()))}: {problem.get('msg')}"
        for problem in error.errors()
    )
    body = ErrorBody(error=ErrorCode.INVALID_REQUEST, message=problems or "invalid request")
    return JSONResponse(body.model_dump(mode="json"), status_code=422)


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    """A bug: answered as ``internal`` without details (they are in the agent's log)."""
    log.error("%s %s failed", request.method, request.url.path, exc_info=error)
    body = ErrorBody(error=ErrorCode.INTERNAL, message=f"agent error: {type(error).__name__}")
    return JSONResponse(body.model_dump(mode="json"), status_code=500)
