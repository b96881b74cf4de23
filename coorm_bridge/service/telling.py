"""What each waiting session was last told of its view, and what to tell it next.

A pass computes every waiting session's view; a ``change`` event carries only what differs from
the view last sent, as deltas for launchers that asked, and nothing at all when every difference
lies past the horizon the launcher gave for its choice on that view (:mod:`.quiet`). What was
sent is kept in memory: after a restart the first event carries whole profiles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coorm_bridge.core.horizon import unheeded
from coorm_bridge.core.messages import Change, availability_changes
from coorm_bridge.core.profile import Profile
from coorm_bridge.service.quiet import Quiet
from coorm_bridge.service.stats import Stats
from coorm_bridge.store import SessionRow


class Told:
    """Per waiting session, the view last sent and the number and time of its event."""

    def __init__(self, quiet: Quiet, stats: Stats) -> None:
        self.quiet = quiet
        self.stats = stats
        self._sent: dict[str, dict[str, Profile]] = {}
        self._told: dict[str, tuple[int, int]] = {}

    def changes(
        self, row: SessionRow, view: Mapping[str, Profile], now: int
    ) -> list[Change] | None:
        """The changes of ``view`` to send ``row``'s launcher; None when they cannot alter its
        choice (they are sent with the next change that can)."""
        sent = self._sent.get(row.id, {})
        seq, sent_at = self._told.get(row.id, (None, now))
        horizon = self.quiet.horizon(row.id, seq)
        if unheeded(sent, sent_at, view, row.request, horizon, now):
            self.stats.unheeded += 1
            return None
        return availability_changes(sent, view, now, deltas=self.quiet.wants_deltas(row.id))

    def sent(self, session_id: str, view: dict[str, Profile], seq: int, now: int) -> None:
        """``view`` went out in event ``seq`` at ``now``."""
        self._sent[session_id] = view
        self._told[session_id] = (seq, now)

    def read(self, session_id: str) -> int:
        """The events the session's launcher read (the store coalesces those apart)."""
        return self.quiet.read(session_id)

    def forget(self, session_ids: Iterable[str]) -> None:
        for session_id in session_ids:
            self._sent.pop(session_id, None)
            self._told.pop(session_id, None)

    def keep(self, session_ids: Iterable[str], active: Iterable[str]) -> None:
        """Only these sessions' views (those placed in the pass); only the active ones' words."""
        kept = set(session_ids)
        self._sent = {k: v for k, v in self._sent.items() if k in kept}
        self._told = {k: v for k, v in self._told.items() if k in kept}
        self.quiet.keep(active)
