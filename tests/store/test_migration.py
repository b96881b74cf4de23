"""Upgrades keep state: a store written by the previous release (schema version 2, made by
tests/data/make_store_v2.py with that release's code) is brought up to date in place, with a
copy of the old file kept beside it, and reads back what the old code wrote."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.store import SCHEMA_VERSION, PlaceholderStatus, Store, StoreError, database

V2 = Path(__file__).parent.parent / "data" / "store-v2.sqlite"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """The v2 store, copied where a daemon keeps it."""
    copy = tmp_path / "bridge.sqlite"
    shutil.copyfile(V2, copy)
    return copy


def version(path: Path) -> int:
    with sqlite3.connect(path) as raw:
        found = raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    raw.close()
    return int(found[0])


def copies(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.v*.bak"))


def test_the_v2_file_is_what_the_previous_release_wrote():
    assert version(V2) == 2 < SCHEMA_VERSION


def test_a_v2_store_reads_back_every_session_event_placeholder_and_job(path):
    with Store(path) as store:
        waiting, started, done = store.sessions()
        assert [s.name for s in (waiting, started, done)] == ["waiting", "started", "finished"]
        assert [s.order for s in (waiting, started, done)] == [1, 2, 3]
        assert (waiting.owner, waiting.state, waiting.clusters) == (
            "alice",
            AppState.WAITING,
            ("c1", "c2"),
        )
        assert waiting.request == Request(nodes={"c1": 2}, duration=600)
        assert (waiting.estimated_start, waiting.created, waiting.updated) == (5000, 1000, 1020)
        assert (started.owner, started.state, started.filter) == (
            "bob",
            AppState.STARTED,
            Filter(min_hosts=2),
        )
        assert started.request == Request(nodes={"c1": 2, "c2": 1}, duration=3600)
        assert (started.started_at, started.alloc_end) == (1200, 4800)
        assert (done.state, done.started_at, done.done_at) == (AppState.FINISHED, 1430, 1500)

        assert [(e.seq, e.type, e.time) for e in store.events(waiting.id)] == [(1, "change", 1020)]
        (start,) = store.events(started.id)
        assert start.type == "start"
        assert start.end == 4800
        assert start.allocations["c1"].hosts == ["c1-0", "c1-1"]
        assert start.allocations["c2"].reservation == f"coorm-{started.id}-c2"
        ended = store.events(done.id)
        assert [(e.seq, e.type) for e in ended] == [(1, "killed"), (2, "ended")]
        assert ended[0].reason == "walltime"
        assert ended[1].state is AppState.FINISHED

        held = store.placeholders(started.id)
        assert [(p.cluster, p.name, p.hosts, p.host_names) for p in held] == [
            ("c1", f"coorm-{started.id}-c1", 2, ("c1-0", "c1-1")),
            ("c2", f"coorm-{started.id}-c2", 1, ("c2-0",)),
        ]
        assert {(p.start, p.end, p.status) for p in held} == {(1200, 4800, PlaceholderStatus.HELD)}
        assert store.placeholders(waiting.id) == store.placeholders(done.id) == []

        (job,) = store.jobs(started.id)
        assert (job.id, job.name, job.cluster, job.walltime) == (
            "solverjob001",
            "solver",
            "c1",
            600,
        )
        assert job.command.argv == ("/bin/sleep", "60")
        assert job.command.environment == {"OMP_NUM_THREADS": "4"}
        assert (job.step, job.state, job.exit_code, job.created, job.ended) == (
            "ended",
            "completed",
            0,
            1210,
            1300,
        )
        assert store.drained() == {}  # what schema 3 added, empty
        later = store.create_session("carol", "new", Filter(), ("c1",), now=2000)
        assert later.order == 4  # the order goes on from the old store's
    assert version(path) == SCHEMA_VERSION


def test_the_old_store_is_kept_beside_it_once(path, caplog):
    with sqlite3.connect(path) as raw:
        before = raw.execute("SELECT id, owner, state FROM sessions ORDER BY ord").fetchall()
    raw.close()
    with caplog.at_level("INFO", logger="coorm_bridge.store"), Store(path):
        pass
    (copy,) = copies(path)
    assert copy.name.startswith("bridge.sqlite.v2-")
    (record,) = [r for r in caplog.records if str(copy) in r.getMessage()]
    assert f"2 -> {SCHEMA_VERSION}" in record.getMessage()
    assert record.levelname == "INFO"
    assert version(copy) == 2
    with sqlite3.connect(copy) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert (
            raw.execute("SELECT id, owner, state FROM sessions ORDER BY ord").fetchall() == before
        )
        assert raw.execute("SELECT COUNT(*) FROM jobs").fetchone() == (1,)
    raw.close()
    with Store(path) as again:  # current now: no second copy
        assert len(again.sessions()) == 3
    assert copies(path) == [copy]


def test_a_store_whose_copy_cannot_be_written_is_not_migrated(path, monkeypatch):
    """Refused, naming where the copy should have gone, and left as the old release wrote it
    (a directory in the copy's place holds for root too, whom file modes do not stop)."""
    blocked = path.with_name("blocked.bak")
    (blocked / "inside").mkdir(parents=True)
    monkeypatch.setattr(database, "copy_path", lambda *_: blocked / "inside" / "x" / "y.bak")
    with pytest.raises(StoreError, match=f"cannot write its copy {blocked}"):
        Store(path)
    assert version(path) == 2
    monkeypatch.setattr(database, "copy_path", lambda *_: blocked)
    with pytest.raises(StoreError, match=f"its copy {blocked} already exists"):
        Store(path)
    assert version(path) == 2
    monkeypatch.undo()
    with Store(path) as store:  # once the copy can be written, it is migrated
        assert len(store.sessions()) == 3
    assert version(path) == SCHEMA_VERSION
