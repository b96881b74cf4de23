"""Who is told, from any thread, that something happened: the long polls of a session once its
events are committed, and the requests waiting for a pass once it ran.

The service knows nothing of HTTP: the HTTP app adds its notifier here while it serves and
removes it when it stops; the recorder and the pass runner tell this object, given to them when
they are built. A listener that fails is logged and the others are still told: news of an event
must never undo the change it reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class Listeners:
    """The registered listeners; adding and removing happen at the app's start and stop."""

    def __init__(self) -> None:
        self._sessions: list[Callable[[list[str]], None]] = []
        self._passes: list[Callable[[], None]] = []

    def add(self, session: Callable[[list[str]], None], passed: Callable[[], None]) -> None:
        """``session(ids)`` after events were stored for these sessions (each once, one call a
        commit); ``passed()`` after a pass."""
        self._sessions.append(session)
        self._passes.append(passed)

    def remove(self, session: Callable[[list[str]], None], passed: Callable[[], None]) -> None:
        self._passes.remove(passed)
        self._sessions.remove(session)

    def sessions_changed(self, session_ids: list[str]) -> None:
        for listener in self._sessions:
            try:
                listener(session_ids)
            except Exception:
                log.exception("an event listener failed")

    def pass_ran(self) -> None:
        for listener in self._passes:
            try:
                listener()
            except Exception:
                log.exception("a pass listener failed")
