"""From schema version 5: the jobs table takes a job outside reservations (an evolving
application's preemptible request's, API v2: ``reservation`` NULL); SQLite cannot drop a NOT
NULL, so the table is made again and its rows copied, whatever step each job was at."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from coorm_bridge.core.model import Filter
from coorm_bridge.store import SCHEMA_VERSION, JobCommand, JobRow, Store

#: The jobs table as version 5 made it.
V5_JOBS = """CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    cluster TEXT NOT NULL, name TEXT NOT NULL, command TEXT NOT NULL,
    walltime INTEGER NOT NULL, reservation TEXT NOT NULL, host_names TEXT NOT NULL,
    step TEXT NOT NULL, state TEXT NOT NULL, cancel INTEGER NOT NULL, stop TEXT,
    batch_job TEXT, pid INTEGER, since INTEGER, exit_code INTEGER, signal INTEGER,
    reason TEXT, created INTEGER NOT NULL, started INTEGER, ended INTEGER)"""


def job(session_id: str, job_id: str, reservation: str | None) -> JobRow:
    return JobRow(
        id=job_id,
        session_id=session_id,
        cluster="c1",
        name="task",
        command=JobCommand(argv=("true",), workdir="/tmp", stdout="/tmp/o", stderr="/tmp/e"),
        walltime=60,
        reservation=reservation,
        host_names=("c1-0",),
        created=100,
    )


def test_a_version_5_store_takes_jobs_outside_reservations_and_keeps_its_jobs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bridge.sqlite"
    with Store(path) as store:
        sid = store.create_session("alice", None, Filter(), ("c1",), 100).id
        store.add_job(job(sid, "j1", "coorm-r1"))
        store.update_job("j1", step="submitting")
        kept = store.job("j1")
    # As version 5 left it: the same rows, under its NOT NULL.
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("ALTER TABLE jobs RENAME TO jobs_now")
        conn.execute(V5_JOBS)
        conn.execute("INSERT INTO jobs SELECT * FROM jobs_now")
        conn.execute("DROP TABLE jobs_now")
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    with pytest.raises(sqlite3.IntegrityError), conn:
        conn.execute("UPDATE jobs SET reservation = NULL")  # what version 5 could not take
    conn.close()
    with Store(path) as store:
        assert store.job("j1") == kept
        store.add_job(job(sid, "j2", None))
        assert [j.reservation for j in store.jobs(sid)] == ["coorm-r1", None]
        assert [j.id for j in store.unfinished_jobs()] == ["j1", "j2"]
    with sqlite3.connect(path) as conn:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(jobs)")}
    conn.close()
    assert version == (str(SCHEMA_VERSION),)
    assert {"jobs_by_session", "jobs_by_step"} <= indexes
