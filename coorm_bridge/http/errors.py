"""Errors as the HTTP API answers them: ``{"error": code, "detail": text}`` with a 4xx status.

The session operations raise :class:`~coorm_bridge.service.errors.SessionError` subclasses, which
know nothing of HTTP; the statuses and codes are given here, in one table.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

from coorm_bridge.service.errors import (
    BatchRuleRefusal,
    Conflict,
    Invalid,
    NotAdmin,
    NotFound,
    NotYours,
    OverLimit,
    RulesUnknown,
    SessionError,
)


class Unauthenticated(Exception):
    """No usable identity: no peer credentials and no (known) bearer token."""


class Forbidden(Exception):
    """A known caller who may not use the bridge (a user name no batch system could be given)."""


#: Status and code of each refusal; a subclass without its own row takes its parent's.
STATUSES: dict[type[Exception], tuple[int, str]] = {
    Invalid: (422, "invalid"),
    NotFound: (404, "not_found"),
    Conflict: (409, "conflict"),
    OverLimit: (403, "over_limit"),
    BatchRuleRefusal: (403, "batch_rule"),
    RulesUnknown: (503, "rules_unknown"),
    NotYours: (403, "forbidden"),
    NotAdmin: (403, "forbidden"),
    SessionError: (400, "bad_request"),
    Unauthenticated: (401, "unauthenticated"),
    Forbidden: (403, "forbidden"),
}


def status_of(error: Exception) -> tuple[int, str]:
    for kind in type(error).__mro__:
        if kind in STATUSES:
            return STATUSES[kind]
    return 400, "bad_request"


def error_response(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": code, "detail": detail})
