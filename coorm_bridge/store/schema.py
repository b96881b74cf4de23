"""The store's SQL side: the schema, and rows to and from their columns (JSON for nested values).

Apart from :mod:`coorm_bridge.store` so that the store's module is about transactions and
queries; nothing else should need these.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable
from typing import Any, Final

from pydantic import TypeAdapter

from coorm_bridge.core.messages import Event
from coorm_bridge.store.compaction import coalesce_all
from coorm_bridge.store.rows import DrainRow, JobRow, PlaceholderRow, SessionRow

#: Bump on any schema change, with a migration from the previous version.
SCHEMA_VERSION: Final = 6
EVENTS: TypeAdapter[Event] = TypeAdapter(Event)

_JOBS_COLUMNS: Final = """(
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        cluster TEXT NOT NULL, name TEXT NOT NULL, command TEXT NOT NULL,
        walltime INTEGER NOT NULL, reservation TEXT, host_names TEXT NOT NULL,
        step TEXT NOT NULL, state TEXT NOT NULL, cancel INTEGER NOT NULL, stop TEXT,
        batch_job TEXT, pid INTEGER, since INTEGER, exit_code INTEGER, signal INTEGER,
        reason TEXT, created INTEGER NOT NULL, started INTEGER, ended INTEGER)"""
_JOBS_INDEXES: Final = (
    "CREATE INDEX jobs_by_session ON jobs (session_id, created)",
    "CREATE INDEX jobs_by_step ON jobs (step)",
)
JOBS: Final = (f"CREATE TABLE jobs {_JOBS_COLUMNS}", *_JOBS_INDEXES)
#: Clusters an admin drained (``coorm-bridge drain``): no new placeholder is made there until
#: resumed, and a restart keeps it so. IF NOT EXISTS: a store of version 1 gets it too.
DRAINS: Final = (
    """CREATE TABLE IF NOT EXISTS drained (
        cluster TEXT PRIMARY KEY, since INTEGER NOT NULL, by TEXT NOT NULL, reason TEXT)""",
)


def _coalesced(conn: sqlite3.Connection) -> None:
    coalesce_all(conn)


#: Version 4 coalesces superseded events as they are appended (:mod:`.compaction`), and reclaims
#: free pages (``auto_vacuum = INCREMENTAL``, which an existing file takes with a VACUUM once:
#: :class:`~coorm_bridge.store.database.Database` runs it after the migration). What version 3
#: left is coalesced here, each session as if it had been so from the start.
COALESCE: Final = (_coalesced,)

#: What brings a store of each older version to the next one (applied in one transaction).
#: A step of a migration: a statement, or a function of the connection for what SQL alone
#: cannot say.
Step = str | Callable[[sqlite3.Connection], None]
#: Version 5 adds evolving applications (API v2): a session may be one (``evolving``), and each
#: of its typed requests is a row of its own below it (``parent``, ``typed``).
_EVOLVING_COLUMNS: Final = {
    "parent": "TEXT REFERENCES sessions(id) ON DELETE CASCADE",
    "evolving": "INTEGER NOT NULL DEFAULT 0",
    "typed": "TEXT",
}


def _evolving(conn: sqlite3.Connection) -> None:
    """The columns the sessions table lacks (a store written by any older version)."""
    have = {str(row[1]) for row in conn.execute("PRAGMA table_info(sessions)")}
    for name, kind in _EVOLVING_COLUMNS.items():
        if name not in have:
            conn.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
    conn.execute(
        "CREATE INDEX IF NOT EXISTS sessions_by_parent ON sessions (parent) "
        "WHERE parent IS NOT NULL"
    )


EVOLVING: Final = (_evolving,)
#: Version 6: a job may run outside reservations (``reservation`` NULL: an evolving
#: application's preemptible request's, API v2). SQLite cannot drop a NOT NULL: the table is
#: made again, its rows copied (the columns are the same, in the same order).
NULLABLE_RESERVATION: Final = (
    f"CREATE TABLE jobs_v6 {_JOBS_COLUMNS}",
    "INSERT INTO jobs_v6 SELECT * FROM jobs",
    "DROP TABLE jobs",
    "ALTER TABLE jobs_v6 RENAME TO jobs",
    *_JOBS_INDEXES,
)
MIGRATIONS: Final[dict[int, tuple[Step, ...]]] = {
    1: JOBS,
    2: DRAINS,
    3: COALESCE,
    4: EVOLVING,
    5: NULLABLE_RESERVATION,
}

SCHEMA: Final = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY, ord INTEGER UNIQUE NOT NULL, owner TEXT NOT NULL, name TEXT,
        filter TEXT NOT NULL, clusters TEXT NOT NULL, state TEXT NOT NULL, request TEXT,
        estimated_start INTEGER, started_at INTEGER, done_at INTEGER, alloc_end INTEGER,
        created INTEGER NOT NULL, updated INTEGER NOT NULL, parent TEXT REFERENCES
        sessions(id) ON DELETE CASCADE, evolving INTEGER NOT NULL DEFAULT 0, typed TEXT)""",
    "CREATE INDEX sessions_by_parent ON sessions (parent) WHERE parent IS NOT NULL",
    """CREATE TABLE events (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL, time INTEGER NOT NULL, type TEXT NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (session_id, seq))""",
    """CREATE TABLE placeholders (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        cluster TEXT NOT NULL, name TEXT UNIQUE NOT NULL, start INTEGER NOT NULL,
        end INTEGER NOT NULL, hosts INTEGER NOT NULL, host_names TEXT NOT NULL,
        status TEXT NOT NULL, PRIMARY KEY (session_id, cluster))""",
    *JOBS,
    *DRAINS,
)


JSON_COLUMNS: Final = frozenset({"filter", "clusters", "request", "host_names", "command", "typed"})


def to_sql(row: SessionRow | PlaceholderRow | JobRow | DrainRow) -> dict[str, object]:
    """The row's columns as named parameters: nested values as JSON text, enums as strings."""
    data = row.model_dump(mode="json")
    return {k: json.dumps(v) if k in JSON_COLUMNS and v is not None else v for k, v in data.items()}


def from_sql(row: sqlite3.Row) -> dict[str, Any]:
    data = dict(row)
    for key in JSON_COLUMNS.intersection(data):
        if data[key] is not None:
            data[key] = json.loads(data[key])
    return data


def session_row(row: sqlite3.Row) -> SessionRow:
    return _parsed_session(tuple(row.keys()), tuple(row))


@functools.lru_cache(maxsize=1 << 14)
def _parsed_session(columns: tuple[str, ...], values: tuple[Any, ...]) -> SessionRow:
    """Parsing and validating a row costs far more than reading it, and every policy pass reads
    every active session: the same column values give the same (immutable) row object."""
    data = dict(zip(columns, values, strict=True))
    for key in JSON_COLUMNS.intersection(data):
        if data[key] is not None:
            data[key] = json.loads(data[key])
    data["order"] = data.pop("ord")
    data["evolving"] = bool(data.get("evolving"))
    return SessionRow.model_validate(data)


def placeholder_row(row: sqlite3.Row) -> PlaceholderRow:
    return PlaceholderRow.model_validate(from_sql(row))


def job_row(row: sqlite3.Row) -> JobRow:
    return JobRow.model_validate(from_sql(row))
