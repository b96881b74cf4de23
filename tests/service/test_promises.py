"""The bridge's promises under lost reservations, failing and broken sessions, slow batch systems
and later local jobs: each case was reproduced against the bridge before it was fixed.

In-process, on the mock platform with a virtual clock (the daemon-level cases are in
tests/daemon/test_daemon.py and benchmarks/chaos.py).
"""

from __future__ import annotations

import contextlib
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coorm_bridge.core.batch import (
    JobSpec,
    JobState,
    NodeState,
    Refused,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.model import MAX_DURATION
from coorm_bridge.core.states import AppState
from coorm_bridge.service.config import BridgeSettings, Limits, LimitSettings
from coorm_bridge.service.errors import OverLimit, SessionError
from tests import sites
from tests.profiles import fewer

T0 = sites.T0


class Site(sites.Site):
    def __init__(
        self,
        tmp_path,
        fair_start=30,
        hold_first=0,
        attempts=2,
        session_timeout=None,
        limits=None,
        **hosts,
    ):
        placement = {"attempts": attempts, "hold_first": hold_first}
        config = {
            "bridge": BridgeSettings(session_timeout=session_timeout),
            "limits": limits or sites.LIMITS,
        }
        super().__init__(
            tmp_path,
            hosts or {"c1": 4},
            policy={"fair_start": fair_start},
            placement=placement,
            config=config,
        )
        self.step(T0)

    run = sites.Site.request

    def reservation(self, sid, cluster="c1"):
        name = self.store.placeholder(sid, cluster).name
        shot = self.adapter.snapshot([cluster]).clusters[cluster]
        return next(r for r in shot.reservations if r.name == name)


@pytest.fixture
def site(make_site):
    return make_site(Site)


def test_a_lost_placeholder_comes_back_on_the_hosts_its_application_runs_on(tmp_path):
    # The case: P on c1-0, Q on c1-1; P done; the batch system loses Q's placeholder.
    # Re-created by count it would land on c1-0, and a newcomer would get c1-1 under Q.
    site = Site(tmp_path, fair_start=1)
    p, q = site.subscribe(), site.subscribe()
    site.step(T0 + 1)
    site.run(p, {"c1": 1}, 1000)
    site.step(T0 + 2)
    site.run(q, {"c1": 1}, 1000)
    site.step(T0 + 3)
    assert (site.hosts(p), site.hosts(q)) == ({"c1-0"}, {"c1-1"})
    site.bridge.done("alice", p)
    for t in range(T0 + 4, T0 + 8):
        site.step(t)
    assert site.state(p) is AppState.FINISHED
    site.adapter.delete_reservation("c1", site.store.placeholder(q, "c1").name)  # lost
    assert site.loop.reconcile() == {"recreated": 1}
    assert set(site.reservation(q).host_names) == site.hosts(q) == {"c1-1"}
    r = site.subscribe()
    site.run(r, {"c1": 1}, 100)
    site.step(T0 + 9)
    assert site.state(r) is AppState.STARTED
    assert not site.hosts(r) & site.hosts(q)


def test_a_lost_placeholder_whose_hosts_were_taken_ends_its_session_with_the_reason(site):
    q = site.subscribe()
    site.step(T0 + 1)
    site.run(q, {"c1": 2}, 1000)
    site.step(T0 + 2)
    assert site.hosts(q) == {"c1-0", "c1-1"}
    site.adapter.delete_reservation("c1", site.store.placeholder(q, "c1").name)
    site.adapter.submit("c1", JobSpec(name="local", user="bob", argv=("x",), hosts=4, walltime=50))
    site.adapter.run_until(T0 + 3)  # the local job took every host, Q's too
    assert site.loop.reconcile() == {"lost": 1}
    (killed,) = site.events(q, "killed")
    assert "could not be re-created on its hosts" in killed.reason
    assert site.state(q) is AppState.FINISHED


def test_a_swapped_host_is_read_back_before_the_launcher_is_told(tmp_path):
    site = Site(tmp_path, c1=5)
    for name in ("a", "b"):  # c1-0 and c1-1, then c1-2 and c1-3, busy until T0 + 100
        site.adapter.submit(
            "c1", JobSpec(name=name, user="bob", argv=("x",), hosts=2, walltime=100)
        )
    sid = site.subscribe()
    site.step(T0 + 1)
    site.run(sid, {"c1": 3}, 50)  # waits: held within the horizon meanwhile
    site.step(T0 + 2)
    held = site.store.placeholder(sid, "c1")
    assert site.state(sid) is AppState.WAITING
    dead = held.host_names[-1]
    site.adapter.set_node_state("c1", dead, NodeState.DOWN)
    assert dead not in site.reservation(sid).host_names  # the batch system swapped it out
    assert dead in site.store.placeholder(sid, "c1").host_names  # the bridge does not know yet
    for t in range(T0 + 3, T0 + 120):
        site.step(t)
        if site.state(sid) is AppState.STARTED:
            break
    assert site.state(sid) is AppState.STARTED
    assert site.hosts(sid) == set(site.reservation(sid).host_names)  # what the batch system holds
    assert dead not in site.hosts(sid)
    site.step(t + 1)
    assert site.state(sid) is AppState.STARTED  # and not killed for a host it never had


def test_reconciliation_puts_a_shrunk_placeholder_back_as_promised(site):
    sid = site.subscribe()
    site.step(T0 + 1)
    site.run(sid, {"c1": 2}, 1000)
    site.step(T0 + 2)
    held = site.store.placeholder(sid, "c1")
    shrunk = ReservationSpec(
        name=held.name,
        start=held.start,
        end=held.end - 500,
        host_names=held.host_names,
        users=("alice",),
    )
    site.adapter.update_reservation("c1", shrunk)
    assert site.loop.reconcile() == {"repaired": 1}
    assert site.reservation(sid).end == held.end


def test_a_session_whose_owner_the_batch_system_does_not_know_ends_and_the_others_go_on(site):
    site.adapter.forget_user("uid1234")
    stranger, fine = site.subscribe(user="uid1234"), site.subscribe()
    site.step(T0 + 1)
    site.run(stranger, {"c1": 4}, 100, user="uid1234")
    site.run(fine, {"c1": 4}, 100)
    site.step(T0 + 2)
    site.step(T0 + 3)
    assert site.state(stranger) is AppState.FAILED
    (error,) = site.events(stranger, "error")
    assert "Invalid user id" in error.reason
    assert site.events(stranger)[-1].state is AppState.FAILED
    assert site.state(fine) is AppState.STARTED
    assert site.service.stats.placement_failures == 1  # never tried again


def test_a_session_that_keeps_failing_is_told_and_leaves_the_hosts_to_those_behind(site):
    site.adapter.refuse_reservations("c1", 10_000, "Requested nodes are busy")
    failing, behind = site.subscribe(), site.subscribe()
    site.step(T0 + 1)
    site.run(failing, {"c1": 4}, 100)
    site.step(T0 + 2)
    site.adapter.refuse_reservations("c1", 0)
    original = site.adapter.create_reservation

    def refuse_the_first(cluster, spec):
        if failing in spec.name:
            raise Refused("Requested nodes are busy")
        return original(cluster, spec)

    site.adapter.create_reservation = refuse_the_first
    site.run(behind, {"c1": 4}, 20)
    for t in range(T0 + 3, T0 + 40):
        site.step(t)
    told = site.events(failing, "placement_failed")
    assert told
    assert all("Requested nodes are busy" in e.reason for e in told)
    assert all(e.retry_at > e.time for e in told)
    assert site.state(behind) in (AppState.STARTED, AppState.FINISHED)
    assert len(site.events(behind, "change")) < 10  # not one per pass
    assert site.state(failing) is AppState.WAITING
    waits = site.service.enactor.not_before()
    assert waits[failing] > T0 + 39  # placed no earlier than its next attempt


def killed_with_a_job_left_inside(site):
    """A session on c1 and c2 whose job on c1 runs on after a host of c2 went down (the issue's
    case: the session ends, the other cluster's job does not)."""
    sid = site.subscribe()
    site.step(T0 + 1)
    site.run(sid, {"c1": 4, "c2": 2}, 1000)
    site.step(T0 + 2)
    name = site.store.placeholder(sid, "c1").name
    app = JobSpec(name="app", user="alice", argv=("x",), hosts=4, walltime=900, reservation=name)
    job = site.adapter.submit("c1", app)
    site.step(T0 + 3)
    assert site.adapter.job_state("c1", job) is JobState.RUNNING
    site.adapter.set_node_state("c2", "c2-1", NodeState.DOWN)
    return sid, name, job


def test_a_killed_session_cancels_what_runs_in_its_placeholders_before_they_go(tmp_path):
    site = Site(tmp_path, c1=4, c2=2)
    sid, name, job = killed_with_a_job_left_inside(site)
    site.step(T0 + 4)
    assert site.state(sid) is AppState.FINISHED
    assert "c2-1" in site.events(sid, "killed")[0].reason
    assert site.adapter.job_state("c1", job) is JobState.CANCELLED  # by the bridge
    reservations = site.adapter.snapshot(["c1"]).clusters["c1"].reservations
    assert name not in {r.name for r in reservations}
    site.store.close()


def test_hosts_of_a_placeholder_that_cannot_be_released_yet_stay_taken(tmp_path):
    site = Site(tmp_path, c1=4, c2=2)
    calls = []

    def silent(cluster, job_id):
        calls.append(job_id)
        raise Unavailable("c1 does not answer")

    site.adapter.cancel = silent
    sid, name, _ = killed_with_a_job_left_inside(site)
    # Another user's: until the next pass alice holds every host, past limits.held_hosts.
    newcomer = site.subscribe(user="bob")
    site.run(newcomer, {"c1": 4}, 10, user="bob")
    for t in range(T0 + 4, T0 + 64):
        site.step(t)
    assert site.state(sid) is AppState.FINISHED
    held = {r.name for r in site.adapter.snapshot(["c1"]).clusters["c1"].reservations}
    assert name in held  # still in use: the batch system keeps it
    assert site.state(newcomer) is AppState.WAITING  # so its hosts are not offered as free
    assert site.store.session(newcomer).estimated_start > T0 + 63
    assert 2 <= len(calls) <= 8  # retried with back-off, not twice a pass
    site.store.close()


def test_a_session_whose_handling_raises_is_set_aside_and_the_others_start(site):
    broken, fine = site.subscribe(), site.subscribe()
    site.step(T0 + 1)
    ensure = site.service.placeholders.ensure

    def buggy(row, start, now):
        if row.id == broken:
            raise RuntimeError("a bug")
        return ensure(row, start, now)

    site.service.placeholders.ensure = buggy
    site.run(broken, {"c1": 2}, 100)
    site.run(fine, {"c1": 2}, 100)
    site.step(T0 + 2)
    site.step(T0 + 3)
    assert site.state(broken) is AppState.FAILED
    (error,) = site.events(broken, "error")
    assert "RuntimeError: a bug" in error.reason
    assert site.state(fine) is AppState.STARTED
    assert site.service.stats.session_errors == 1


def test_the_api_answers_while_a_batch_system_call_hangs(site):
    sid = site.subscribe()
    site.step(T0 + 1)
    entered, release = threading.Event(), threading.Event()
    original = site.adapter.create_reservation

    def hanging(cluster, spec):
        entered.set()
        assert release.wait(30)
        return original(cluster, spec)

    site.adapter.create_reservation = hanging
    site.run(sid, {"c1": 2}, 100)
    assert site.service.passes.plan()
    worker = threading.Thread(target=site.service.enactor.run)
    worker.start()
    try:
        assert entered.wait(10)
        # The batch system is stuck in a call; everything a launcher does still answers.
        other = site.subscribe()
        site.run(other, {"c1": 1}, 10)
        assert site.service.passes.plan()
        assert site.bridge.health().status == "ok"
        assert site.bridge.info("alice", other).estimated_start is not None
        site.bridge.withdraw("alice", other)
    finally:
        release.set()
        worker.join(30)
    site.step(T0 + 2)
    assert site.state(sid) is AppState.STARTED


def test_local_jobs_submitted_later_never_delay_the_first_waiting_session(tmp_path):
    # A local job holds every host until T0 + 1000; the session waits for it. Then three local
    # jobs arrive: planned ahead of the session by the batch scheduler, they would push it to
    # T0 + 2500 and beyond. Held at its estimate (hold_first), it starts at T0 + 1000.
    site = Site(tmp_path, hold_first=1, c1=4)
    busy = JobSpec(name="busy", user="bob", argv=("x",), hosts=4, walltime=1000)
    site.adapter.submit("c1", busy)
    sid = site.subscribe()
    site.step(T0 + 1)
    site.run(sid, {"c1": 4}, 100)
    site.step(T0 + 2)
    estimate = site.store.session(sid).estimated_start
    assert estimate is not None
    assert estimate <= T0 + 1001
    for i in range(3):
        later = JobSpec(name=f"later{i}", user="bob", argv=("x",), hosts=4, walltime=500)
        site.adapter.submit("c1", later)
    for t in range(T0 + 3, estimate + 2, 7):
        site.step(t)
    site.step(estimate)
    site.step(estimate + 1)
    assert site.state(sid) is AppState.STARTED
    (start,) = site.events(sid, "start")
    assert start.time <= estimate + 1


def test_a_waiting_session_whose_launcher_went_silent_is_withdrawn(tmp_path):
    site = Site(tmp_path, session_timeout=60)
    site.adapter.submit("c1", JobSpec(name="busy", user="bob", argv=("x",), hosts=4, walltime=900))
    alive, silent = site.subscribe(), site.subscribe()
    site.run(alive, {"c1": 4}, 100)
    site.run(silent, {"c1": 4}, 100)
    for t in range(T0 + 1, T0 + 200, 5):
        site.store.events(alive)  # a direct read is not a launcher's call...
        site.bridge.events("alice", alive, after=0)  # ...a long poll is
        site.step(t)
    assert site.state(silent) is AppState.CANCELLED
    (withdrawn,) = site.events(silent, "withdrawn")
    assert "no word from its launcher" in withdrawn.reason
    assert site.state(alive) is AppState.WAITING
    site.store.close()


def test_limits_name_themselves_and_change_nothing(tmp_path):
    limits = LimitSettings(
        sessions=2, hosts=3, duration=600, held_share=1.0, user={"bob": Limits(hosts=4)}
    )
    site = Site(tmp_path, limits=limits)
    first, _ = site.subscribe(), site.subscribe()
    with pytest.raises(OverLimit, match=r"limits\.sessions allows \(2\)"):
        site.subscribe()
    with pytest.raises(OverLimit, match=r"4 hosts; limits\.hosts allows 3"):
        site.run(first, {"c1": 4}, 100)
    with pytest.raises(OverLimit, match=r"limits\.duration allows 600 s"):
        site.run(first, {"c1": 1}, 601)
    assert site.state(first) is AppState.SUBMITTED  # nothing was written
    bob = site.subscribe(user="bob")
    site.run(bob, {"c1": 4}, 600, user="bob")  # his own table allows 4 hosts
    site.bridge.withdraw("alice", first)
    site.subscribe()  # one ended: room for another
    site.store.close()


hostile = st.lists(
    st.tuples(
        st.dictionaries(
            st.sampled_from(["c1", "c2", "zz", "c1 ; rm"]),
            st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=5)),
            max_size=3,
        ),
        st.one_of(
            st.integers(-(2**70), 2**70),
            st.sampled_from([2**62, 2**63, 10**30, MAX_DURATION, MAX_DURATION + 1]),
            st.floats(),
        ),
    ),
    min_size=1,
    max_size=12,
)


