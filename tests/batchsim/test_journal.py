"""The mock platform's journal: records read back as written, a write cut short by a kill is
never half there, another platform's or another version's file is refused, one writer only."""

import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from coorm_bridge.batchsim import MAX_TIME, Anchor, Journal, calls
from coorm_bridge.core.batch import AdapterError, JobSpec, NodeState, ReservationSpec
from coorm_bridge.core.model import Link

T0 = 1_000_000

EVERY_CALL = [
    calls.CreateReservation(
        cluster="a",
        spec=ReservationSpec(name="r", start=T0, end=T0 + 60, hosts=2, users=("alice",)),
    ),
    calls.UpdateReservation(
        cluster="a",
        spec=ReservationSpec(
            name="r", start=T0, end=T0 + 90, host_names=("a-1", "a-2"), users=("alice", "bob")
        ),
    ),
    calls.DeleteReservation(cluster="a", name="r"),
    calls.Submit(
        cluster="b",
        job=JobSpec(
            name="app",
            user="alice",
            argv=("run", "it's"),
            hosts=3,
            walltime=600,
            reservation="r",
            environment={"COORM_MOCK_RUNTIME": "30"},
        ),
    ),
    calls.Cancel(cluster="b", job_id="b.1"),
    calls.SetNodeState(cluster="a", host="a-1", state=NodeState.DRAINED, at=T0 + 5),
    calls.Upgrade(cluster="a", properties={"speed": 2.5, "cores_per_host": 8}),
    calls.SetLinks(links=(Link(clusters=("a", "b"), latency_s=0.001, bandwidth_bps=1e9),)),
    calls.Outage(cluster="b", start=T0 + 10, end=T0 + 20),
    calls.RefuseReservations(cluster="a", count=2, reason="busy"),
    calls.RefusalUsed(cluster="a"),
]


def test_every_kind_of_call_reads_back_as_written(tmp_path):
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        assert journal.claim("id-1", T0) == T0
        for at, call in enumerate(EVERY_CALL, start=T0):
            journal.append(at, call, f'"outcome {at}"')
        journal.set_anchor(Anchor(time=T0 + 50, wall=1234.5, speedup=60.0))
    with Journal(path) as journal:
        assert (journal.identity, journal.origin) == ("id-1", T0)
        entries = list(journal.entries())
        assert [e.call for e in entries] == EVERY_CALL
        assert [e.at for e in entries] == list(range(T0, T0 + len(EVERY_CALL)))
        assert [e.seq for e in entries] == list(range(1, len(EVERY_CALL) + 1))
        assert entries[3].outcome == f'"outcome {T0 + 3}"'
        assert journal.anchor == Anchor(time=T0 + 50, wall=1234.5, speedup=60.0)
        assert len(journal) == len(EVERY_CALL)
        assert journal.claim("id-1", T0 + 999) == T0  # the saved start, not the new one


def test_a_new_journal_has_nothing_and_claims_its_start(tmp_path):
    with Journal(tmp_path / "j.sqlite") as journal:
        assert (journal.identity, journal.origin, journal.anchor) == (None, None, None)
        assert journal.resume_time(1e9) is None
        assert list(journal.entries()) == []


def test_another_platform_is_refused_and_its_state_kept(tmp_path):
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        journal.claim("old", T0)
        journal.append(T0, EVERY_CALL[0], "null")
    with Journal(path) as journal, pytest.raises(AdapterError) as caught:
        journal.claim("new", T0)
    message = str(caught.value)
    assert message.startswith(f"{path}: saved by another simulated platform")
    assert "move this file away to start the platform afresh" in message
    with Journal(path) as journal:
        assert journal.identity == "old"
        assert len(journal) == 1


def test_one_writer_at_a_time_readers_any_time(tmp_path):
    path = tmp_path / "j.sqlite"
    first = Journal(path)
    try:
        first.claim("id", T0)
        with pytest.raises(AdapterError, match="in use: another coorm-bridge"):
            Journal(path)
        with Journal(path, readonly=True) as reader:
            assert reader.identity == "id"
            with pytest.raises(AdapterError, match="readonly database"):
                reader.append(T0, EVERY_CALL[0], "null")
    finally:
        first.close()
    Journal(path).close()  # free again once closed


