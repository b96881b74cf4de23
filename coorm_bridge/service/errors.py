"""Errors of the bridge's session operations, each with the HTTP status and code it maps to.

The HTTP layer turns them into ``{"error": code, "detail": text}``; anything else escaping an
operation is a bug (500, logged with its traceback, never shown to the client).
"""

from __future__ import annotations

from typing import ClassVar


class BridgeError(Exception):
    status: ClassVar[int] = 400
    code: ClassVar[str] = "bad_request"


class Invalid(BridgeError):
    """The input is well-formed but makes no sense here (unknown cluster, empty filter...)."""

    status = 422
    code = "invalid"


class NotFound(BridgeError):
    """No such session, or not one of the caller's."""

    status = 404
    code = "not_found"


class Conflict(BridgeError):
    """The session's state forbids the operation (a request after start, done before it)."""

    status = 409
    code = "conflict"


class Unauthenticated(BridgeError):
    status = 401
    code = "unauthenticated"
