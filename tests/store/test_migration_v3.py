"""From schema version 3 (tests/data/store-v3.sqlite, written by tests/data/make_store_v3.py
with that release's code): the store is migrated in place, its copy kept; what version 3 kept of
a waiting session's moving view is coalesced so that every launcher, whatever it had read, gets
the same view as before; and the file is switched to incremental vacuum, so that space freed by
deleted sessions goes back to the file system."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from coorm_bridge.core.messages import Event
from coorm_bridge.core.model import Interconnect
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.selection import CurrentView
from coorm_bridge.store import SCHEMA_VERSION, Store
from coorm_bridge.store.schema import EVENTS

V3 = Path(__file__).parent.parent / "data" / "store-v3.sqlite"
#: make_store_v3.py's waiting session: 200 changes and one placement_failed.
WRITTEN = 201


@pytest.fixture
def path(tmp_path: Path) -> Path:
    copy = tmp_path / "bridge.sqlite"
    shutil.copyfile(V3, copy)
    return copy


def raw(path: Path, sql: str, *parameters: object) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        found = conn.execute(sql, parameters).fetchall()
    conn.close()
    return found


def ids(path: Path) -> dict[str, str]:
    return dict(raw(path, "SELECT name, id FROM sessions"))


def v3_events(session_id: str) -> list[Event]:
    rows = raw(V3, "SELECT body FROM events WHERE session_id = ? ORDER BY seq", session_id)
    return [EVENTS.validate_json(body) for (body,) in rows]


def launcher(events: list[Event], view: CurrentView | None = None) -> tuple:
    """What a launcher keeps of ``events``, applied in turn to ``view`` (a fresh one if None)."""
    view = view or CurrentView({}, Interconnect())
    estimate, retry = None, None
    for event in events:
        if event.type == "change":
            view.apply(event)
            estimate = event.estimated_start
        elif event.type == "placement_failed":
            retry = event.retry_at
    return view.caps, view.clusters, frozenset(view.interconnect.links), estimate, retry


def test_the_v3_file_is_what_the_previous_release_wrote():
    assert raw(V3, "SELECT value FROM meta WHERE key = 'schema_version'") == [("3",)]
    assert raw(V3, "PRAGMA auto_vacuum") == [(0,)]
    waiting = ids(V3)["waiting"]
    assert len(v3_events(waiting)) == WRITTEN


def test_a_v3_store_is_coalesced_and_every_launcher_keeps_its_view(path):
    waiting, done = ids(path)["waiting"], ids(path)["finished"]
    everything = v3_events(waiting)
    with Store(path) as store:
        kept = store.events(waiting)
        assert [e.type for e in kept] == ["placement_failed", "change"]
        assert store.last_seq(waiting) == WRITTEN  # the last number is kept: none reused
        assert launcher(kept) == launcher(everything)
        for read in range(WRITTEN + 1):  # a launcher that had read up to any number
            view = CurrentView({}, Interconnect())
            first = launcher(everything[:read], view)
            rest = launcher(store.events(waiting, after=read), view)
            merged = tuple(b if b is not None else a for a, b in zip(first, rest, strict=True))
            assert merged == launcher(everything), read
        assert store.events(done) == v3_events(done)  # an ended session's are left as they were
        assert store.session(waiting).state is AppState.WAITING
    assert raw(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [
        (str(SCHEMA_VERSION),)
    ]
    (copy,) = path.parent.glob("bridge.sqlite.v3-*.bak")
    assert raw(copy, "SELECT COUNT(*) FROM events") == raw(V3, "SELECT COUNT(*) FROM events")


def test_a_migrated_store_gives_freed_space_back(path):
    with Store(path) as store:
        assert store._read("PRAGMA auto_vacuum")[0][0] == 2  # incremental
        with store.transaction():
            session = store.sessions()[0]
            for _ in range(2000):
                event = {"type": "killed", "time": 1, "reason": "x" * 900}
                store.append_event(session.id, event)
        store.reclaim()
        big = store.size()
        with store.transaction():
            store._conn.execute("DELETE FROM sessions WHERE id = ?", (session.id,))
        assert store.reclaim() > 0
        assert store.size() < big / 4
    assert raw(path, "PRAGMA integrity_check") == [("ok",)]
