"""Drained clusters: what the store keeps of an admin's ``coorm-bridge drain``.

Apart from :mod:`coorm_bridge.store.store` (sessions, events, placeholders) because a drain
belongs to a cluster, not a session; kept in the store so that a restarted daemon still makes
no new placeholder there until an admin resumes it.
"""

from __future__ import annotations

from coorm_bridge.store.database import Database
from coorm_bridge.store.rows import DrainRow
from coorm_bridge.store.schema import to_sql


class DrainQueries(Database):
    """The store's drained table; :class:`~coorm_bridge.store.Store` has these methods."""

    def drain(self, row: DrainRow) -> DrainRow:
        """Record the drain (committed on return); a cluster drained already keeps its first
        record, which is returned."""
        with self.transaction():
            self._conn.execute(
                "INSERT OR IGNORE INTO drained VALUES (:cluster, :since, :by, :reason)",
                to_sql(row),
            )
            found = self._conn.execute(
                "SELECT * FROM drained WHERE cluster = ?", (row.cluster,)
            ).fetchone()
        return DrainRow.model_validate(dict(found))

    def resume(self, cluster: str) -> DrainRow | None:
        """Forget the cluster's drain (committed on return); the drain it had, None if none."""
        with self.transaction():
            found = self._conn.execute(
                "SELECT * FROM drained WHERE cluster = ?", (cluster,)
            ).fetchone()
            self._conn.execute("DELETE FROM drained WHERE cluster = ?", (cluster,))
        return None if found is None else DrainRow.model_validate(dict(found))

    def drained(self) -> dict[str, DrainRow]:
        """Every drained cluster, by name."""
        rows = self._read("SELECT * FROM drained ORDER BY cluster")
        return {row["cluster"]: DrainRow.model_validate(dict(row)) for row in rows}