@settings(  # each example runs a bridge, its store and its platform for many steps
    max_examples=fewer(40), suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(attacks=hostile)
def test_random_hostile_requests_never_stop_another_user_s_session(tmp_path_factory, attacks):
    site = Site(tmp_path_factory.mktemp("hostile"))
    try:
        # Alice came first: whatever comes later, valid or not, may never delay her (a valid
        # request of Mallory's is placed behind hers, an invalid one is refused).
        alice = site.subscribe()
        mallory = [site.subscribe(user="mallory") for _ in range(3)]
        site.adapter.submit(
            "c1", JobSpec(name="busy", user="bob", argv=("x",), hosts=4, walltime=8)
        )
        site.run(alice, {"c1": 2}, 100)
        site.step(T0)
        promised = site.store.session(alice).estimated_start
        for number, (nodes, duration) in enumerate(attacks):
            sid = mallory[number % len(mallory)]
            with contextlib.suppress(SessionError):
                site.bridge.put_request("mallory", sid, nodes, duration)
            site.step(T0 + 1 + number)
        for t in range(T0 + len(attacks) + 1, T0 + 20):
            site.step(t)
        assert site.state(alice) is AppState.STARTED
        assert site.events(alice, "start")[0].time <= promised
        assert site.service.stats.session_errors == 0
    finally:
        site.store.close()


def test_a_move_the_batch_system_refuses_keeps_the_placeholder_where_it_was(site):
    """Slurm refused moves ("Requested nodes are busy") and the bridge then released the
    placeholders to reserve them again: the application held nothing, and the local scheduler
    could backfill its hosts. A refused move now keeps them until a move succeeds."""
    local = JobSpec(name="local", user="bob", argv=("x",), hosts=4, walltime=200)
    job = site.adapter.submit("c1", local)
    sid = site.subscribe()
    site.step(T0 + 1)
    site.run(sid, {"c1": 4}, 100)
    site.step(T0 + 2)
    before = site.store.placeholder(sid, "c1")
    assert before.start == T0 + 200  # behind the local job
    site.adapter.cancel("c1", job)  # it leaves early: the application can move up
    site.adapter.refuse_reservations("c1", 1, "Requested nodes are busy")
    site.step(T0 + 3)
    (told,) = site.events(sid, "placement_failed")
    assert "kept where they were" in told.reason
    held = {r.name: r for r in site.adapter.snapshot(["c1"]).clusters["c1"].reservations}
    assert (held[before.name].start, held[before.name].end) == (T0 + 200, T0 + 300)
    assert site.store.placeholder(sid, "c1").start == T0 + 200
    for t in range(T0 + 4, T0 + 8):
        site.step(t)
    assert site.state(sid) is AppState.STARTED  # moved up once the batch system agreed


def test_a_placeholder_being_launched_is_not_repaired_from_its_half_rewritten_times(
    site, monkeypatch
):
    """OAR launches a late reservation by shortening its walltime, then moving its start, in
    separate statements: a read in between shows it begun, not launched, ending early. That is
    no drift to repair (OAR cannot lengthen it back): it is checked again once launched."""
    sid = site.subscribe()
    site.step(T0 + 1)
    site.run(sid, {"c1": 2}, 1000)
    site.step(T0 + 2)
    held = site.store.placeholder(sid, "c1")
    assert held.start <= site.adapter.now()
    snapshot = site.adapter.snapshot

    def read(launched: bool):  # the placeholder as OAR shows it halfway, or once launched
        def shot(clusters=None):
            real = snapshot(clusters)
            cluster = real.clusters["c1"]
            changed = [
                r.model_copy(update={"end": r.end - 7, "launched": launched})
                if r.name == held.name
                else r
                for r in cluster.reservations
            ]
            return real.model_copy(
                update={"clusters": {"c1": cluster.model_copy(update={"reservations": changed})}}
            )

        return shot

    monkeypatch.setattr(site.loop.reconciler.adapter, "snapshot", read(False))
    assert site.loop.reconcile() == {}
    (real,) = [r for r in snapshot(["c1"]).clusters["c1"].reservations if r.name == held.name]
    assert real.end == held.end  # the batch system was asked nothing
    assert site.store.placeholder(sid, "c1") == held  # nor was the book changed
    monkeypatch.setattr(site.loop.reconciler.adapter, "snapshot", read(True))
    assert site.loop.reconcile() == {"repaired": 1}  # launched and still short: a real drift
