"""The persistent store: round trips, atomicity, numbering, and survival of ``kill -9``."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from coorm_bridge.core.messages import ChangeEvent, EndedEvent, KilledEvent
from coorm_bridge.core.model import MAX_TIME, NAME_PATTERN, USER_NAME_PATTERN, Filter, Request
from coorm_bridge.core.policy import Application, Policy
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import ACTIVE, AppState
from coorm_bridge.service.passes import application_of
from coorm_bridge.store import (
    SCHEMA_VERSION,
    DrainRow,
    JobCommand,
    JobRow,
    PlaceholderRow,
    PlaceholderStatus,
    SchemaVersionError,
    SessionRow,
    Store,
    StoreError,
    new_job_id,
    new_session_id,
)
from tests.profiles import fewer

SETTINGS = settings(  # each example writes a database file of its own
    max_examples=fewer(40), suppress_health_check=[HealthCheck.function_scoped_fixture]
)
CLUSTERS = ("c1", "c2", "c3")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "bridge.db"


@pytest.fixture
def store(path: Path):
    with Store(path) as opened:
        yield opened


def new(store: Store, owner: str = "alice", clusters=CLUSTERS, now: int = 100) -> SessionRow:
    return store.create_session(owner, "run", Filter(), clusters, now)


def started(store: Store, row: SessionRow, request: Request, now: int, **fields) -> SessionRow:
    """Set-up through the transitions the state machine allows, up to STARTED."""
    store.update_session(row.id, now=now, state=AppState.REQUEST_SENT, request=request)
    store.update_session(row.id, now=now, state=AppState.WAITING)
    return store.update_session(row.id, now=now, state=AppState.STARTED, **fields)


def finished(store: Store, row: SessionRow, now: int) -> SessionRow:
    request = Request(nodes={"c1": 1}, duration=10)
    started(store, row, request, now, started_at=now)
    return store.update_session(row.id, now=now, state=AppState.FINISHED)


def killed(time: int = 1) -> dict[str, object]:
    return {"type": "killed", "time": time, "reason": "walltime"}


def placeholder(session: SessionRow, cluster: str = "c1", **fields) -> PlaceholderRow:
    values = {"name": f"coorm-{session.id}-{cluster}", "start": 10, "end": 20, "hosts": 2}
    return PlaceholderRow(session_id=session.id, cluster=cluster, **(values | fields))


# -- sessions -----------------------------------------------------------------------------------

filters = st.builds(
    Filter,
    clusters=st.none() | st.lists(st.sampled_from(CLUSTERS), unique=True).map(tuple),
    min_hosts=st.integers(0, 10**6),
    min_ram_per_host_mib=st.integers(0, 10**9),
)
requests = st.builds(
    Request,
    nodes=st.dictionaries(st.sampled_from(CLUSTERS), st.integers(1, 10**5), min_size=1),
    duration=st.integers(1, 10**8),
)
times = st.integers(0, MAX_TIME)


@SETTINGS
@given(
    owner=st.from_regex(NAME_PATTERN, fullmatch=True).filter(USER_NAME_PATTERN.fullmatch),
    name=st.none() | st.text(max_size=256),
    filter=filters,
    request=requests,
    stamps=st.tuples(times, times, times, times),
)
def test_sessions_round_trip_every_field(store, path, owner, name, filter, request, stamps):
    created = store.create_session(owner, name, filter, CLUSTERS, now=stamps[0])
    estimated, started_at, end, now = stamps
    updated = started(
        store,
        created,
        request,
        now,
        estimated_start=estimated,
        started_at=started_at,
        alloc_end=end,
    )
    assert store.session(created.id) == updated
    with Store(path) as other:  # through the file, not a cache
        assert other.session(created.id) == updated
    assert (updated.owner, updated.name, updated.filter, updated.request) == (
        owner,
        name,
        filter,
        request,
    )
    assert (updated.estimated_start, updated.started_at, updated.alloc_end) == stamps[:3]
    assert (updated.created, updated.updated) == (stamps[0], now)


def test_new_sessions_are_submitted_with_valid_unique_ids(store):
    rows = [new(store) for _ in range(50)]
    assert {row.state for row in rows} == {AppState.SUBMITTED}
    assert len({row.id for row in rows}) == 50
    ids = [new_session_id() for _ in range(2000)]
    assert len(set(ids)) == 2000
    assert all(NAME_PATTERN.fullmatch(i) and i == i.lower() for i in ids)


def test_order_strictly_increases_and_is_never_reused_after_purge(store, path):
    first = [new(store) for _ in range(3)]
    assert [row.order for row in first] == [1, 2, 3]
    for row in first[1:]:  # purge the newest: a reused counter would hand out 2 and 3 again
        store.update_session(row.id, now=100, state=AppState.CANCELLED)
    assert store.purge_finished(before=200) == 2
    later = new(store)
    assert later.order == 4
    with Store(path) as reopened:
        assert new(reopened).order == 5
        assert [row.order for row in reopened.sessions()] == [1, 4, 5]


def test_update_changes_only_the_given_fields_and_can_write_none(store):
    row = new(store)
    request = Request(nodes={"c1": 4}, duration=60)
    sent = store.update_session(
        row.id, now=110, state=AppState.REQUEST_SENT, request=request, estimated_start=500
    )
    waiting = store.update_session(row.id, now=120, state=AppState.WAITING)
    assert waiting == sent.model_copy(update={"state": AppState.WAITING, "updated": 120})
    never = store.update_session(row.id, now=130, estimated_start=None)
    assert never.estimated_start is None
    assert store.session(row.id) == never
    assert never.request == request
    assert never.state is AppState.WAITING


def test_inconsistent_updates_are_refused_and_write_nothing(store):
    row = new(store, clusters=("c1",))
    with pytest.raises(ValidationError, match="has a request"):
        store.update_session(row.id, now=200, state=AppState.WAITING)
    with pytest.raises(ValidationError, match="outside the view"):
        store.update_session(
            row.id,
            now=200,
            state=AppState.REQUEST_SENT,
            request=Request(nodes={"c2": 1}, duration=5),
        )
    with pytest.raises(ValidationError):
        store.update_session(row.id, now=-1)
    assert store.session(row.id) == row


def test_unknown_ids_raise_key_error(store):
    row = new(store)
    assert store.session("nope") is None
    assert store.placeholder(row.id, "c1") is None
    for call in (
        lambda: store.update_session("nope", now=1, estimated_start=None),
        lambda: store.append_event("nope", killed()),
        lambda: store.events("nope"),
        lambda: store.last_seq("nope"),
        lambda: store.placeholders("nope"),
        lambda: store.put_placeholder(placeholder(row).model_copy(update={"session_id": "no"})),
        lambda: store.delete_placeholder(row.id, "c1"),
    ):
        with pytest.raises(KeyError):
            call()


def test_sessions_filter_by_owner_and_state_in_subscription_order(store):
    a1, b1, a2 = new(store, "alice"), new(store, "bob"), new(store, "alice")
    store.update_session(a1.id, now=101, state=AppState.CANCELLED)
    assert [row.id for row in store.sessions()] == [a1.id, b1.id, a2.id]
    assert [row.id for row in store.sessions(owner="alice")] == [a1.id, a2.id]
    assert [row.id for row in store.sessions(states=[AppState.CANCELLED])] == [a1.id]
    assert store.sessions(owner="alice", states=[]) == []
    assert store.sessions(owner="carol") == []


def test_active_applications_feed_the_policy(store):
    rows = [new(store) for _ in range(4)]
    request = Request(nodes={"c1": 2}, duration=50)
    finished(store, rows[0], now=101)
    store.update_session(rows[2].id, now=101, state=AppState.REQUEST_SENT, request=request)
    store.update_session(rows[3].id, now=101, state=AppState.CANCELLED)
    apps = [application_of(row) for row in store.sessions(states=ACTIVE)]
    assert [app.id for app in apps] == [rows[1].id, rows[2].id]
    assert all(isinstance(app, Application) for app in apps)
    free = {name: Profile.constant(4) for name in CLUSTERS}
    result = Policy().plan(free, apps, now=200)
    assert result.to_start == (rows[2].id,)


# -- events -------------------------------------------------------------------------------------


def test_events_are_numbered_per_session_from_one(store):
    a, b = new(store), new(store)
    assert (store.last_seq(a.id), store.events(a.id)) == (0, [])
    appended = [store.append_event(a.id, killed(t)) for t in range(5)]
    other = store.append_event(b.id, {"type": "change", "time": 9, "changes": []})
    assert [event.seq for event in appended] == [1, 2, 3, 4, 5]
    assert isinstance(other, ChangeEvent)
    assert other.seq == 1
    assert store.events(a.id) == appended
    assert isinstance(appended[0], KilledEvent)
    assert (store.last_seq(a.id), store.last_seq(b.id)) == (5, 1)


@SETTINGS
@given(count=st.integers(0, 30), after=st.integers(0, 40), limit=st.integers(1, 40))
def test_events_after_and_limit(store, count, after, limit):
    row = new(store)
    for t in range(count):
        store.append_event(row.id, killed(t))
    got = store.events(row.id, after=after, limit=limit)
    assert [event.seq for event in got] == list(range(after + 1, min(count, after + limit) + 1))


def test_refused_events_write_nothing(store):
    row = new(store)
    store.append_event(row.id, killed())
    with pytest.raises(ValueError, match="without 'seq'"):
        store.append_event(row.id, {**killed(), "seq": 7})
    with pytest.raises(ValidationError):
        store.append_event(row.id, {"type": "start", "time": 3})
    with pytest.raises(ValidationError):
        store.append_event(row.id, {"type": "nonsense", "time": 3})
    with pytest.raises(ValueError, match="limit"):
        store.events(row.id, limit=0)
    assert store.last_seq(row.id) == 1
    ended = store.append_event(row.id, {"type": "ended", "time": 4, "state": "finished"})
    assert isinstance(ended, EndedEvent)
    with pytest.raises(ValueError, match="ended"):
        store.append_event(row.id, killed(5))
    assert store.last_seq(row.id) == 2


# -- placeholders -------------------------------------------------------------------------------


def test_placeholders_round_trip_upsert_and_delete(store, path):
    a, b = new(store), new(store)
    rows = [placeholder(b, "c2"), placeholder(a, "c3"), placeholder(a, "c1")]
    for row in rows:
        store.put_placeholder(row)
    assert store.placeholders() == [rows[2], rows[1], rows[0]]  # subscription order, cluster
    held = rows[2].model_copy(update={"status": PlaceholderStatus.HELD, "host_names": ("n1", "n2")})
    store.put_placeholder(held)
    with Store(path) as other:
        assert other.placeholder(a.id, "c1") == held
        assert other.placeholders(a.id) == [held, rows[1]]
    store.delete_placeholder(a.id, "c1")
    assert store.placeholder(a.id, "c1") is None
    assert store.placeholders(a.id) == [rows[1]]


def test_placeholders_refuse_what_cannot_be_meant(store):
    a, b = new(store, clusters=("c1", "c2")), new(store)
    store.put_placeholder(placeholder(a, name="shared"))
    with pytest.raises(ValueError, match="already belongs"):
        store.put_placeholder(placeholder(b, name="shared"))
    with pytest.raises(ValueError, match="does not see"):
        store.put_placeholder(placeholder(a, "c3"))
    with pytest.raises(ValidationError, match="after its start"):
        placeholder(a, start=20, end=20)
    with pytest.raises(ValidationError, match="distinct"):
        placeholder(a, host_names=("n1", "n1"))
    with pytest.raises(ValidationError):
        placeholder(a, name="bad name; rm -rf /")
    assert [row.name for row in store.placeholders()] == ["shared"]


def test_a_ghost_placeholder_is_handed_over_in_one_transaction(store):
    ghost, heir = new(store), new(store)
    old = placeholder(ghost, name="keep-me", status=PlaceholderStatus.GHOST)
    store.put_placeholder(old)
    with store.transaction():
        store.delete_placeholder(ghost.id, "c1")
        store.put_placeholder(placeholder(heir, name="keep-me", end=99))
    assert [(row.session_id, row.name, row.end) for row in store.placeholders()] == [
        (heir.id, "keep-me", 99)
    ]


def test_purge_takes_events_along_and_keeps_sessions_still_holding_placeholders(store):
    done, running, recent, unreleased = new(store), new(store), new(store), new(store)
    for row in (done, running, recent, unreleased):
        store.append_event(row.id, killed())
        store.put_placeholder(placeholder(row))
    store.delete_placeholder(done.id, "c1")
    finished(store, done, now=150)
    finished(store, unreleased, now=150)
    store.update_session(recent.id, now=300, state=AppState.CANCELLED)
    assert store.purge_finished(before=200) == 1
    assert store.session(done.id) is None
    assert [row.id for row in store.sessions()] == [running.id, recent.id, unreleased.id]
    # A placeholder not yet deleted in its batch system must stay known to reconciliation.
    assert {row.session_id for row in store.placeholders()} == {
        running.id,
        recent.id,
        unreleased.id,
    }
    with sqlite3.connect(store.path) as raw:
        orphans = raw.execute("SELECT COUNT(*) FROM events WHERE session_id = ?", (done.id,))
        assert orphans.fetchone() == (0,)


# -- transactions -------------------------------------------------------------------------------


class Boom(Exception):
    pass


def raise_in_transaction(store: Store, writes) -> None:
    """Run ``writes()`` in a transaction that then fails."""
    with store.transaction():
        writes()
        raise Boom


def test_a_failed_transaction_leaves_no_partial_write(store, path):
    kept = new(store)

    def writes() -> None:
        row = new(store)
        store.append_event(row.id, killed())
        store.append_event(kept.id, killed())
        store.put_placeholder(placeholder(row))
        store.update_session(kept.id, now=500, estimated_start=None)

    with pytest.raises(Boom):
        raise_in_transaction(store, writes)
    with Store(path) as other:
        for view in (store, other):
            assert view.sessions() == [kept]
            assert view.last_seq(kept.id) == 0
            assert view.placeholders() == []


def test_nested_transactions_join_the_outer_one(store, path):
    with store.transaction():
        outer = new(store)
        with store.transaction():
            inner = new(store)
        with Store(path) as other:  # nothing is visible before the outermost commit
            assert other.sessions() == []
        with pytest.raises(Boom):  # caught: undoes only its own block
            raise_in_transaction(store, lambda: store.append_event(outer.id, killed()))
        store.append_event(inner.id, killed())
    with Store(path) as other:
        assert [row.id for row in other.sessions()] == [outer.id, inner.id]
        assert (other.last_seq(outer.id), other.last_seq(inner.id)) == (0, 1)

    def finished_inner_block() -> None:
        with store.transaction():
            new(store)

    with pytest.raises(Boom):  # the inner block had finished: it goes too
        raise_in_transaction(store, finished_inner_block)
    assert len(store.sessions()) == 2


def test_other_threads_wait_for_a_transaction_to_end(store):
    seen: list[int] = []
    with store.transaction():
        new(store)
        reader = threading.Thread(target=lambda: seen.append(len(store.sessions())))
        reader.start()
        reader.join(timeout=0.2)
        assert reader.is_alive()  # blocked on the lock, not reading a half-done state
        new(store)
    reader.join(timeout=5)
    assert seen == [2]


def test_concurrent_appends_are_unique_and_gapless(store):
    own = [new(store) for _ in range(4)]
    shared = new(store)
    returned: dict[str, list[int]] = {row.id: [] for row in [*own, shared]}
    lock = threading.Lock()

    def work(session: SessionRow) -> None:
        for t in range(40):
            for target in (session, shared):
                seq = store.append_event(target.id, killed(t)).seq
                with lock:
                    returned[target.id].append(seq)

    threads = [threading.Thread(target=work, args=(row,)) for row in own]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for session_id, seqs in returned.items():
        expected = list(range(1, len(seqs) + 1))
        assert sorted(seqs) == expected
        assert [event.seq for event in store.events(session_id)] == expected
    assert len(returned[shared.id]) == 160


# -- the file -----------------------------------------------------------------------------------


def test_reopen_finds_everything_in_wal_mode(path):
    with Store(path, synchronous="NORMAL") as first:
        row = new(first)
        first.append_event(row.id, killed())
        first.put_placeholder(placeholder(row))
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    with Store(path) as second:
        assert second.sessions() == [row]
        assert [event.seq for event in second.events(row.id)] == [1]
        assert second.placeholders() == [placeholder(row)]
    with pytest.raises(StoreError, match="closed"):
        second.sessions()
    second.close()  # idempotent


def test_a_newer_schema_is_refused_by_name(path):
    Store(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(SchemaVersionError) as caught:
        Store(path)
    message = str(caught.value)
    assert str(path) in message
    assert "999" in message
    assert f"version {SCHEMA_VERSION}" in message


def test_files_that_are_not_stores_are_refused(tmp_path):
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as raw:
        raw.execute("CREATE TABLE jobs (id INTEGER)")
    with pytest.raises(StoreError, match="not a coorm-bridge store"):
        Store(foreign)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(StoreError, match=str(garbage)):
        Store(garbage)
    with pytest.raises(StoreError, match="cannot open"):
        Store(tmp_path / "missing" / "dir" / "bridge.db")
    with pytest.raises(ValueError, match="synchronous"):
        Store(tmp_path / "x.db", synchronous="OFF")  # type: ignore[arg-type]


# -- kill -9 ------------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from coorm_bridge.core.model import Filter
    from coorm_bridge.store import Store

    store = Store(sys.argv[1], synchronous=sys.argv[2])
    session = store.create_session("alice", "crash", Filter(), ["c1"], 0).id
    print("session", session, flush=True)
    t = 0
    while True:
        t += 1
        seq = store.append_event(session, {"type": "killed", "time": t, "reason": "x"}).seq
        print("event", seq, flush=True)
        store.update_session(session, now=t, estimated_start=t)
        print("state", t, flush=True)
    """
)


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_nothing_acknowledged_is_lost_to_kill_9(path, synchronous):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), synchronous],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=path.parent,
    )
    try:
        acks: list[list[str]] = []
        deadline = time.monotonic() + 30
        while sum(ack[0] == "event" for ack in acks) < 300:
            line = child.stdout.readline()
            assert line, f"the child died: {child.stderr.read()}"
            assert time.monotonic() < deadline, "the child is too slow"
            acks.append(line.split())
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        # Lines already in the pipe were printed after their write returned: acknowledged too.
        rest = child.stdout.read()
        acks += [line.split() for line in rest.splitlines(keepends=True) if line.endswith("\n")]
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    session = acks[0][1]
    last_event = max(int(ack[1]) for ack in acks if ack[0] == "event")
    last_state = max(int(ack[1]) for ack in acks if ack[0] == "state")
    with Store(path) as reopened:
        seqs = [event.seq for event in reopened.events(session, limit=100_000)]
        assert seqs == list(range(1, len(seqs) + 1))  # no gap, no duplicate
        assert last_event <= len(seqs) <= last_event + 1  # at most the write the kill caught
        row = reopened.session(session)
        assert row is not None
        assert last_state <= row.updated <= last_state + 1
        assert row.estimated_start == row.updated
        assert reopened.last_seq(session) == len(seqs)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)


