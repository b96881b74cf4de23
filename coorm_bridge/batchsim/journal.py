"""The simulated platform's saved state: an append-only journal of the calls that changed it.

A real batch system keeps its jobs and reservations across a restart of the bridge, and its
clock keeps running meanwhile; the mock platform does the same from this file, in the daemon's
state folder. It holds (see :mod:`.calls` for why inputs, not structures):

- the platform's identity (:meth:`.PlatformSpec.identity`) and the simulated time it started at;
- every call that changed the platform, with the simulated time it came at, each committed
  before the call returns: a ``kill -9`` never loses what a caller was told;
- the clock's anchor: a simulated time, the wall-clock time it was read at and the speed-up then.
  After a restart the platform's time is where it would be had it kept running
  (:meth:`Journal.resume_time`), never before a time it recorded.

SQLite in WAL mode with ``synchronous=FULL``, as the bridge's store: a commit returns once it is
on disk, a write cut short by a kill is rolled back at the next open (it was never acknowledged),
and a reader (``python -m coorm_bridge.adapters.mock``) never blocks the daemon. One writer at a
time: an exclusive lock on ``<file>.lock`` keeps a second daemon on the same folder from
interleaving another history into it.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Self

from pydantic import Field, ValidationError

from coorm_bridge.batchsim.calls import CALL, Call
from coorm_bridge.batchsim.limits import MAX_TIME, SPEEDUP_LIMIT, TIME_LIMIT
from coorm_bridge.core.batch import AdapterError
from coorm_bridge.core.model import Frozen, describe

#: The journal's name in the daemon's state folder.
FILE_NAME: Final = "mock-platform.sqlite"
#: Bumped when the records change meaning; another format is refused, never rewritten.
FORMAT: Final = 1

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE calls (seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, call TEXT NOT NULL, "
    "outcome TEXT NOT NULL)",
)


class Anchor(Frozen):
    """Simulated ``time`` was read at wall-clock ``wall`` (Unix seconds) running at ``speedup``."""

    time: Annotated[int, Field(ge=0, strict=True), TIME_LIMIT]
    wall: Annotated[float, Field(allow_inf_nan=False)]
    speedup: Annotated[float, Field(gt=0, allow_inf_nan=False), SPEEDUP_LIMIT]

    def at(self, wall: float) -> int:
        """The simulated time at wall-clock ``wall``; a wall clock set back gives no earlier."""
        elapsed = max(0.0, wall - self.wall) * self.speedup
        return min(MAX_TIME, self.time + math.floor(min(elapsed, float(MAX_TIME))))


@dataclass(frozen=True, slots=True)
class Entry:
    """One journaled call: ``at`` its simulated time, ``outcome`` what it answered (JSON)."""

    seq: int
    at: int
    call: Call
    outcome: str


class Journal:
    """One journal file; see the module docstring. Not thread-safe: the site's lock
    serialises its use. ``readonly`` opens it for reading only, without the writer's lock."""

    def __init__(self, path: Path | str, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._lock_fd: int | None = None
        if not readonly:
            self._lock_fd = _lock(self.path)
        try:
            self._conn = self._connect()
            self._setup()
        except sqlite3.Error as error:
            self._unlock()
            raise AdapterError(f"{self.path}: cannot use the saved platform: {error}") from error
        except BaseException:
            self._unlock()
            raise

    def _connect(self) -> sqlite3.Connection:
        if self.readonly:
            if not self.path.exists():
                raise AdapterError(f"{self.path}: no saved platform state here")
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        return sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)

    def _setup(self) -> None:
        conn = self._conn
        conn.execute("PRAGMA busy_timeout = 10000")
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if tables and not {"meta", "calls"} <= tables:
            raise AdapterError(f"{self.path} is not a saved mock platform (no meta and calls)")
        if self.readonly:
            if not tables:
                raise AdapterError(f"{self.path}: no saved platform state here")
        else:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode != "wal":
                raise AdapterError(f"{self.path}: the file system refused WAL mode ({mode!r})")
            conn.execute("PRAGMA synchronous = FULL")
            if not tables:
                with self._transaction():
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    self._put("format", str(FORMAT))
        found = self._get("format")
        if found != str(FORMAT):
            raise AdapterError(
                f"{self.path}: saved in format {found} by another version of coorm-bridge; this "
                f"one reads format {FORMAT}: run a matching version, or move the file away to "
                "start the simulated platform afresh"
            )

    # -- what the platform is ---------------------------------------------------------------

    @property
    def identity(self) -> str | None:
        """The identity of the platform saved here; None while nothing was saved."""
        return self._get("identity")

    @property
    def origin(self) -> int | None:
        """The simulated time the platform started at; None while nothing was saved."""
        value = self._get("origin")
        return None if value is None else int(value)

    def check(self, identity: str) -> None:
        """Refuse state saved by another platform: its calls would replay into another history
        (other hosts, other jobs). Nothing is discarded without the user deciding so."""
        saved = self.identity
        if saved is not None and saved != identity:
            raise AdapterError(
                f"{self.path}: saved by another simulated platform (the platform file or one of "
                "its traces changed since). Put the platform back as it was to resume it, or "
                "move this file away to start the platform afresh: its jobs and reservations are "
                "then forgotten, and the bridge re-creates the placeholders it needs"
            )

    def claim(self, identity: str, origin: int) -> int:
        """The saved platform's start time after :meth:`check`; a new journal is given
        ``identity`` and ``origin`` first (read-only: an error)."""
        self.check(identity)
        saved = self.origin
        if saved is not None:
            return saved
        if self.readonly:
            raise AdapterError(f"{self.path}: no saved platform state here")
        with self._transaction():
            self._put("identity", identity)
            self._put("origin", str(origin))
        return origin

    # -- the calls ----------------------------------------------------------------------------

    def entries(self) -> Iterator[Entry]:
        """Every journaled call in order; a record that does not read back is an error."""
        rows = self._conn.execute("SELECT seq, at, call, outcome FROM calls ORDER BY seq")
        for seq, at, text, outcome in rows.fetchall():
            try:
                call = CALL.validate_json(text)
            except ValidationError as error:
                raise AdapterError(
                    f"{self.path}: call {seq} cannot be read: {describe(error)}"
                ) from error
            yield Entry(seq, at, call, outcome)

    def probe(self) -> None:
        """A write that changes nothing lasting (AdapterError if the journal takes none)."""
        try:
            with self._transaction():
                self._put("probe", "")
                self._conn.execute("DELETE FROM meta WHERE key = 'probe'")
        except sqlite3.Error as error:
            raise AdapterError(f"{self.path}: cannot write: {error}") from error

    def append(self, at: int, call: Call, outcome: str, anchor: Anchor | None = None) -> int:
        """Record ``call`` (and the clock's ``anchor``) durably; returns its number."""
        try:
            with self._transaction():
                cursor = self._conn.execute(
                    "INSERT INTO calls (at, call, outcome) VALUES (?, ?, ?)",
                    (at, CALL.dump_json(call).decode(), outcome),
                )
                if anchor is not None:
                    self._put("anchor", anchor.model_dump_json())
        except sqlite3.Error as error:
            raise AdapterError(f"{self.path}: cannot record a call: {error}") from error
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def last_time(self) -> int | None:
        """The simulated time of the last journaled call, if any."""
        row = self._conn.execute("SELECT at FROM calls ORDER BY seq DESC LIMIT 1").fetchone()
        return None if row is None else int(row[0])

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM calls").fetchone()[0])

    # -- the clock ----------------------------------------------------------------------------

    @property
    def anchor(self) -> Anchor | None:
        text = self._get("anchor")
        if text is None:
            return None
        try:
            return Anchor.model_validate_json(text)
        except ValidationError as error:
            raise AdapterError(f"{self.path}: anchor: {describe(error)}") from error

    def set_anchor(self, anchor: Anchor) -> None:
        """Record where the clock is, durably, before it is used."""
        try:
            with self._transaction():
                self._put("anchor", anchor.model_dump_json())
        except sqlite3.Error as error:
            raise AdapterError(f"{self.path}: cannot record the clock: {error}") from error

    def resume_time(self, wall: float) -> int | None:
        """The simulated time at wall-clock ``wall`` had the platform kept running since its
        anchor, and never before its start or its last call; None for a new journal."""
        known = [t for t in (self.origin, self.last_time()) if t is not None]
        anchor = self.anchor
        if anchor is not None:
            known.append(anchor.at(wall))
        return max(known) if known else None

    # -- life cycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the file and release the writer's lock (idempotent)."""
        self._conn.close()
        self._unlock()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            # SQLite has rolled back by itself after some failures (a full disk): the error
            # that says why is the one to raise, not ROLLBACK's "no transaction is active".
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _get(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _put(self, key: str, value: str) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None


def _lock(path: Path) -> int:
    """Take the journal's writer lock, or say who holds it."""
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as error:
        raise AdapterError(f"{lock}: cannot open: {error.strerror}") from error
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise AdapterError(
            f"{path} is in use: another coorm-bridge runs on the same state folder? (one "
            "simulated platform has one writer)"
        ) from None
    return fd
