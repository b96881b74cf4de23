"""Launchers that went silent: a waiting session whose launcher no longer calls is withdrawn.

A launcher that died keeps its place in the queue, and the placeholders held for it, for as long
as nobody notices: with ``bridge.session_timeout`` set, a session not started whose launcher has
not called for that long is withdrawn before the next pass, with a ``withdrawn`` event saying
why. Calls are heard in memory only: after a restart every session gets a whole timeout from the
start, as its launcher may have been waiting for the daemon.
"""

from __future__ import annotations

import logging

from coorm_bridge.core.states import HOLDING, PLACED
from coorm_bridge.service.recorder import Recorder
from coorm_bridge.store import Store

log = logging.getLogger(__name__)


class Silence:
    """When each session's launcher last called, and the withdrawal of the silent ones.

    :meth:`heard` is called from any thread (a dict's item, set whole); :meth:`withdraw` under
    the bridge's lock, before a pass."""

    def __init__(self, store: Store, recorder: Recorder, timeout: int | None, started: int) -> None:
        self.store = store
        self.recorder = recorder
        self.timeout = timeout
        self.started = started
        self._heard: dict[str, int] = {}
        self._checked = 0

    def heard(self, session_id: str, now: int) -> None:
        """The session's launcher called (its owner's request, or its long poll)."""
        self._heard[session_id] = now

    def withdraw(self, now: int) -> bool:
        """Withdraw the waiting sessions whose launcher went silent for the timeout (looked at
        every tenth of it, at most every 10 s); True when one was (a pass is due)."""
        timeout = self.timeout
        if timeout is None or now < self._checked + min(10, timeout // 10):
            return False
        self._checked = now
        withdrawn = False
        for row in self.store.sessions(states=PLACED, requests=False):
            last = max(self._heard.get(row.id, self.started), self.started)
            if row.evolving and any(
                c.state in HOLDING for c in self.store.requests_of(row.id)
            ):  # it runs: a v1 session that started is not withdrawn either
                continue
            if now - last >= timeout:
                why = f"no word from its launcher for {now - last} s (bridge.session_timeout)"
                self.recorder.withdraw(row, why, now)
                self._heard.pop(row.id, None)
                withdrawn = True
                log.info("session %s withdrawn: %s", row.id, why)
        return withdrawn
