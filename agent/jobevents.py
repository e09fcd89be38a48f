"""The agent's job event stream, as the server reads it: models and constants.

A long-poll, not a push: ``GET /api/v1/jobs/events?since=<seq>&wait=<seconds>`` answers at
once with the events numbered after ``since``, or holds the request until one is
published or ``wait`` runs out (then an empty page). The agent serves it from
``agent/server/events.py``; the server follows it per host with
``AgentClient.job_events`` (``reconciler/engine/jobevents.py``) and wakes the jobs named,
so it learns a job's changes within milliseconds instead of polling each job.

An event says only *which* job changed and how (``kind``: ``state`` — the status or the
stop order moved —, or ``output`` — its log grew); the reader then asks for the job's
state and log as before, so a lost event costs a delay (the job's next regular pass),
never a wrong state. A page says ``reset`` when the reader cannot know what it missed:
another agent process answered (``epoch`` changed), or the events after ``since`` are no
longer kept; the reader then wakes every job it has on that host.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field

EVENTS_PATH = "/jobs/events"
MAX_WAIT_SECONDS = 60.0
MAX_EVENTS_PER_PAGE = 1000


class JobEventKind(enum.StrEnum):
    STATE = "state"
    OUTPUT = "output"


class JobEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    seq: int
    job_id: str
    kind: JobEventKind
    status: str = ""


class JobEventsPage(BaseModel):
    """The events after the reader's ``since``, in order; ``seq`` is where to go on from."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    epoch: str
    seq: int = Field(ge=0)
    reset: bool = False
    events: list[JobEvent] = Field(default_factory=list)