# -- jobs ----------------------------------------------------------------------------------------


def job(session: SessionRow, **fields) -> JobRow:
    command = JobCommand(
        argv=("/bin/true", "x"), environment={"A": "1"}, workdir="/w", stdout="/w/o", stderr="/w/e"
    )
    given = {
        "id": new_job_id(),
        "session_id": session.id,
        "cluster": "c1",
        "name": "solver",
        "command": command,
        "walltime": 60,
        "reservation": "coorm-x-c1",
        "host_names": ("c1-0", "c1-1"),
        "created": 100,
    }
    return JobRow.model_validate(given | fields)


def test_jobs_round_trip_and_their_progress_is_checked_before_it_is_written(store, path):
    row = new(store)
    first, second = store.add_job(job(row, created=100)), store.add_job(job(row, created=101))
    assert store.jobs(row.id) == [first, second]
    assert store.unfinished_jobs() == [first, second]
    assert store.job_count(row.id) == 2
    queued = store.update_job(first.id, step="queued", batch_job="c1.7")
    with pytest.raises(ValidationError, match="at step running is running"):
        store.update_job(first.id, step="running", pid=1234, since=5)  # state not said
    running = store.update_job(first.id, step="running", state="running", pid=1234, since=5)
    with pytest.raises(ValueError, match="cannot change"):
        store.update_job(first.id, walltime=3600)
    ended = store.update_job(first.id, step="ended", state="completed", exit_code=0, ended=160)
    assert (queued.step, running.pid, ended.state) == ("queued", 1234, "completed")
    with Store(path) as other:  # through the file
        assert other.job(first.id) == ended
        assert other.unfinished_jobs() == [second]
    with pytest.raises(KeyError):
        store.add_job(job(row.model_copy(update={"id": "nosuchsession"})))
    with pytest.raises(KeyError):
        store.update_job("nosuchjob", cancel=True)


