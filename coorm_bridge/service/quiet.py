"""What each launcher asked to be told: deltas, and the horizon of its last choice.

A view changes for every waiting session behind a request that changes, and most of those
changes cannot alter what the session's selector chooses. Two things let the bridge say less:

- **deltas**: a launcher that subscribes with ``?changes=delta`` gets each changed profile from
  its first changed step on (``Change.since``), not whole;
- **a horizon**: after each choice the launcher's long poll may say ``?horizon=T``, the time
  from which no change of the view it holds can alter its selector's choice (each selector says
  how it knows: ``coorm_bridge.launchers.selectors``). Until a change comes before ``T``, the
  view's later changes are not sent; the next change event sent carries them all.

And the events a launcher read (the ``after`` of its polls) are not sent again: the store
coalesces a waiting session's change events into those read and those not read yet
(``coorm_bridge.store.compaction``), so a change event carries what changed since the last read.

All three are kept in memory only, like :class:`~coorm_bridge.service.silence.Silence`: after a
restart the bridge sends whole profiles and every change until the launcher says otherwise,
which is what a launcher of any release reads correctly. A horizon holds only for the view it
was computed on: the one the launcher held after reading the session's events up to ``after``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Horizon:
    """A launcher's word: its choice on the view after event ``after`` reads nothing from
    ``time`` on."""

    after: int
    time: int


class Quiet:
    """Per session: deltas wanted, and the last horizon heard. Called from request threads (the
    long polls) and from passes under the bridge's lock: its own small lock guards it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deltas: set[str] = set()
        self._horizons: dict[str, Horizon] = {}
        self._read: dict[str, int] = {}

    def subscribed(self, session_id: str, *, deltas: bool) -> None:
        if deltas:
            with self._lock:
                self._deltas.add(session_id)

    def wants_deltas(self, session_id: str) -> bool:
        return session_id in self._deltas

    def heard(self, session_id: str, after: int, horizon: int | None) -> None:
        """A long poll of the session's own launcher, which read its events up to ``after``."""
        with self._lock:
            self._read[session_id] = max(after, self._read.get(session_id, 0))
            if horizon is None:
                self._horizons.pop(session_id, None)
            else:
                self._horizons[session_id] = Horizon(after, horizon)

    def read(self, session_id: str) -> int:
        """The events the session's launcher read: up to this number (0: none heard of)."""
        return self._read.get(session_id, 0)

    def horizon(self, session_id: str, told: int | None) -> int | None:
        """The horizon for the view last sent to the session in its event number ``told``
        (None: every change matters): a launcher that had not read that event yet chose on
        an older view, whose horizon says nothing of this one."""
        found = self._horizons.get(session_id)
        if found is None or told is None or found.after < told:
            return None
        return found.time

    def keep(self, session_ids: Iterable[str]) -> None:
        """Forget every session but these (the active ones, after a pass)."""
        kept = set(session_ids)
        with self._lock:
            self._deltas &= kept
            for gone in self._horizons.keys() - kept:
                del self._horizons[gone]
            for gone in self._read.keys() - kept:
                del self._read[gone]
