"""`AgentClient`: the server's typed client of one host agent, spoken over an SSH tunnel.

Every call is HTTP to the agent's 127.0.0.1 port through `SSHTransport` (channels of the
host's pooled SSH connection, `agent.tunnel.TunnelPool`), parsed with the models of
`agent.protocol`. Two kinds of failure, never confused:

- `AgentUnreachable` (from `agent.tunnel`): the transport failed; nothing is known about
  the job. The caller keeps the job's status and starts its grace window.
- `AgentError`: the agent answered with an error body (``no_capacity``, ``not_found``, …).

Logs are pulled by byte offset (`logs`, `iter_logs`): the offset only advances past a chunk
received whole, so a tunnel dropped mid-transfer loses nothing and duplicates nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import asyncssh
import httpx
from pydantic import ValidationError

from agent.jobevents import EVENTS_PATH, JobEventsPage
from agent.protocol import (
    API_PREFIX,
    API_VERSION,
    DEFAULT_LOG_LIMIT,
    HEADER_JOB_FINISHED,
    HEADER_NEXT_OFFSET,
    REMOVALS_PATH,
    SUBMISSIONS_PATH,
    ErrorBody,
    ErrorCode,
    Healthcheck,
    HostInfo,
    JobMetrics,
    JobSpec,
    JobState,
    LogChunk,
    PortHolder,
    RemovalRequest,
    Removals,
    StopRequest,
    SubmissionRequest,
    Submissions,
    Submitted,
    agent_version,
)
from agent.ssh.transport import SSHTransport
from agent.tunnel import (
    AgentUnreachable,
    BackoffPolicy,
    SSHTarget,
    TunnelPool,
    UnreachableKind,
)

__all__ = ["AgentClient", "AgentError", "AgentUnreachable", "AgentVersionError"]

DEFAULT_TIMEOUT = 9.0


class AgentError(Exception):
    """The agent answered, with an error (``code`` is an `ErrorCode` value when known)."""

    def __init__(self, agent: str, status_code: int, code: str, message: str) -> None:
        super().__init__(f"{agent}: {code}: {message}")
        self.agent = agent
        self.status_code = status_code
        self.code = code
        self.message = message


class AgentVersionError(AgentError):
    """The agent runs another version than the server: re-deploy it."""

    def __init__(self, agent: str, found: Healthcheck, expected_version: str) -> None:
        super().__init__(
            agent,
            200,
            "version_mismatch",
            f"agent {found.version} (API {found.api_version}), server {expected_version} "
            f"(API {API_VERSION})",
        )
        self.found = found
        self.expected_version = expected_version


Sleep = Callable[[float], Awaitable[None]]


class AgentClient:
    """Typed calls to one agent. Build it with `over_tunnel` (or give any httpx client)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        name: str = "agent",
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._http = http
        self.name = name
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def over_tunnel(
        cls,
        pool: TunnelPool,
        target: SSHTarget,
        agent_port: int,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> AgentClient:
        """A client of the agent listening on 127.0.0.1:agent_port of `target`."""

        async def open_stream(
            host: str, port: int
        ) -> tuple[asyncssh.SSHReader[bytes], asyncssh.SSHWriter[bytes]]:
            return await pool.open_stream(target, host, port)

        # No cap on connections: each is a channel of the one SSH connection, and one
        # agent may be followed by several long-polls at once (one per instance there:
        # every project's local fleet is the same local agent); a cap below their number
        # left no connection for submissions, which then waited for a poll to end.
        http = httpx.AsyncClient(
            transport=SSHTransport(open_stream, max_connections=None),
            base_url=f"http://127.0.0.1:{agent_port}{API_PREFIX}",
            timeout=timeout,
        )
        return cls(http, name=str(target), clock=clock, sleep=sleep)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise AgentUnreachable(self.name, UnreachableKind.timeout, str(exc)) from exc
        except httpx.TransportError as exc:
            detail = str(exc) or type(exc).__name__
            raise AgentUnreachable(self.name, UnreachableKind.connection_lost, detail) from exc
        if response.status_code >= 400:
            raise self._to_error(response)
        return response

    def _to_error(self, response: httpx.Response) -> AgentError:
        try:
            body = ErrorBody.model_validate_json(response.content)
        except ValidationError:
            text = response.text[:200] or response.reason_phrase
            return AgentError(self.name, response.status_code, ErrorCode.INTERNAL.value, text)
        return AgentError(self.name, response.status_code, body.error.value, body.message)

    async def healthcheck(self) -> Healthcheck:
        response = await self._call("GET", "/healthcheck")
        return Healthcheck.model_validate_json(response.content)

    async def check_version(self, expected: str | None = None) -> Healthcheck:
        """The healthcheck, or `AgentVersionError` if the agent is not `expected`."""
        expected = expected or agent_version()
        health = await self.healthcheck()
        if health.api_version != API_VERSION or health.version != expected:
            raise AgentVersionError(self.name, health, expected)
        return health

    async def port_problem(self, port: int) -> str | None:
        """Why a connection to host port `port` would not reach the running job that has
        it (``GET /ports/{port}/holder``: another process holds it), or None."""
        response = await self._call("GET", f"/ports/{port}/holder")
        return PortHolder.model_validate_json(response.content).problem

    async def host_info(self) -> HostInfo:
        return HostInfo.model_validate_json((await self._call("GET", "/host")).content)

    async def submit(self, spec: JobSpec) -> JobState:
        """Submit a job; submitting an id that exists returns its state (idempotent)."""
        body = spec.model_dump(mode="json")
        return JobState.model_validate_json((await self._call("POST", "/jobs", json=body)).content)

    async def submit_many(self, specs: Sequence[JobSpec]) -> list[JobState | AgentError]:
        """Submit up to `MAX_SUBMISSIONS` jobs in one call: each one's state, or the
        `AgentError` ``POST /jobs`` would have raised for it, in order."""
        body = SubmissionRequest(jobs=list(specs)).model_dump(mode="json")
        response = await self._call("POST", SUBMISSIONS_PATH, json=body)
        answers = Submissions.model_validate_json(response.content).results
        if len(answers) != len(specs):
            raise AgentError(self.name, 500, ErrorCode.INTERNAL.value, "answers do not match")
        return [self._submitted(answer) for answer in answers]

    def _submitted(self, answer: Submitted) -> JobState | AgentError:
        if answer.state is not None:
            return answer.state
        error = answer.error or ErrorBody(error=ErrorCode.INTERNAL, message="no answer")
        return AgentError(self.name, answer.http_status, error.error.value, error.message)

    async def job(self, job_id: str) -> JobState:
        return JobState.model_validate_json((await self._call("GET", f"/jobs/{job_id}")).content)

    async def jobs(self) -> list[JobState]:
        response = await self._call("GET", "/jobs")
        return [JobState.model_validate(item) for item in response.json()]

    async def stop(
        self, job_id: str, *, grace: float | None = None, force: bool = False
    ) -> JobState:
        body = StopRequest(timeout=grace, force=force).model_dump(mode="json")
        response = await self._call("POST", f"/jobs/{job_id}/stop", json=body)
        return JobState.model_validate_json(response.content)

    async def remove(self, job_id: str) -> None:
        await self._call("DELETE", f"/jobs/{job_id}")

    async def remove_many(self, job_ids: Sequence[str]) -> Removals:
        """Remove finished jobs, up to `MAX_REMOVALS` in one call (an id the agent does not
        know counts as removed; one still running is answered `active` and left)."""
        body = RemovalRequest(job_ids=list(job_ids)).model_dump(mode="json")
        response = await self._call("POST", REMOVALS_PATH, json=body)
        return Removals.model_validate_json(response.content)

    async def metrics(self, job_id: str) -> JobMetrics:
        response = await self._call("GET", f"/jobs/{job_id}/metrics")
        return JobMetrics.model_validate_json(response.content)

    async def job_events(self, since: int, epoch: str, *, wait: float) -> JobEventsPage:
        """The agent's job events after `since` (`agent.jobevents`), held up to `wait` s."""
        params = {"since": since, "epoch": epoch, "wait": wait}
        timeout = httpx.Timeout(DEFAULT_TIMEOUT, read=wait + DEFAULT_TIMEOUT)
        response = await self._call("GET", EVENTS_PATH, params=params, timeout=timeout)
        return JobEventsPage.model_validate_json(response.content)

    async def logs(
        self,
        job_id: str,
        offset: int = 0,
        limit: int = DEFAULT_LOG_LIMIT,
        *,
        ack: int | None = None,
    ) -> LogChunk:
        """One chunk of the job's log from byte `offset` (read whole, or not at all); `ack`:
        the caller has stored the log up to there (the agent may give that prefix's disk
        blocks back)."""
        params = {"offset": offset, "limit": limit}
        if ack is not None:
            params["ack"] = ack
        response = await self._call("GET", f"/jobs/{job_id}/logs", params=params)
        return LogChunk(
            offset=offset,
            next_offset=int(
                response.headers.get(HEADER_NEXT_OFFSET, offset + len(response.content))
            ),
            finished=response.headers.get(HEADER_JOB_FINISHED, "0") == "1",
            data=response.content,
        )

    async def iter_logs(
        self,
        job_id: str,
        offset: int = 0,
        *,
        limit: int = DEFAULT_LOG_LIMIT,
        poll_interval: float = 1.0,
        unreachable_timeout: float = 120.0,
        backoff: BackoffPolicy | None = None,
    ) -> AsyncIterator[LogChunk]:
        """Follow the log from `offset` until the job has finished and all of it was read.

        A transport failure is retried from the same offset (backoff on the injected
        clock) until the agent has been unreachable for `unreachable_timeout` seconds;
        then `AgentUnreachable` is raised and the caller resumes later from the last
        chunk's ``next_offset``. The end is a read that returned nothing, made after an
        earlier answer already said the job had finished, so no trailing bytes are missed.
        """
        backoff = backoff or BackoffPolicy(initial=poll_interval, maximum=10 * poll_interval)
        failures, since, finished_before = 0, None, False
        while True:
            try:
                chunk = await self.logs(job_id, offset, limit)
            except AgentUnreachable:
                now = self._clock()
                since = now if since is None else since
                if now - since >= unreachable_timeout:
                    raise
                failures += 1
                await self._sleep(backoff.delay(failures))
                continue
            failures, since = 0, None
            if chunk.data:
                yield chunk
                offset = chunk.next_offset
            elif finished_before:
                return
            elif not chunk.finished:
                await self._sleep(poll_interval)
            finished_before = chunk.finished
