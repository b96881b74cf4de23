"""Why a session operation was refused: the caller's input or the session's state, never a bug.

The HTTP layer maps each to a status (:mod:`coorm_bridge.http.errors`); anything else escaping an
operation is a bug (500, logged with its traceback, never shown to the client).
"""

from __future__ import annotations


class SessionError(Exception):
    """A session operation refused; nothing was changed."""


class Invalid(SessionError):
    """The input is well-formed but makes no sense here (unknown cluster, empty filter...)."""


class NotFound(SessionError):
    """No such session, or not one of the caller's (the two look the same on purpose)."""


class Conflict(SessionError):
    """The session's state forbids the operation (a request after start, done before it)."""


class OverLimit(SessionError):
    """The caller asks for more than the site's ``[limits]`` allow; the message names the
    limit and where it is set."""


class BatchRuleRefusal(SessionError):
    """A batch system's own rule for the caller's jobs (a partition's MaxTime, their QOS) would
    refuse what they ask for; the message names the cluster and the setting."""


class RulesUnknown(SessionError):
    """A cluster's rules for users' jobs could not be read yet: nothing is promised there
    until they are (try again)."""


class NotYours(SessionError):
    """The caller may see the session (an admin) but not act as its owner: only the owner's
    jobs run in its placeholders."""


class NotAdmin(SessionError):
    """Only the site's admins (``bridge.admins``) may do this: drain or resume a cluster, look
    at other users' sessions."""
