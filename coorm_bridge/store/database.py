"""The SQLite file under the store: WAL mode, one writer connection, transactions, snapshot reads.

Apart from :mod:`coorm_bridge.store.store` (what is kept, and how it is queried) so that each
module says one thing: this one is about durability and concurrency.

Why these choices:

- stdlib ``sqlite3`` in WAL mode: one file, no server, atomic multi-row transactions, and readers
  (a CLI inspecting the state) never block the daemon's writer.
- ``synchronous=FULL`` by default: a commit returns once the WAL is fsynced, so an acknowledged
  write also survives a power cut. ``NORMAL`` still survives ``kill -9`` (the WAL is in the OS
  cache) but may lose the last commits on an OS crash; it is several times faster.
- One connection behind a re-entrant lock: the HTTP thread pool and the scheduler thread share
  it, and a transaction holds the lock until it ends, so no other thread sees or joins it.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Literal, Self

from coorm_bridge.store.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION

_BUSY_TIMEOUT_MS: Final = 10_000
#: ``PRAGMA auto_vacuum``: free pages are given back on ``incremental_vacuum`` (mode 2).
_INCREMENTAL: Final = "INCREMENTAL"
_INCREMENTAL_MODE: Final = 2
#: Pages freed per transaction by :meth:`Database.reclaim` (16 MB of 4 KB pages): a short hold of
#: the write lock each time.
_RECLAIM_PAGES: Final = 4096
#: The write-ahead log is cut back to this many bytes after each checkpoint that empties it
#: (SQLite otherwise keeps it at its largest).
_WAL_LIMIT: Final = 16 * 1024 * 1024
log = logging.getLogger(__name__)


def new_instance_id() -> str:
    """6 characters of lowercase base32 (30 random bits): short, since it goes into every
    reservation name, and valid wherever a name is."""
    return base64.b32encode(secrets.token_bytes(5)).decode("ascii").lower()[:6]


class StoreError(Exception):
    """The store cannot be used as asked (unreadable file, closed store, misuse)."""


class StoreFull(StoreError):
    """The store cannot be written: its disk (or its file's size limit) is full. Nothing of the
    transaction was written; the same writes succeed once space is freed."""


def _full(error: BaseException) -> bool:
    return (
        isinstance(error, sqlite3.OperationalError)
        and getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    )


class SchemaVersionError(StoreError):
    """The file was written by another version of coorm-bridge: refuse rather than corrupt it."""


def copy_path(path: Path, version: int, now: int) -> Path:
    """Where the copy kept before a migration goes: beside the store, its name saying which
    version it holds and when it was made (``bridge.sqlite.v2-1764180000.bak``)."""
    return path.with_name(f"{path.name}.v{version}-{now}.bak")


class Database:
    """The SQLite file: one writer connection, per-thread readers, transactions. Thread-safe;
    use as a context manager or ``close()``."""

    def __init__(
        self, path: Path | str, *, synchronous: Literal["FULL", "NORMAL"] = "FULL"
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        self.path = Path(path)
        self._lock = threading.RLock()
        self._depth = 0
        self._writer: int | None = None
        """The thread inside the transaction (``_depth`` > 0), for :attr:`in_transaction`."""
        self._staged: list[dict[Any, Any]] = []
        """Per open transaction level, what :meth:`_stage` kept: handed to :meth:`_committed`
        when the outermost block commits, dropped with the level that rolls back."""
        self._closed = False
        self._instance: str | None = None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        try:
            self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as error:
            raise StoreError(f"cannot open the store {self.path}: {error}") from error
        try:
            self._setup(synchronous)
        except sqlite3.Error as error:
            self._conn.close()
            raise StoreError(f"cannot use {self.path} as a store: {error}") from error
        except BaseException:
            self._conn.close()
            raise

    def _setup(self, synchronous: str) -> None:
        conn = self._conn
        conn.row_factory = sqlite3.Row
        # PRAGMAs cannot be bound parameters; these values are constants checked above.
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        if self._schema_version() is None:  # refuse before changing a file that may not be ours
            # Before WAL mode and the first table fix the file's header: a new store gives free
            # pages back incrementally from the start.
            conn.execute(f"PRAGMA auto_vacuum = {_INCREMENTAL}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal" and str(self.path) != ":memory:":
            raise StoreError(f"{self.path}: the file system refused WAL mode (got {mode!r})")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(f"PRAGMA journal_size_limit = {_WAL_LIMIT}")
        conn.execute("PRAGMA foreign_keys = ON")
        found = self._schema_version()
        if found == SCHEMA_VERSION:
            return  # opening a current store takes no write lock: the daemon may hold it
        if found is not None:
            self._migrate()
            self._incremental_vacuum()
            return
        with self.transaction():  # check again: another process may have created it meanwhile
            if self._schema_version() is None:
                for statement in SCHEMA:
                    conn.execute(statement)
                conn.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [
                        ("schema_version", str(SCHEMA_VERSION)),
                        ("last_ord", "0"),
                        ("instance", new_instance_id()),
                    ],
                )

    def _migrate(self) -> None:
        """Bring a store written by an older coorm-bridge to this version, in one transaction:
        tables are added, and superseded events coalesced as version 4 would have (what every
        launcher reads stays the same: :mod:`~coorm_bridge.store.compaction`). A copy of the old
        file is kept beside it first (an admin rolls back by putting it back), and the migration
        is refused if it cannot be written."""
        with self.transaction():  # the write lock: no other process migrates nor writes meanwhile
            version = self._schema_version()
            if version is None or version >= SCHEMA_VERSION:
                return  # another process brought it up to date first
            copy = self._keep_copy(version)
            log.info(
                "store %s: schema version %d -> %d, the version %d store kept as %s",
                self.path,
                version,
                SCHEMA_VERSION,
                version,
                copy,
            )
            while version < SCHEMA_VERSION:
                for step in MIGRATIONS[version]:
                    if isinstance(step, str):
                        self._conn.execute(step)
                    else:
                        step(self._conn)
                version += 1
                self._conn.execute(
                    "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),)
                )

    def _incremental_vacuum(self) -> None:
        """Switch a store made before version 4 to incremental vacuum: that takes a whole
        VACUUM once (it rewrites the file, which needs as much free space again). Refused (say
        the disk is full), the store still works and reuses its free pages, but gives none back
        to the file system (logged)."""
        if self._conn.execute("PRAGMA auto_vacuum").fetchone()[0] == _INCREMENTAL_MODE:
            return
        with self._lock:
            try:
                self._conn.execute(f"PRAGMA auto_vacuum = {_INCREMENTAL}")
                self._conn.execute("VACUUM")
            except sqlite3.Error as error:
                log.warning(
                    "store %s: not switched to incremental vacuum (%s): space freed by "
                    "deleted sessions is reused but not given back",
                    self.path,
                    error,
                )

    def reclaim(self, pages: int = _RECLAIM_PAGES) -> int:
        """Give free pages back to the file system, ``pages`` at a time (each in a short
        transaction of its own, so that passes and requests go on in between), then truncate
        the write-ahead log; returns how many pages were freed."""
        if pages < 1:
            raise ValueError(f"pages must be at least 1, got {pages}")
        freed = 0
        while True:
            with self.transaction():
                free = int(self._conn.execute("PRAGMA freelist_count").fetchone()[0])
                mode = int(self._conn.execute("PRAGMA auto_vacuum").fetchone()[0])
                if not free or mode != _INCREMENTAL_MODE:
                    break
                self._conn.execute(f"PRAGMA incremental_vacuum({int(pages)})").fetchall()
                freed += min(free, pages)
        with self._lock:
            if not self._closed and str(self.path) != ":memory:":
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return freed

    def size(self) -> int:
        """Bytes the store takes on disk: the file and its write-ahead log."""
        total = 0
        for path in (self.path, self.path.with_name(self.path.name + "-wal")):
            with contextlib.suppress(OSError):
                total += path.stat().st_size
        return total

    def _keep_copy(self, version: int) -> Path:
        """Copy the store with SQLite's online backup (a plain copy of a WAL file may miss its
        last commits): the copy is a whole, self-contained database or is not left at all."""
        copy = copy_path(self.path, version, int(time.time()))
        refused = f"{self.path}: not migrated from schema version {version} to {SCHEMA_VERSION}"
        if copy.exists() or copy.is_symlink():  # never overwrite what an admin may rely on
            raise StoreError(f"{refused}: its copy {copy} already exists")
        try:
            target = sqlite3.connect(copy)
        except sqlite3.Error as error:
            raise StoreError(f"{refused}: cannot write its copy {copy}: {error}") from error
        # Read through a connection of its own: SQLite refuses to back up from the connection
        # holding the write lock, while in WAL mode another one reads the last commit meanwhile.
        source = sqlite3.connect(self.path)
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode = DELETE")  # one file, whatever the store's mode
        except sqlite3.Error as error:
            target.close()
            with contextlib.suppress(OSError):
                copy.unlink()
            raise StoreError(f"{refused}: cannot write its copy {copy}: {error}") from error
        finally:
            source.close()
        target.close()
        return copy

    def _schema_version(self) -> int | None:
        """The file's schema version, None for an empty file; refuses a version it cannot read
        or bring up to date."""
        found = self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        tables = {row[0] for row in found}
        if "meta" not in tables:
            if tables:
                raise StoreError(f"{self.path} is not a coorm-bridge store (no meta table)")
            return None
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row and str(row[0]).isdigit() else 0
        if version != SCHEMA_VERSION and version not in MIGRATIONS:
            who = "a newer" if version > SCHEMA_VERSION else "an older"
            raise SchemaVersionError(
                f"{self.path} has schema version {version}, written by {who} coorm-bridge; this "
                f"one reads version {SCHEMA_VERSION} (and brings older ones up to it): run a "
                "matching coorm-bridge, or point the configuration at another database"
            )
        return version

    # -- life cycle and transactions ---------------------------------------------------------

    def close(self) -> None:
        """Close the file (idempotent); refused inside a transaction, which would be lost."""
        with self._lock:
            if self._depth:
                raise StoreError("cannot close the store inside a transaction")
            if not self._closed:
                self._closed = True
                self._conn.close()
                for reader in self._readers:
                    reader.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes atomically: all are committed when the outermost block exits, none if it
        raises. A nested block joins the outer transaction through a savepoint, so an exception
        it raises (and the caller catches) undoes its own writes only. Other threads wait for
        the end of the block, so keep it short and never wait in it for another thread's store
        call (a deadlock), nor for a batch system."""
        with self._lock:
            if self._closed:
                raise StoreError(f"the store {self.path} is closed")
            conn = self._conn
            if self._depth == 0:
                # IMMEDIATE takes the write lock now, not at the first write: no upgrade deadlock.
                conn.execute("BEGIN IMMEDIATE")
                self._depth, self._writer = 1, threading.get_ident()
                self._staged = [{}]
                try:
                    yield
                    conn.execute("COMMIT")
                    self._committed(self._staged[0])
                except BaseException as error:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    if _full(error):
                        raise StoreFull(
                            f"the store {self.path} cannot be written: {error}"
                        ) from error
                    raise
                finally:
                    self._depth, self._writer, self._staged = 0, None, []
            else:
                conn.execute("SAVEPOINT nested")
                self._depth += 1
                self._staged.append({})
                level = len(self._staged)
                try:
                    yield
                    conn.execute("RELEASE nested")
                    self._staged[level - 2].update(self._staged.pop())
                except BaseException as error:
                    del self._staged[level - 1 :]  # its writes are undone: their memory too
                    if conn.in_transaction:
                        conn.execute("ROLLBACK TO nested")
                        conn.execute("RELEASE nested")
                    elif not isinstance(error, StoreError):
                        # A full disk (and some I/O errors) rolled the whole transaction back:
                        # the outer block must not go on as if only this one failed.
                        kind = StoreFull if _full(error) else StoreError
                        message = f"the store {self.path} cannot be written: {error}"
                        raise kind(message) from error
                    raise
                finally:
                    self._depth -= 1

    def _stage(self, key: object, value: object) -> None:
        """Keep ``value`` under ``key`` until the transaction commits (then :meth:`_committed`
        gets it) or the level that wrote it rolls back (then it is forgotten): what a subclass
        keeps in memory follows the file, savepoints included."""
        assert self._depth > 0, "staged inside a transaction only"
        self._staged[-1][key] = value

    def _committed(self, staged: dict[Any, Any]) -> None:
        """What the committed transaction staged, in the order first staged (nothing here)."""

    @property
    def instance(self) -> str:
        """This bridge's id, made with the file: its reservations carry it, so that two bridges
        on one batch system never take each other's for orphans."""
        if self._instance is None:
            with self.transaction():
                found = self._read("SELECT value FROM meta WHERE key = 'instance'")
                if not found:  # a file made before instances had ids
                    self._conn.execute(
                        "INSERT INTO meta VALUES ('instance', ?)", (new_instance_id(),)
                    )
                    found = self._read("SELECT value FROM meta WHERE key = 'instance'")
            self._instance = str(found[0][0])
        return self._instance

    @property
    def in_transaction(self) -> bool:
        """Whether the calling thread is inside :meth:`transaction` (callers that are about to
        wait for a batch system assert it is not)."""
        return self._depth > 0 and self._writer == threading.get_ident()

    def _read(self, sql: str, parameters: Iterable[object] = ()) -> list[Any]:
        with self._lock:
            if self._closed:
                raise StoreError(f"the store {self.path} is closed")
            return self._conn.execute(sql, tuple(parameters)).fetchall()

    def _snapshot_read(self, sql: str, parameters: Iterable[object] = ()) -> list[Any]:
        """Read committed data on this thread's own connection: in WAL mode it neither waits for
        nor blocks the writer, so a thousand long polls never queue behind a policy pass."""
        if str(self.path) == ":memory:":
            return self._read(sql, parameters)
        reader: sqlite3.Connection | None = getattr(self._local, "reader", None)
        if reader is None:
            with self._lock:
                if self._closed:
                    raise StoreError(f"the store {self.path} is closed")
                reader = sqlite3.connect(self.path, check_same_thread=False)
                reader.execute("PRAGMA query_only = ON")
                self._readers.append(reader)
            self._local.reader = reader
        try:
            return reader.execute(sql, tuple(parameters)).fetchall()
        except sqlite3.ProgrammingError as error:  # closed under us by close()
            raise StoreError(f"the store {self.path} is closed") from error
