"""What happens to sessions, written down: states and events, in transactions, launchers woken
after the commit.

Passes, the enactor and the session operations all change sessions; they do it through here, so
that each change goes through the state machine (the store checks it), its event is stored in the
same transaction, and long polls wake only once both are committed. Callers hold the bridge's
lock, and never call a batch system inside :meth:`Recorder.batch`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from coorm_bridge.core.messages import Allocation, reason
from coorm_bridge.core.states import FINAL, AppState
from coorm_bridge.store import PlaceholderRow, SessionRow, Store

log = logging.getLogger(__name__)


class Recorder:
    """Writes session changes and their events; ``notify(session_ids)`` is called once per
    commit with every session it changed, each once (the listeners: long polls wake then; a pass
    that changes a thousand views wakes them in one call)."""

    def __init__(self, store: Store, notify: Callable[[list[str]], None]) -> None:
        self.store = store
        self.notify = notify
        self._woken: list[str] | None = None
        self.ending: Callable[[SessionRow, int], None] | None = None
        """Ends an evolving application's requests (API v2), set by the composition root."""

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction for many changes; their sessions are woken once it committed (or not
        at all if it rolled back). Nested batches join the outer one."""
        if self._woken is not None:
            with self.store.transaction():
                yield
            return
        woken: list[str] = []
        self._woken = woken
        try:
            with self.store.transaction():
                yield
        except BaseException:
            woken.clear()
            raise
        finally:
            self._woken = None
        if woken:
            self.notify(list(dict.fromkeys(woken)))

    def emit(self, session_id: str, event: dict[str, Any], read: int = 0) -> int:
        """Store an event (inside :meth:`batch`, which wakes its long polls after the commit);
        its number. ``read``: the launcher read the session's events up to this one."""
        assert self._woken is not None, "events are written inside Recorder.batch"
        seq = self.store.append_event(session_id, event, read).seq
        self._woken.append(session_id)
        return seq

    def emit_for(self, row: SessionRow, event: dict[str, Any]) -> None:
        """Store an event about ``row``: a request of an evolving application tells its
        application's session, naming the request (API v2). Once the application ended, its
        ``ended`` is its last event: what its requests' ghosts do after it goes untold."""
        if row.parent is None:
            self.emit(row.id, event)
            return
        parent = self.store.session(row.parent)
        if parent is not None and parent.state in FINAL:
            return
        self.emit(row.parent, {**event, "request": row.name})

    def update(self, row: SessionRow, now: int, **fields: Any) -> SessionRow:
        return self.store.update_session(row.id, now=now, **fields)

    # -- endings ------------------------------------------------------------------------------

    def end(self, row: SessionRow, state: AppState, now: int) -> SessionRow:
        """A final state and its ``ended`` event; the placeholders go at the next enactment.
        An evolving application's requests end first (``ending``): its stream ends last."""
        with self.batch():
            if row.evolving and self.ending is not None:
                self.ending(row, now)
            row = self.store.update_session(row.id, now=now, state=state)
            self.emit_for(row, {"type": "ended", "time": now, "state": state})
        return row

    def kill(self, row: SessionRow, why: str, now: int) -> SessionRow:
        """The allocation is taken back (its end passed without ``done``, a host went down)."""
        with self.batch():
            self.emit_for(row, {"type": "killed", "time": now, "reason": reason(why)})
            return self.end(row, AppState.FINISHED, now)

    def fail(self, row: SessionRow, why: str, now: int) -> SessionRow:
        """Set the session aside for good: an ``error`` event says why, then it ends (failed)."""
        with self.batch():
            self.emit_for(row, {"type": "error", "time": now, "reason": reason(why)})
            return self.end(row, AppState.FAILED, now)

    def withdraw(self, row: SessionRow, why: str, now: int) -> SessionRow:
        """The bridge withdraws a session that has not started; a ``withdrawn`` event says why."""
        with self.batch():
            self.emit_for(row, {"type": "withdrawn", "time": now, "reason": reason(why)})
            return self.end(row, AppState.CANCELLED, now)

    # -- placement ----------------------------------------------------------------------------

    def started(self, row: SessionRow, held: Mapping[str, PlaceholderRow], now: int) -> SessionRow:
        """The placeholders hold on every cluster: the session starts, and its launcher is told
        the hosts and reservations as the batch systems reported them, and its end: its
        duration from now, or the first placeholder's end if one could not be lengthened."""
        assert row.request is not None
        end = min(now + row.request.duration, *(p.end for p in held.values()))
        with self.batch():
            row = self.store.update_session(
                row.id,
                now=now,
                state=AppState.STARTED,
                started_at=now,
                alloc_end=end,
                estimated_start=now,
            )
            allocations = {
                cluster: Allocation(hosts=list(p.host_names), reservation=p.name)
                for cluster, p in sorted(held.items())
            }
            self.emit_for(
                row, {"type": "start", "time": now, "end": end, "allocations": allocations}
            )
        log.info("session %s started on %s until %d", row.id, ", ".join(held), end)
        return row

    def placement_failed(self, row: SessionRow, why: str, retry_at: int, now: int) -> None:
        with self.batch():
            event = {
                "type": "placement_failed",
                "time": now,
                "reason": reason(why),
                "retry_at": retry_at,
            }
            self.emit_for(row, event)
