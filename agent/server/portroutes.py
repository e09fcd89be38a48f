"""``GET /ports/{port}/holder``: whether a connection to a job's host port reaches the job.

The server asks this before it opens a channel to a job's port through a host's own sshd
(SSH fleets), which knows nothing of jobs; through the agent's embedded SSH server the
channel itself is checked (`agent.ssh.service.port_check`). The answer is
``{"problem": null}`` when the running job with that host port holds its listening socket
(or no running job has the port, or its engine holds it), else ``{"problem": reason}``
(`agent.server.portholders`). Mounted by ``app.create_app``.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Path

from agent.protocol import PortHolder
from agent.server.jobs import JobManager
from agent.server.portholders import PortHolders

PORT_HOLDER_PATH = "/ports/{port}/holder"


def router(manager: JobManager, holders: PortHolders) -> APIRouter:
    routes = APIRouter()

    @routes.get(PORT_HOLDER_PATH)
    async def holder(port: Annotated[int, Path(ge=1, le=65535)]) -> PortHolder:
        states = manager.list()
        problem = await asyncio.to_thread(holders.job_port_problem, states, manager.spec, port)
        return PortHolder(problem=problem)

    return routes
