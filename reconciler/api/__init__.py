"""The Python API of Dockyard: `Client` (httpx) and the wire models it returns.

The CLI is built on it; see docs/server.md for an example.
"""

from reconciler.api.client import Client
from reconciler.api.errors import AccessError, ApiError, NotFoundError, ServerUnreachableError

__all__ = ["AccessError", "ApiError", "Client", "NotFoundError", "ServerUnreachableError"]
