"""The notification API's bodies and answers, shared by the server's routes
(`reconciler.web.routes_notifications`) and the CLI (`reconciler.cli.notification`).

A receiver is never answered with its secret: `has_secret` says there is one, and a Slack
URL (its path is its secret) is shown with the path hidden.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from reconciler.api.models import Wire

RECEIVERS = "/api/notifications/receivers"
DELIVERIES = "/api/notifications/list"


class ReceiverAdd(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    kind: Literal["webhook", "slack"]
    url: str = Field(min_length=1, max_length=2000)
    secret: str | None = Field(default=None, max_length=500)
    events: list[str] = Field(min_length=1, max_length=20)
    project: str | None = Field(default=None, max_length=100)
    source: str | None = Field(default=None, max_length=100)


class ReceiverName(BaseModel):
    name: str = Field(min_length=1, max_length=100)


class DeliveriesRequest(BaseModel):
    limit: int = Field(default=50, ge=1, le=1000)
    project: str | None = Field(default=None, max_length=100)


class ReceiverInfo(Wire):
    name: str
    kind: str
    url: str
    has_secret: bool
    events: list[str]
    project: str | None
    source: str | None
    created_by: str
    created_at: datetime | None


class NotificationInfo(Wire):
    id: str
    receiver: str
    kind: str
    project: str | None
    target_name: str
    message: str
    status: str
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None