def test_purge_keeps_a_session_whose_job_has_not_ended(store):
    ended, running = new(store), new(store)
    for row in (ended, running):
        store.append_event(row.id, killed())
        store.add_job(job(row))
        finished(store, row, now=150)
    (done,) = store.jobs(ended.id)
    store.update_job(done.id, step="ended", state="cancelled", ended=150)
    assert store.purge_finished(before=200) == 1
    assert store.job(done.id) is None  # gone with its session
    assert [row.id for row in store.sessions()] == [running.id]


def test_a_store_of_schema_1_is_brought_up_to_date_and_keeps_what_it_holds(path):
    with Store(path) as old:
        row = new(old)
        old.append_event(row.id, killed())
    with sqlite3.connect(path) as raw:  # as coorm-bridge wrote it before jobs existed
        raw.execute("DROP TABLE jobs")
        raw.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    with Store(path) as store:
        assert store.sessions() == [row]
        assert [event.seq for event in store.events(row.id)] == [1]
        store.add_job(job(row))
        assert len(store.jobs(row.id)) == 1
    with sqlite3.connect(path) as raw:
        version = raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)


def test_a_store_of_schema_2_gets_the_drained_table_and_keeps_what_it_holds(path):
    with Store(path) as old:
        row = new(old)
        old.add_job(job(row))
    with sqlite3.connect(path) as raw:  # as coorm-bridge wrote it before drains existed
        raw.execute("DROP TABLE drained")
        raw.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with Store(path) as store:
        assert store.sessions() == [row]
        assert len(store.jobs(row.id)) == 1
        assert store.drained() == {}
        store.drain(DrainRow(cluster="c1", since=5, by="root", reason="maintenance"))
    with Store(path) as reopened:
        assert list(reopened.drained()) == ["c1"]


def test_a_drain_is_kept_until_resumed_and_a_second_drain_keeps_the_first(store):
    first = store.drain(DrainRow(cluster="c2", since=5, by="root", reason="disks"))
    again = store.drain(DrainRow(cluster="c2", since=9, by="ops", reason=None))
    assert again == first
    assert store.drained() == {"c2": first}
    assert store.resume("c2") == first
    assert store.resume("c2") is None
    assert store.drained() == {}


def test_a_store_of_schema_4_gets_evolving_applications_and_keeps_what_it_holds(path):
    with Store(path) as old:
        row = new(old)
        old.append_event(row.id, killed())
    with sqlite3.connect(path) as raw:  # as coorm-bridge wrote it before API v2
        raw.execute("DROP INDEX sessions_by_parent")
        for column in ("typed", "evolving", "parent"):
            raw.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
        raw.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    with Store(path) as store:
        assert store.sessions() == [row]
        assert not row.evolving
        assert [event.seq for event in store.events(row.id)] == [1]
        app = store.create_session("alice", None, Filter(), ["c1"], 10, evolving=True)
        assert store.session(app.id) == app
        assert store.sessions(requests=False) == [row, app]
