"""The daemon's persistent store: sessions, their numbered events, our placeholders and the
jobs of the bridge's front end (SQLite, the jobs' queries in :mod:`coorm_bridge.store.jobs`).

Every state change is written here *before* it is acknowledged to a launcher, so that after a
``kill -9`` and a restart nothing acknowledged is lost and launchers resume their event streams
from the last sequence number they saw (docs/design.md §5, §9). The file itself (WAL, transactions,
snapshot reads) is :mod:`coorm_bridge.store.database`.

Rows are pydantic models validated before any write, so a value that cannot be meant (a request
on a cluster the session does not see, a waiting session without a request, a state change the
state machine does not allow) is refused instead of crashing every later policy pass that would
read it back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any, Final

from coorm_bridge.core.messages import Event
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import ACTIVE, FINAL, AppState, transition
from coorm_bridge.store.compaction import COALESCED, coalesce, trailing
from coorm_bridge.store.drains import DrainQueries
from coorm_bridge.store.jobs import JobQueries
from coorm_bridge.store.meta import MetaQueries
from coorm_bridge.store.rows import (
    PlaceholderRow,
    SessionRow,
    Typed,
    new_session_id,
)
from coorm_bridge.store.schema import EVENTS, placeholder_row, session_row, to_sql


class _Unset(Enum):
    """'Not given' for :meth:`Store.update_session`, where ``None`` is a value to write."""

    UNSET = "unset"


_UNSET: Final = _Unset.UNSET
_UPDATABLE: Final = (
    "state",
    "request",
    "estimated_start",
    "started_at",
    "done_at",
    "alloc_end",
    "typed",
    "clusters",
)


class Store(JobQueries, DrainQueries, MetaQueries):
    """Sessions, events, placeholders, jobs and drained clusters in the database; thread-safe
    like it."""

    _active: dict[str, SessionRow] | None = None
    """The active sessions as committed, in subscription order (loaded at the first
    :meth:`active_sessions`, then kept by the writes' :meth:`_committed`): every policy pass
    reads them all, and reading 10,000 rows costs a third of a second."""

    # -- sessions ----------------------------------------------------------------------------

    def create_session(
        self,
        owner: str,
        name: str | None,
        filter: Filter,
        clusters: Iterable[str],
        now: int,
        **v2: Any,
    ) -> SessionRow:
        """Subscribe: a new session in state SUBMITTED, last in the subscription order.

        ``v2``: ``evolving=True`` for an evolving application's session; ``parent``, ``typed``
        and the fields of its first state for one of its requests (written in one insert)."""
        with self.transaction():
            last = int(self._read("SELECT value FROM meta WHERE key = 'last_ord'")[0][0])
            given = {"owner": owner, "name": name, "filter": filter, "clusters": tuple(clusters)}
            new = {"id": new_session_id(), "order": last + 1, "created": now, "updated": now}
            row = SessionRow.model_validate(given | new | v2)
            self._conn.execute("UPDATE meta SET value = ? WHERE key = 'last_ord'", (row.order,))
            self._conn.execute(
                "INSERT INTO sessions (id, ord, owner, name, filter, clusters, state, request, "
                "estimated_start, started_at, done_at, alloc_end, created, updated, parent, "
                "evolving, typed) VALUES (:id, :order, :owner, :name, :filter, :clusters, "
                ":state, :request, :estimated_start, :started_at, :done_at, :alloc_end, "
                ":created, :updated, :parent, :evolving, :typed)",
                to_sql(row),
            )
            self._stage(("session", row.id), row)
        return row

    def session(self, session_id: str) -> SessionRow | None:
        rows = self._read("SELECT * FROM sessions WHERE id = ?", (session_id,))
        return session_row(rows[0]) if rows else None

    def owner(self, session_id: str) -> str | None:
        """Who owns a session (None: no such session), read without waiting for the writer."""
        rows = self._snapshot_read("SELECT owner FROM sessions WHERE id = ?", (session_id,))
        return str(rows[0][0]) if rows else None

    def sessions(
        self,
        owner: str | None = None,
        states: Iterable[AppState] | None = None,
        *,
        requests: bool = True,
    ) -> list[SessionRow]:
        """Sessions in subscription order, optionally of one owner and in some states;
        ``requests=False`` leaves out the rows of evolving applications' requests (what users
        and admins call sessions)."""
        wanted = None if states is None else json.dumps([AppState(s).value for s in states])
        rows = self._read(
            "SELECT * FROM sessions WHERE (?1 IS NULL OR owner = ?1) AND "
            "(?2 IS NULL OR state IN (SELECT value FROM json_each(?2))) AND "
            "(?3 OR parent IS NULL) ORDER BY ord",
            (owner, wanted, requests),
        )
        return [session_row(row) for row in rows]

    def active_sessions(self) -> list[SessionRow]:
        """``sessions(states=ACTIVE)``, from memory once read (the writer inside a transaction
        reads the file: it sees its own writes there)."""
        with self._lock:
            if self.in_transaction:
                return self.sessions(states=ACTIVE)
            if self._active is None:
                self._active = {row.id: row for row in self.sessions(states=ACTIVE)}
            return list(self._active.values())

    def _committed(self, staged: dict[Any, Any]) -> None:
        active = self._active
        if active is None:
            return
        last = next(reversed(active.values())).order if active else 0
        for key, row in staged.items():
            if key[0] != "session":
                continue
            if row.state not in ACTIVE:
                active.pop(row.id, None)
            elif row.id in active or row.order > last:
                active[row.id] = row  # an update keeps its place; a new session comes last
                last = max(last, row.order)
            else:  # back among the active ones out of order (no state does that today)
                self._active = None
                return

    def requests_of(self, session_id: str) -> list[SessionRow]:
        """An evolving application's requests, in the order it sent them."""
        rows = self._read("SELECT * FROM sessions WHERE parent = ? ORDER BY ord", (session_id,))
        return [session_row(row) for row in rows]

    def counts(self) -> dict[AppState, int]:
        """How many sessions are in each state (for metrics, without reading the rows)."""
        rows = self._read(  # sessions, not the requests of evolving applications
            "SELECT state, COUNT(*) FROM sessions WHERE parent IS NULL GROUP BY state"
        )
        found = {AppState(state): int(count) for state, count in rows}
        return {state: found.get(state, 0) for state in AppState}

    def update_session(
        self,
        session_id: str,
        *,
        now: int,
        state: AppState | _Unset = _UNSET,
        request: Request | _Unset | None = _UNSET,
        estimated_start: int | _Unset | None = _UNSET,
        started_at: int | _Unset | None = _UNSET,
        done_at: int | _Unset | None = _UNSET,
        alloc_end: int | _Unset | None = _UNSET,
        typed: Typed | _Unset = _UNSET,
        clusters: tuple[str, ...] | _Unset = _UNSET,
    ) -> SessionRow:
        """Change the fields given (``None`` included), stamp ``updated``; KeyError if unknown.

        The state change must be one :data:`~coorm_bridge.core.states.TRANSITIONS` allows, and
        the whole new row is validated first, so a change that would leave the session
        inconsistent (say WAITING without a request) is refused and nothing is written."""
        given = (state, request, estimated_start, started_at, done_at, alloc_end, typed, clusters)
        changes = {k: v for k, v in zip(_UPDATABLE, given, strict=True) if v is not _UNSET}
        with self.transaction():
            if (old := self.session(session_id)) is None:
                raise KeyError(session_id)
            row = SessionRow.model_validate({**dict(old), **changes, "updated": now})
            transition(old.state, row.state)  # the one table every state change goes through
            self._conn.execute(
                "UPDATE sessions SET state = :state, request = :request, estimated_start = "
                ":estimated_start, started_at = :started_at, done_at = :done_at, "
                "alloc_end = :alloc_end, typed = :typed, clusters = :clusters, updated = :updated "
                "WHERE id = :id",
                to_sql(row),
            )
            self._stage(("session", row.id), row)
        return row

    def purge_finished(self, before: int) -> int:
        """Delete ended sessions (finished, cancelled, failed) last updated before ``before``,
        with their events and placeholders; returns how many sessions went. Their order numbers
        are never given out again."""
        with self.transaction():
            cursor = self._conn.execute(
                "DELETE FROM sessions WHERE state IN (SELECT value FROM json_each(?)) "
                "AND updated < ? "
                # One still holding a placeholder keeps its row until it is released, one
                # with a job not ended yet until it ends.
                "AND id NOT IN (SELECT session_id FROM placeholders) "
                "AND id NOT IN (SELECT session_id FROM jobs WHERE step != 'ended')",
                (json.dumps([state.value for state in FINAL]), before),
            )
            return cursor.rowcount

    def _require_session(self, session_id: str) -> None:
        """KeyError unless the session exists (cheaper than reading and validating it)."""
        if not self._read("SELECT 1 FROM sessions WHERE id = ?", (session_id,)):
            raise KeyError(session_id)

    # -- events ------------------------------------------------------------------------------

    def append_event(self, session_id: str, event: Mapping[str, object], read: int = 0) -> Event:
        """Store ``event`` (an event's fields, without ``seq``) as the session's next one.

        Numbers are 1, 2, ... per session, assigned under the transaction so that they are
        unique and increasing whatever the threads, and never reused. A ``change`` or
        ``placement_failed`` replaces the superseded ones of the session's trailing run
        (:mod:`coorm_bridge.store.compaction`: a ``change`` then carries every change it
        replaces, from after ``read``, what the launcher read), which leaves gaps; the returned
        event is what a launcher gets."""
        if "seq" in event:
            raise ValueError("the store numbers events: give the event without 'seq'")
        with self.transaction():
            self._require_session(session_id)
            last = self._conn.execute(
                "SELECT seq, type, json_extract(body, '$.request') AS request FROM events "
                "WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            # One request of an evolving application ending (API v2) is not the session's end.
            if last is not None and last["type"] == "ended" and last["request"] is None:
                raise ValueError(f"session {session_id} has ended: no event follows 'ended'")
            seq = 1 if last is None else last[0] + 1
            full = EVENTS.validate_python({**event, "seq": seq})  # refused before any delete
            if full.type in COALESCED and last is not None and last["type"] in COALESCED:
                run = trailing(self._conn, session_id)
                fields = EVENTS.dump_python(full, mode="json")
                kept = coalesce(self._conn, session_id, fields, run, read)
                if kept is not fields:
                    full = EVENTS.validate_python(kept)
            self._conn.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                (session_id, full.seq, full.time, full.type, EVENTS.dump_json(full).decode()),
            )
        return full

    def events(self, session_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        """The session's committed events numbered above ``after``, oldest first, at most
        ``limit``; KeyError for an unknown session."""
        return [
            EVENTS.validate_json(body) for _, body in self.event_bodies(session_id, after, limit)
        ]

    def event_bodies(
        self, session_id: str, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """:meth:`events` as their numbers and JSON, as stored (validated when written): what a
        long poll or an event stream sends, without parsing and serialising each again."""
        if after < 0 or limit < 1:
            raise ValueError(f"need after >= 0 and limit >= 1, got after={after}, limit={limit}")
        rows = self._snapshot_read(
            "SELECT seq, body FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session_id, after, limit),
        )
        if not rows and not self._snapshot_read(
            "SELECT 1 FROM sessions WHERE id = ?", (session_id,)
        ):
            raise KeyError(session_id)
        return [(int(row[0]), str(row[1])) for row in rows]

    def last_seq(self, session_id: str) -> int:
        """The session's last event number, 0 before the first; KeyError if unknown."""
        self._require_session(session_id)
        rows = self._read("SELECT MAX(seq) FROM events WHERE session_id = ?", (session_id,))
        return int(rows[0][0] or 0)

    # -- placeholders ------------------------------------------------------------------------

    def put_placeholder(self, row: PlaceholderRow) -> None:
        """Record (or update) the session's placeholder on ``row.cluster``.

        Refused: an unknown session (KeyError), a cluster outside its view, or a reservation
        name that another session or cluster already holds (ValueError)."""
        with self.transaction():
            session = self.session(row.session_id)
            if session is None:
                raise KeyError(row.session_id)
            if row.cluster not in session.clusters:
                raise ValueError(f"session {row.session_id} does not see cluster {row.cluster}")
            other = self._conn.execute(
                "SELECT session_id, cluster FROM placeholders WHERE name = ?", (row.name,)
            ).fetchone()
            if other is not None and tuple(other) != (row.session_id, row.cluster):
                raise ValueError(
                    f"reservation name {row.name} already belongs to session {other[0]} "
                    f"on cluster {other[1]}"
                )
            self._conn.execute(
                # Safe: the only other unique key, the name, was checked just above.
                "INSERT OR REPLACE INTO placeholders VALUES (:session_id, :cluster, :name, "
                ":start, :end, :hosts, :host_names, :status)",
                to_sql(row),
            )

    def placeholder(self, session_id: str, cluster: str) -> PlaceholderRow | None:
        rows = self._read(
            "SELECT * FROM placeholders WHERE session_id = ? AND cluster = ?", (session_id, cluster)
        )
        return placeholder_row(rows[0]) if rows else None

    def placeholders(self, session_id: str | None = None) -> list[PlaceholderRow]:
        """All placeholders (or one session's), in subscription order then cluster name."""
        rows = self._read(
            "SELECT p.* FROM placeholders p JOIN sessions s ON s.id = p.session_id "
            "WHERE ?1 IS NULL OR p.session_id = ?1 ORDER BY s.ord, p.cluster",
            (session_id,),
        )
        if not rows and session_id is not None:
            self._require_session(session_id)
        return [placeholder_row(row) for row in rows]

    def delete_placeholder(self, session_id: str, cluster: str) -> None:
        """Forget a released placeholder; KeyError if there is none."""
        with self.transaction():
            cursor = self._conn.execute(
                "DELETE FROM placeholders WHERE session_id = ? AND cluster = ?",
                (session_id, cluster),
            )
            if cursor.rowcount == 0:
                raise KeyError((session_id, cluster))
