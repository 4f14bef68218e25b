"""How a Kubernetes API call fails, classified once for every caller.

A call raises ``ApiError`` (the API server answered an error status) or a transport error (``urllib3``'s
``HTTPError``, ``OSError``), or ``ValueError`` for an answer that is not the JSON object it should be.
``API_ERRORS`` names them all, so no caller needs to know the client's exception zoo; ``is_retryable``
says which a retry may fix; ``describe`` turns any of them into one log line.
"""

from __future__ import annotations

import urllib3


class ApiError(Exception):
    """The API server answered with an error status (0 when the client raised without one)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status = status
        self.message = message


class ApiUnavailable(Exception):
    """No usable cluster credentials (kubeconfig or in-cluster service account)."""


API_ERRORS: tuple[type[BaseException], ...] = (ApiError, urllib3.exceptions.HTTPError, OSError, ValueError)


def is_retryable(error: BaseException) -> bool:
    """Conflicts, throttling, server errors and transport failures: a retry (after a re-read) may succeed.

    Forbidden, not found, invalid and malformed answers will not change by asking again.
    """
    if isinstance(error, ApiError):
        return error.status in (0, 409, 429) or error.status >= 500
    return isinstance(error, urllib3.exceptions.HTTPError | OSError)


def describe(error: BaseException) -> str:
    """One line for a log: the API server's status and message, or the transport failure."""
    if isinstance(error, ApiError):
        return str(error)
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        return f"{type(error.reason).__name__}: {error.reason}"
    return f"{type(error).__name__}: {error}"
