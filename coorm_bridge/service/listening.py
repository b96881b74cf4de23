"""A reader's hold on a session's events: what a long poll or an event stream of the HTTP API
keeps while it waits for the session's next events.

It reads without the bridge's lock or the store's writer, so readers are never held up by a pass
in progress, and it was allowed once (:meth:`.bridge.Bridge.listen`): its later reads do not
check the caller again. Its signs of life are in memory (:class:`~.silence.Silence`,
:class:`~.quiet.Quiet`), given while it waits: a waiting reader costs no store read.
"""

from __future__ import annotations

from collections.abc import Callable

from coorm_bridge.service.errors import NotFound
from coorm_bridge.service.quiet import Quiet
from coorm_bridge.service.silence import Silence
from coorm_bridge.store import Store


class Listening:
    """The events of ``session_id`` after ``after``, for its launcher (``launcher``: it keeps
    the session alive and says what it read) or for a follower (a web page, a terminal).

    A long poll reads from the same ``after`` until it answers (its next poll says what its
    launcher read, and with which ``horizon``). A stream moves on as it sends (:meth:`sent`):
    what it sent is read, and its launcher says its horizons by a request of their own."""

    def __init__(
        self,
        *,
        store: Store,
        silence: Silence,
        quiet: Quiet,
        now: Callable[[], int],
        session_id: str,
        after: int,
        limit: int,
        horizon: int | None,
        launcher: bool,
        stream: bool,
    ) -> None:
        self.store, self.silence, self.quiet, self.now = store, silence, quiet, now
        self.session_id, self.after, self.limit = session_id, after, limit
        self.horizon, self.launcher, self.stream = horizon, launcher, stream
        if launcher and stream:  # the horizon it opened with, until it sends another
            quiet.heard(session_id, after, horizon)
        self.first: list[tuple[int, str]] = self.read()
        """The events there were when it came (numbers and JSON, as stored)."""

    def alive(self) -> None:
        """Its launcher is alive (in memory; called in the server's loop: it must not block)."""
        if not self.launcher:
            return
        self.silence.heard(self.session_id, self.now())
        if not self.stream:
            self.quiet.heard(self.session_id, self.after, self.horizon)

    def read(self) -> list[tuple[int, str]]:
        """The events after ``after`` now (numbers and JSON); :class:`NotFound` once the session
        is gone (purged)."""
        self.alive()
        try:
            return self.store.event_bodies(self.session_id, after=self.after, limit=self.limit)
        except KeyError:
            raise NotFound(f"no session {self.session_id} of yours") from None

    def sent(self, seq: int) -> None:
        """A stream sent the events up to ``seq``: its next read starts after it, and its
        launcher has them (a horizon it gave for an older view no longer holds)."""
        self.after = seq
        if self.launcher:
            self.quiet.heard(self.session_id, seq, None)
