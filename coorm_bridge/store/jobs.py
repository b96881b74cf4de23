"""The jobs launchers submitted through the bridge's front end: what the store keeps of them.

Apart from :mod:`coorm_bridge.store.store` (sessions, events, placeholders) because jobs have
a life of their own (:mod:`coorm_bridge.service.jobs`): every step of it is written before the
next is asked of the batch system or the front end, so that after a crash the bridge knows
what may have happened and never runs a job twice.
"""

from __future__ import annotations

from typing import Any, Final

from coorm_bridge.store.database import Database
from coorm_bridge.store.rows import JobRow
from coorm_bridge.store.schema import job_row, to_sql

#: The columns a job's progress changes (the rest is fixed at submission).
_PROGRESS: Final = frozenset(
    {
        "step",
        "state",
        "cancel",
        "stop",
        "batch_job",
        "pid",
        "since",
        "exit_code",
        "signal",
        "reason",
        "started",
        "ended",
        "host_names",
    }
)


class JobQueries(Database):
    """The store's job table; :class:`~coorm_bridge.store.Store` has these methods."""

    def add_job(self, job: JobRow) -> JobRow:
        """Record a job just accepted; KeyError for an unknown session."""
        with self.transaction():
            if not self._read("SELECT 1 FROM sessions WHERE id = ?", (job.session_id,)):
                raise KeyError(job.session_id)
            columns = ", ".join(f":{name}" for name in JobRow.model_fields)
            names = ", ".join(JobRow.model_fields)
            self._conn.execute(f"INSERT INTO jobs ({names}) VALUES ({columns})", to_sql(job))  # noqa: S608 - the model's own field names
        return job

    def job(self, job_id: str) -> JobRow | None:
        rows = self._read("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return job_row(rows[0]) if rows else None

    def jobs(self, session_id: str) -> list[JobRow]:
        """A session's jobs, oldest first."""
        rows = self._read(
            "SELECT * FROM jobs WHERE session_id = ? ORDER BY created, rowid", (session_id,)
        )
        return [job_row(row) for row in rows]

    def job_count(self, session_id: str) -> int:
        return int(
            self._read("SELECT COUNT(*) FROM jobs WHERE session_id = ?", (session_id,))[0][0]
        )

    def unfinished_jobs(self) -> list[JobRow]:
        """Every job not ended yet, oldest first: the front end's work."""
        rows = self._read("SELECT * FROM jobs WHERE step != 'ended' ORDER BY created, rowid")
        return [job_row(row) for row in rows]

    def update_job(self, job_id: str, **changes: Any) -> JobRow:
        """Change a job's progress (the whole row validated first); KeyError if unknown."""
        unknown = set(changes) - _PROGRESS
        if unknown:
            raise ValueError(f"a job's {', '.join(sorted(unknown))} cannot change")
        with self.transaction():
            old = self.job(job_id)
            if old is None:
                raise KeyError(job_id)
            row = JobRow.model_validate({**dict(old), **changes})
            assignments = ", ".join(f"{name} = :{name}" for name in sorted(_PROGRESS))
            self._conn.execute(f"UPDATE jobs SET {assignments} WHERE id = :id", to_sql(row))  # noqa: S608 - constant column names
        return row
