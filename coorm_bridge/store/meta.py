"""Small values the daemon keeps between runs in the store's ``meta`` table (key, text).

Apart from :mod:`coorm_bridge.store.store` because they belong to the daemon, not a session:
the clusters' properties as last read, say, so that a daemon whose batch system does not answer
at start still serves what it knew (:mod:`coorm_bridge.service.catalogue`).
"""

from __future__ import annotations

from typing import Final

from coorm_bridge.store.database import Database

#: Keys the store itself uses: never written through :meth:`MetaQueries.put_meta`.
_RESERVED: Final = frozenset({"schema_version", "instance", "last_ord"})


class MetaQueries(Database):
    """The store's meta table; :class:`~coorm_bridge.store.Store` has these methods."""

    def meta(self, key: str) -> str | None:
        """The value kept under ``key``, None when there is none."""
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return None if not rows else str(rows[0][0])

    def put_meta(self, key: str, value: str) -> None:
        """Keep ``value`` under ``key`` (committed on return)."""
        if key in _RESERVED:
            raise ValueError(f"meta key {key!r} is the store's own")
        with self.transaction():
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