def test_files_that_are_not_journals_are_refused(tmp_path):
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(AdapterError, match=f"{garbage}: cannot use the saved platform"):
        Journal(garbage)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE sessions (id TEXT)")
    with pytest.raises(AdapterError, match="is not a saved mock platform"):
        Journal(other)
    with pytest.raises(AdapterError, match="no saved platform state"):
        Journal(tmp_path / "missing.sqlite", readonly=True)


def test_another_format_is_refused_not_rewritten(tmp_path):
    path = tmp_path / "j.sqlite"
    Journal(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'format'")
    with pytest.raises(AdapterError, match="format 99 by another version"):
        Journal(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == ("99",)


def test_a_record_that_does_not_read_back_names_the_file_and_the_call(tmp_path):
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        journal.append(T0, EVERY_CALL[0], "null")
    with sqlite3.connect(path) as conn:
        conn.execute('UPDATE calls SET call = \'{"op": "explode"}\'')
    with Journal(path) as journal, pytest.raises(AdapterError, match=f"{path}: call 1 cannot"):
        list(journal.entries())


def test_a_torn_last_write_is_ignored_and_the_ones_before_kept(tmp_path):
    """What a kill in the middle of a commit leaves: the WAL ends inside the last frame."""
    path = tmp_path / "j.sqlite"
    copy = tmp_path / "copy"
    copy.mkdir()
    journal = Journal(path)
    try:
        journal.claim("id", T0)
        for at in range(T0, T0 + 5):
            journal.append(at, EVERY_CALL[0], "null")
        # Copied while open: the commits are in the WAL, not yet checkpointed into the file.
        for suffix in ("", "-wal"):
            shutil.copy(f"{path}{suffix}", copy / f"j.sqlite{suffix}")
    finally:
        journal.close()
    wal = copy / "j.sqlite-wal"
    size = wal.stat().st_size
    assert size > 4096  # the five commits are there to cut
    with wal.open("r+b") as file:
        file.truncate(size - 100)
    with Journal(copy / "j.sqlite") as torn:
        assert [e.at for e in torn.entries()] == list(range(T0, T0 + 4))
        torn.append(T0 + 10, EVERY_CALL[2], "null")  # and it goes on
    with Journal(copy / "j.sqlite") as torn:
        assert [e.at for e in torn.entries()] == [*range(T0, T0 + 4), T0 + 10]


WRITER = textwrap.dedent(
    """
    import sys
    from coorm_bridge.batchsim import Journal, calls
    journal = Journal(sys.argv[1])
    journal.claim("id", 1000)
    call = calls.DeleteReservation(cluster="a", name="r" * 40)
    for at in range(1000, 10**9):
        seq = journal.append(at, call, "null")
        print(seq, flush=True)  # acknowledged: it is on disk
    """
)


def test_kill_9_while_writing_loses_nothing_acknowledged(tmp_path):
    path = tmp_path / "j.sqlite"
    # cwd away from the repository: ``python -c`` puts the cwd first on the import path, where
    # the source folder would hide the installed package's mapped subpackages.
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        acknowledged = [int(writer.stdout.readline()) for _ in range(200)]
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        writer.stdout.close()
    assert acknowledged == list(range(1, 201))
    with Journal(path) as journal:
        seqs = [e.seq for e in journal.entries()]
        assert seqs[:200] == acknowledged  # every acknowledged one, and whole ones only after
        assert seqs == list(range(1, len(seqs) + 1))
        assert journal.append(2_000_000, EVERY_CALL[2], "null") == len(seqs) + 1


def test_resumed_time_counts_the_downtime_and_never_goes_back(tmp_path):
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.claim("id", T0)
        assert journal.resume_time(5e9) == T0  # no anchor yet: the start
        journal.set_anchor(Anchor(time=T0 + 100, wall=5000.0, speedup=60.0))
        assert journal.resume_time(5010.0) == T0 + 100 + 600  # 10 s down at 60x
        assert journal.resume_time(4000.0) == T0 + 100  # the wall clock was set back
        journal.append(T0 + 900, EVERY_CALL[2], "null")
        assert journal.resume_time(5010.0) == T0 + 900  # never before the last call
        journal.set_anchor(Anchor(time=MAX_TIME - 10, wall=5000.0, speedup=10_000.0))
        assert journal.resume_time(1e12) == MAX_TIME  # and never past the end of time


def test_anchors_are_bounded():
    with pytest.raises(ValueError, match="speedup"):
        Anchor(time=T0, wall=1.0, speedup=1e300)
    with pytest.raises(ValueError, match="time"):
        Anchor(time=MAX_TIME + 1, wall=1.0, speedup=1.0)
