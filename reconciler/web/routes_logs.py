"""Job logs: poll by byte offset, or follow as a live stream.

The jobs worker copies each job's raw output (its head and tail, `engine.joblogs`) under
`<data-dir>/projects/<project>/logs/<run>/`; offsets are byte offsets into the job's whole
output, so a client that reconnects with its last `next_offset` loses and repeats nothing.
`logs/poll` answers one base64 chunk (or, asked dstack's way with a `job_submission_id`,
dstack's `JobSubmissionLogs` with the offset as `next_token`; dstack's `start_time` can
only drop a whole submission, one that ended before it: lines carry no timestamps);
`logs/stream` sends raw bytes as they are written and ends once the job (or its run) has
finished and every byte was sent.
"""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from reconciler.adapters.db.readmodels.runs import (
    FINISHED_JOB,
    FINISHED_RUN,
    find_job,
    find_run_ref,
    job_finished_at,
)
from reconciler.api import models as wire
from reconciler.api import requests as req
from reconciler.core.dstack_wire import log_events
from reconciler.engine.joblogs import LogSlice, dropped_notice, job_log_path, read_log
from reconciler.web.auth import ProjectAccess, project_access
from reconciler.web.context import WebContext, get_context
from reconciler.web.errors import InvalidError

STREAM_POLL_SECONDS = 0.25
DSTACK_CHUNK = 256 * 1024
_JOB_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


async def _locate(
    context: WebContext, access: ProjectAccess, body: req.LogsRequest
) -> tuple[Path | None, str | None, bool]:
    """(log file or None, job id, finished?) of the latest submission of the job."""
    ref = await context.db.read(
        find_job, access.project_id, body.run_name, body.replica_num, body.job_num
    )
    if ref.job_id is None:
        return None, None, ref.run_status in FINISHED_RUN
    path = job_log_path(context.settings.data_dir, access.project_name, ref.run_name, ref.job_id)
    return path, ref.job_id, ref.job_status in FINISHED_JOB or ref.run_status in FINISHED_RUN


async def _follow(
    context: WebContext, access: ProjectAccess, body: req.LogsRequest
) -> AsyncIterator[bytes]:
    offset = body.offset
    while True:
        path, _, finished = await _locate(context, access, body)
        piece = await _read(path, offset, body.limit)
        if piece.data:
            offset = piece.next_offset
            yield dropped_notice(piece.dropped) + piece.data if piece.dropped else piece.data
        elif finished:
            return
        else:
            await anyio.sleep(STREAM_POLL_SECONDS)


async def _poll_submission(
    context: WebContext, access: ProjectAccess, body: req.LogsRequest
) -> wire.JobSubmissionLogs:
    """dstack's poll: one submission's log from the byte offset `next_token`, in one event;
    `next_token` is set while more bytes are there to read."""
    job_id = str(body.job_submission_id)
    if not _JOB_ID.match(job_id):
        raise InvalidError("job_submission_id: expected a job submission id")
    run = await context.db.read(find_run_ref, access.project_id, body.run_name)
    if body.start_time is not None:  # lines carry no time: a job that ended before has none
        ended = await context.db.read(job_finished_at, access.project_id, job_id)
        if ended is not None and ended < _aware(body.start_time):
            return wire.JobSubmissionLogs(logs=[], next_token=None)
    path = job_log_path(context.settings.data_dir, access.project_name, run.run_name, job_id)
    offset = int(body.next_token or 0)
    piece = await _read(path, offset, DSTACK_CHUNK)
    data = dropped_notice(piece.dropped) + piece.data if piece.dropped else piece.data
    stamp = datetime.fromtimestamp(context.clock.now_ts(), UTC).isoformat()
    return wire.JobSubmissionLogs(
        logs=log_events(base64.b64encode(data).decode(), stamp),
        next_token=str(piece.next_offset) if len(piece.data) == DSTACK_CHUNK else None,
    )


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


async def _read(path: Path | None, offset: int, limit: int) -> LogSlice:
    if path is None:
        return LogSlice(b"", offset, 0)
    return await anyio.to_thread.run_sync(read_log, path, offset, limit)


def build_logs_router() -> APIRouter:
    router = APIRouter(prefix="/api/project/{project_name}/logs", tags=["logs"])

    @router.post("/poll", response_model=wire.LogChunk | wire.JobSubmissionLogs)
    async def poll(
        body: req.LogsRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> wire.LogChunk | wire.JobSubmissionLogs:
        if body.job_submission_id is not None:
            return await _poll_submission(context, access, body)
        path, job_id, finished = await _locate(context, access, body)
        piece = await _read(path, body.offset, body.limit)
        data = dropped_notice(piece.dropped) + piece.data if piece.dropped else piece.data
        return wire.LogChunk(
            job_id=job_id,
            offset=body.offset,
            next_offset=piece.next_offset,
            data=base64.b64encode(data).decode(),
            finished=finished and not (await _read(path, piece.next_offset, 1)).data,
            dropped_bytes=piece.dropped,
        )

    @router.post("/stream", response_class=StreamingResponse)
    async def stream(
        body: req.LogsRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> StreamingResponse:
        await _locate(context, access, body)  # 404 now rather than inside the stream
        return StreamingResponse(
            _follow(context, access, body), media_type="application/octet-stream"
        )

    return router
