"""The mock platform across restarts: replaying its journal gives back the same history
(reservations with their hosts, jobs and their states, nodes, faults), and the daemon's plug-in
resumes it at the time it would have reached had it kept running."""

import contextlib
import random
import sqlite3
from pathlib import Path

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.adapters.mock.plugin import MockSettings, create, resume
from coorm_bridge.adapters.registry import AdapterContext
from coorm_bridge.batchsim import (
    FILE_NAME,
    RUNTIME_KEY,
    Anchor,
    Journal,
    VirtualClock,
    load_platform,
    parse_platform,
    trace_path,
)
from coorm_bridge.core.batch import (
    AdapterError,
    JobSpec,
    JobState,
    NodeState,
    Refused,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.model import Link

DATA = trace_path("nasa").parent
T0 = 1_700_000_000
TRACED = f"""
start = {T0}
[[cluster]]
name = "a"
hosts = 128
[[cluster]]
name = "b"
hosts = 16
[[load]]
kind = "swf"
cluster = "a"
path = "NASA-iPSC-1993-3.1-cln.swf.gz"
max_jobs = 400
[[load]]
kind = "synthetic"
cluster = "b"
count = 200
mean_interarrival = 300
"""


def history(platform: MockAdapter) -> list[object]:
    """Everything the platform shows: every job's life, snapshots, the site's description."""
    seen: list[object] = [platform.clusters(), platform.interconnect()]
    for name, scheduler in platform.schedulers.items():
        lives = [(r.id, r.submit, r.start, r.end, r.state, r.host_names, r.reservation)
                 for r in scheduler.records()]  # fmt: skip
        seen.append(lives)
        try:
            seen.append(platform.snapshot([name]))
        except Unavailable as error:
            seen.append(str(error))
    return seen


def drive(platform: MockAdapter, seed: int, steps: int, poll: bool) -> int:
    """Random calls of every kind at random times; with ``poll``, snapshots in between too.
    Returns how many calls succeeded."""
    rng = random.Random(seed)
    polls = random.Random(-seed)  # apart: polling or not, the same calls come
    clusters = [c.name for c in platform.clusters()]
    submitted: list[tuple[str, str]] = []
    done = 0
    for i in range(steps):
        t = platform.now() + rng.randint(0, 900)
        if poll:
            for between in range(platform.now() + 1, t, polls.randint(5, 120)):
                platform.run_until(between)
                with contextlib.suppress(Unavailable):
                    platform.snapshot()
        platform.run_until(t)
        cluster = rng.choice(clusters)
        try:
            shot = platform.schedulers[cluster].snapshot()
            kind = rng.random()
            if kind < 0.35:
                start = t + rng.randint(0, 3000)
                spec = ReservationSpec(
                    name=f"coorm-{i}",
                    start=start,
                    end=start + rng.randint(60, 7200),
                    hosts=rng.randint(1, 12),
                    users=("alice",),
                )
                platform.create_reservation(cluster, spec)
            elif kind < 0.5 and shot.reservations:
                held = rng.choice(shot.reservations)
                spec = ReservationSpec(
                    name=held.name,
                    start=held.start,
                    end=held.end + rng.randint(-30, 900),
                    hosts=max(1, held.hosts + rng.randint(-2, 2)),
                    users=("alice",),
                )
                platform.update_reservation(cluster, spec)
            elif kind < 0.62 and shot.reservations:
                platform.delete_reservation(cluster, rng.choice(shot.reservations).name)
            elif kind < 0.75:
                into = rng.choice(shot.reservations).name if shot.reservations else None
                runtime = {RUNTIME_KEY: str(rng.randint(1, 4000))}
                job = JobSpec(
                    name="app",
                    user="alice",
                    argv=("run",),
                    hosts=rng.randint(1, 2),
                    walltime=rng.randint(60, 3000),
                    reservation=into,
                    environment=runtime,
                )
                job_id = platform.submit(cluster, job)
                if rng.random() < 0.3:
                    platform.cancel(cluster, job_id)
                elif rng.random() < 0.5:
                    submitted.append((cluster, job_id))
            elif kind < 0.8 and submitted:
                # A front end's process exits: the simulated job ends with it, if still running.
                where, job_id = submitted.pop(rng.randrange(len(submitted)))
                ended = rng.choice([JobState.COMPLETED, JobState.FAILED])
                platform.end_job(where, job_id, ended)
            elif kind < 0.87:
                host = rng.choice(shot.nodes).name
                state = rng.choice(list(NodeState))
                at = None if rng.random() < 0.5 else t + rng.randint(0, 1000)
                platform.set_node_state(cluster, host, state, at)
            elif kind < 0.9:
                platform.refuse_reservations(cluster, rng.randint(1, 2), "Requested nodes are busy")
            elif kind < 0.94:
                platform.outage(cluster, t + 10, t + rng.randint(11, 600))
            elif kind < 0.97:
                platform.upgrade(cluster, cores_per_host=rng.randint(1, 64))
            else:
                link = Link(clusters=(clusters[0], clusters[-1]), latency_s=0.01, bandwidth_bps=1e9)
                platform.set_links([link])
            done += 1
        except (Refused, Unavailable):
            pass
    return done


def journaled(path: Path, text: str | None = None, at: int = T0) -> MockAdapter:
    spec = load_platform() if text is None else parse_platform(text, base_dir=DATA)
    return MockAdapter(spec, VirtualClock(at), journal=Journal(path))


@pytest.mark.parametrize(("seed", "text"), [(1, None), (2, None), (3, TRACED)])
def test_replay_gives_the_same_history_at_the_same_time(tmp_path, seed, text):
    path = tmp_path / FILE_NAME
    original = journaled(path, text)
    assert drive(original, seed, 250, poll=True) > 150
    end = original.now() + 600
    original.run_until(end)
    expected = history(original)
    original.close()
    resumed = journaled(path, text, at=end)  # polled only at the calls' times while replaying
    assert history(resumed) == expected
    # And both go on alike: same calls, same answers, same history a day later.
    twin = journaled(tmp_path / "twin.sqlite", text, at=T0)
    drive(twin, seed, 250, poll=False)
    twin.run_until(end)
    for platform in (resumed, twin):
        drive(platform, seed + 100, 30, poll=False)
        platform.run_until(end + 86_400)
    assert history(resumed) == history(twin)
    records = [r for s in resumed.schedulers.values() for r in s.records()]
    assert sum(r.state is JobState.COMPLETED for r in records) > 50
    assert sum(r.reservation is not None for r in records) > 5  # jobs in reservations too


def test_the_background_load_goes_on_where_it_was(tmp_path):
    path = tmp_path / FILE_NAME
    first = journaled(path, TRACED)
    first.run_until(T0 + 3 * 3600)
    before = {r.id: r for r in first.schedulers["a"].records()}
    first.close()
    second = journaled(path, TRACED, at=T0 + 6 * 3600)
    after = {r.id: r for r in second.schedulers["a"].records()}
    assert set(before) <= set(after)
    ended = [i for i, r in before.items() if r.end is not None]
    assert ended
    assert all(after[i] == before[i] for i in ended)  # what had ended is as it was
    assert any(r.submit > T0 + 3 * 3600 and r.start is not None for r in after.values())


def test_used_refusals_stay_used(tmp_path):
    path = tmp_path / FILE_NAME
    platform = journaled(path)
    platform.refuse_reservations("beta", count=2)
    spec = ReservationSpec(name="r", start=T0 + 60, end=T0 + 120, hosts=1, users=("alice",))
    with pytest.raises(Refused, match="simulated refusal"):
        platform.create_reservation("beta", spec)
    platform.close()
    platform = journaled(path, at=T0 + 10)
    with pytest.raises(Refused, match="simulated refusal"):
        platform.create_reservation("beta", spec)  # the second and last one
    platform.close()
    platform = journaled(path, at=T0 + 20)
    assert platform.create_reservation("beta", spec).name == "r"


def test_a_journal_of_another_platform_is_refused_untouched(tmp_path):
    path = tmp_path / FILE_NAME
    platform = journaled(path, TRACED)
    platform.submit("a", JobSpec(name="x", user="alice", argv=("x",), hosts=1, walltime=60))
    platform.close()
    changed = TRACED.replace("count = 200", "count = 201")
    with pytest.raises(AdapterError, match="saved by another simulated platform"):
        journaled(path, changed, at=T0 + 100)
    with Journal(path, readonly=True) as journal:
        assert len(journal) == 1
    journaled(path, TRACED, at=T0 + 100).close()  # the platform as it was resumes


def test_the_clock_before_the_saved_calls_is_refused(tmp_path):
    path = tmp_path / FILE_NAME
    platform = journaled(path)
    platform.run_until(T0 + 500)
    platform.delete_reservation("alpha", "nothing")
    platform.close()
    with pytest.raises(AdapterError, match="after the clock"):
        journaled(path, at=T0 + 100)


class Full(Journal):
    """A journal on a full disk."""

    def append(self, at, call, outcome, anchor=None):
        raise AdapterError(f"{self.path}: cannot record a call: database or disk is full")

    def probe(self):
        raise AdapterError(f"{self.path}: cannot write: database or disk is full")


def test_a_call_that_cannot_be_saved_is_not_acknowledged_and_the_platform_stops_meanwhile(
    tmp_path,
):
    platform = MockAdapter(load_platform(), VirtualClock(T0), journal=Full(tmp_path / "j"))
    spec = ReservationSpec(name="r", start=T0 + 60, end=T0 + 120, hosts=1, users=("alice",))
    with pytest.raises(Unavailable, match=r"cannot save its state: .* disk is full"):
        platform.create_reservation("alpha", spec)
    with pytest.raises(Unavailable, match="cannot be used"):
        platform.snapshot()
    with pytest.raises(Unavailable, match="cannot be used"):
        platform.delete_reservation("alpha", "r")
    platform.close()
    resumed = journaled(tmp_path / "j", at=T0 + 10)
    assert resumed.snapshot().clusters["alpha"].reservations == ()  # it was never acknowledged


def resumed_at(state: Path, wall_before: float, speedup: float = 60.0) -> None:
    """Rewrite the saved anchor as if the daemon stopped ``wall_before`` seconds ago."""
    with Journal(state / FILE_NAME) as journal:
        anchor = journal.anchor
        assert anchor is not None
        moved = Anchor(time=anchor.time, wall=anchor.wall - wall_before, speedup=speedup)
        journal.set_anchor(moved)


def test_the_plugin_resumes_the_platform_as_if_it_had_kept_running(tmp_path):
    platform_file = tmp_path / "site.toml"
    platform_file.write_text(f'start = {T0}\n[[cluster]]\nname = "c"\nhosts = 4\n')
    settings = MockSettings(platform=platform_file, speedup=60.0)
    context = AdapterContext(state_dir=tmp_path)
    first = create(settings, context)
    t1 = first.now()
    assert T0 <= t1 < T0 + 600  # a fixed start is where the very first run begins
    handle = first.create_reservation(
        "c", ReservationSpec(name="coorm-1-c", start=t1 + 600, end=t1 + 7200, hosts=2, users=("u",))
    )
    job = first.submit("c", JobSpec(name="j", user="u", argv=("x",), hosts=1, walltime=1800))
    first.close()
    resumed_at(tmp_path, wall_before=3600)  # down for an hour of real time: 60 h simulated
    second = create(settings, context)
    try:
        assert second.now() >= t1 + 3600 * 60  # where it would be had it kept running
        assert second.start == first.start  # not back to the file's start
        assert second.job_state("c", job) is JobState.COMPLETED  # it ended meanwhile
        shot = second.snapshot(["c"]).clusters["c"]
        assert shot.reservations == ()  # its reservation ended meanwhile too
    finally:
        second.close()
    assert handle.host_names == ("c-0", "c-1")


def test_the_plugin_keeps_reservations_and_their_hosts(tmp_path):
    context = AdapterContext(state_dir=tmp_path)
    first = create(MockSettings(speedup=60.0), context)
    t1 = first.now()
    spec = ReservationSpec(name="coorm-x", start=t1 + 3600, end=t1 + 7200, hosts=5, users=("u",))
    made = first.create_reservation("beta", spec)
    first.close()
    second = create(MockSettings(speedup=1.0), context)  # a new speed-up counts from now on
    try:
        assert second.now() >= t1
        shot = second.snapshot(["beta"]).clusters["beta"]
        (held,) = [r for r in shot.reservations if r.name == "coorm-x"]
        assert (held.start, held.end, held.host_names) == (made.start, made.end, made.host_names)
        with Journal(tmp_path / FILE_NAME, readonly=True) as journal:
            assert journal.anchor is not None
            assert journal.anchor.speedup == 1.0
    finally:
        second.close()


def test_a_wall_clock_set_back_does_not_send_the_platform_back(tmp_path):
    context = AdapterContext(state_dir=tmp_path)
    first = create(MockSettings(speedup=100.0), context)
    first.delete_reservation("alpha", "nothing")  # a call, journaled with its time
    t1 = first.now()
    first.close()
    resumed_at(tmp_path, wall_before=-86_400, speedup=100.0)  # its anchor is a day ahead
    second = create(MockSettings(speedup=100.0), context)
    try:
        assert second.now() >= t1
    finally:
        second.close()


def test_resume_refuses_a_platform_in_use(tmp_path):
    first = resume(load_platform(), tmp_path / FILE_NAME, 1.0)
    try:
        with pytest.raises(AdapterError, match="in use"):
            resume(load_platform(), tmp_path / FILE_NAME, 1.0)
    finally:
        first.close()


def test_a_full_journal_makes_the_platform_unavailable_then_it_recovers_by_itself(
    tmp_path, monkeypatch
):
    """A write that fails (SQLite's "database or disk is full": the journal capped at its size)
    refuses that call and every one after, without a restart; once it takes writes again the
    platform is rebuilt from the journal: the failed call never happened, the rest did."""
    monkeypatch.setattr("coorm_bridge.batchsim.site.RECOVERY_INTERVAL", 0.0)
    spec = parse_platform(f'start = {T0}\n[[cluster]]\nname = "a"\nhosts = 4\n')
    platform = MockAdapter(spec, VirtualClock(T0), journal=Journal(tmp_path / FILE_NAME))
    kept = ReservationSpec(name="kept", start=T0 + 60, end=T0 + 120, hosts=1, users=("alice",))
    platform.create_reservation("a", kept)
    conn = platform.site.journal._conn
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    fill = (
        ("INSERT INTO meta VALUES ('filler' || ?, randomblob(?))"),
        ("INSERT INTO calls (at, call, outcome) VALUES (-1 - ?, randomblob(?), '')"),
    )
    for insert in fill:  # filled up to the cap, every page of both tables: full
        for size in (512, 64, 1):
            with contextlib.suppress(sqlite3.OperationalError):
                for n in range(10_000):
                    conn.execute(insert, (f"{size}-{n}" if "meta" in insert else n, size))
    lost = kept.model_copy(update={"name": "lost", "start": T0 + 200, "end": T0 + 260})
    with pytest.raises(Unavailable, match="database or disk is full"):
        platform.create_reservation("a", lost)
    with pytest.raises(Unavailable, match="cannot be used"):
        platform.snapshot()
    conn.execute("DELETE FROM meta WHERE key LIKE 'filler%'")  # space again
    conn.execute("DELETE FROM calls WHERE at < 0")
    conn.execute("PRAGMA max_page_count = 1073741823")
    names = [r.name for r in platform.snapshot().clusters["a"].reservations]
    assert names == ["kept"]
    platform.create_reservation("a", lost)  # saved this time
    platform.close()
    again = MockAdapter(spec, VirtualClock(T0 + 10), journal=Journal(tmp_path / FILE_NAME))
    assert sorted(r.name for r in again.snapshot().clusters["a"].reservations) == ["kept", "lost"]
    again.close()
