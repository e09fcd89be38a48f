"""The agent's job event stream, as the server reads it: models and constants.

A long-poll, not a push: ``GET /api/v1/jobs/events?since=<seq>&wait=<seconds>`` answers at
once with the events numbered after ``since``, or holds the request until one is
published or ``wait`` runs out (then an empty page). The agent serves it from
``agent/server/events.py``; the server follows it per host with
``AgentClient.job_events`` (``reconciler/engine/jobevents.py``) and wakes the jobs named,
so it learns a job's changes within milliseconds instead of polling each job.

An event says *which* job changed and how (``kind``: ``state`` — the status or the stop
order moved —, or ``output`` — its log grew); the reader then asks for the job's state and
log as before, so a lost event costs a delay (the job's next regular pass), never a wrong
state. The one exception is a job's end: its ``state`` event carries ``end`` — the final
``JobState`` (a finished job's state never changes again) and, when the whole log is at
most ``END_LOG_BYTES``, the log itself — so the server can record the end without asking
for the job's state and log (a tiny task's end then needs no call but its removal).
A page says ``reset`` when the reader cannot know what it missed: another agent process
answered (``epoch`` changed), or the events after ``since`` are no longer kept; the
reader then wakes every job it has on that host.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field

from agent.protocol import JobState

EVENTS_PATH = "/jobs/events"
MAX_WAIT_SECONDS = 60.0
MAX_EVENTS_PER_PAGE = 1000
END_LOG_BYTES = 4096
"""A finished job's log travels with its end event when it is at most this long (the
feed keeps 10,000 events: at most ~55 MB of logs in the agent's memory)."""


class JobEventKind(enum.StrEnum):
    STATE = "state"
    OUTPUT = "output"


class JobEnd(BaseModel):
    """A finished job as its end event tells it: the final state, and the whole log when
    it is short (``None``: longer, or unreadable — read it with ``GET /jobs/{id}/logs``)."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", ser_json_bytes="base64", val_json_bytes="base64"
    )

    state: JobState
    log: bytes | None = None  # base64 in JSON


class JobEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    seq: int
    job_id: str
    kind: JobEventKind
    status: str = ""
    end: JobEnd | None = None  # set on the `state` event of a job that finished


class JobEventsPage(BaseModel):
    """The events after the reader's ``since``, in order; ``seq`` is where to go on from."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    epoch: str
    seq: int = Field(ge=0)
    reset: bool = False
    events: list[JobEvent] = Field(default_factory=list)
