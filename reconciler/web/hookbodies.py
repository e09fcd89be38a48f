"""Reading a webhook delivery's body so that an unauthenticated caller costs the server
(almost) nothing: called by `reconciler.web.webhooks` for every delivery.

A GitHub delivery proves itself by an HMAC over the whole body, so the body must be read
before anyone knows whether it is genuine. `read_github_body_any` therefore:

- refuses at once, without reading, a delivery with no `sha256=<64 hex>` signature at all;
- takes room for the body from an `UnverifiedBudget` shared by all connections (the
  `Content-Length` up front, or chunk by chunk when the body is chunked): with no room,
  `BusyError` at once (503) and the body is never read;
- hashes the body as it streams in and counts it (over `limit` → `BodyTooLargeError`),
  keeping the chunks only until the digest is compared; the whole body must arrive within
  the budget's `read_seconds` (else `SlowBodyError`: a connection that promises a body and
  sends nothing cannot hold the room); the room is given back whatever the outcome.

So whatever many forged deliveries arrive together, the unverified bytes the server holds
are bounded by the budget (twice the largest delivery, `settings.max_webhook_bytes`, by
default), and a forged body is never joined or parsed. A GitLab delivery proves itself by
a header (`X-Gitlab-Token`), checked before its body is read at all (`read_limited`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import Request

_SIGNATURE = re.compile(r"sha256=[0-9a-fA-F]{64}")


class BodyTooLargeError(Exception):
    """The body is over the delivery limit (413)."""


class BusyError(Exception):
    """No room for another unverified body now (503: GitHub's redelivery can retry)."""


class BadSignatureError(Exception):
    """The body's HMAC is not the delivery's `X-Hub-Signature-256` (401)."""


class SlowBodyError(Exception):
    """The unverified body did not arrive within `UnverifiedBudget.read_seconds` (408)."""


@dataclass
class UnverifiedBudget:
    """Bytes of not-yet-verified webhook bodies the server holds at once, all connections
    together. One per app (`build_webhooks_router`); the event loop is its only user, so a
    plain counter is enough (no `await` between a check and its update)."""

    limit: int
    read_seconds: float = 20.0
    """How long one unverified body may take to arrive (GitHub sends 25 MB in seconds)."""
    held: int = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held = max(0, self.held - size)


def is_signature_shaped(header: str | None) -> bool:
    """Whether `X-Hub-Signature-256` can be a signature at all (checked before any read)."""
    return header is not None and _SIGNATURE.fullmatch(header.strip()) is not None


def declared_length(request: Request) -> int | None:
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None


async def read_limited(request: Request, limit: int) -> bytes:
    """The raw body of an already authenticated delivery, refusing more than `limit`
    bytes whatever Content-Length claims."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise BodyTooLargeError
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError
        chunks.append(chunk)
    return b"".join(chunks)


async def read_github_body_any(
    request: Request,
    *,
    limit: int,
    budget: UnverifiedBudget,
    secrets: Sequence[str],
    signature: str,
) -> tuple[bytes, set[str]]:
    """The body of a GitHub delivery and the candidate `secrets` (one per source) under
    which its `signature` (`sha256=…`, shaped as `is_signature_shaped` wants) is its HMAC;
    raises `BusyError`, `BodyTooLargeError`, or `BadSignatureError` when no secret matches
    (see the module doc)."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise BodyTooLargeError
    held = declared or 0
    if not budget.take(held):
        raise BusyError
    try:
        macs = {key: hmac.new(key.encode(), digestmod=hashlib.sha256) for key in set(secrets)}
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(budget.read_seconds):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise BodyTooLargeError
                    if size > held:  # chunked, or more than declared: take room as it comes
                        if not budget.take(size - held):
                            raise BusyError
                        held = size
                    for mac in macs.values():
                        mac.update(chunk)
                    chunks.append(chunk)
        except TimeoutError:
            raise SlowBodyError from None
        given = signature.strip()[len("sha256=") :].lower().encode()
        proved = {k for k, m in macs.items() if hmac.compare_digest(m.hexdigest().encode(), given)}
        if not proved:
            raise BadSignatureError
        return b"".join(chunks), proved
    finally:
        budget.give(held)
