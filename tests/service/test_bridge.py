"""The bridge on a simulated platform with a virtual clock: deterministic, in-process.

The same code runs in the daemon (tests/daemon/test_daemon.py drives a real process); here every
step is explicit: advance the platform, poll, tick (run a pass when one is due).
"""

from __future__ import annotations

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import VirtualClock, parse_platform
from coorm_bridge.core.batch import AdapterError, JobSpec, NodeState, ReservationSpec
from coorm_bridge.core.model import Filter, Link
from coorm_bridge.core.states import AppState
from coorm_bridge.service.config import BridgeSettings, Config, LimitSettings
from coorm_bridge.service.errors import Conflict, Invalid, NotFound
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store
from tests import sites

T0 = sites.T0
PLATFORM = sites.platform()


class Site(sites.Site):
    """A bridge over a two-cluster mock platform on a virtual clock."""

    def __init__(
        self, tmp_path, fair_start=30, horizon=300, attempts=3, hold_first=0, adapter=MockAdapter
    ):
        placement = {"horizon": horizon, "attempts": attempts, "hold_first": hold_first}
        super().__init__(
            tmp_path, adapter=adapter, policy={"fair_start": fair_start}, placement=placement
        )
        self.step(T0)

    def subscribe(self, user="alice", clusters=("c1", "c2")):
        return super().subscribe(user, clusters)


@pytest.fixture
def site(tmp_path):
    return Site(tmp_path)


def test_two_applications_are_co_allocated_on_both_clusters_at_the_same_instant(site):
    a, b = site.subscribe(), site.subscribe(user="bob")
    site.step(T0 + 1)
    # Each got its first view as a change event: every cluster it sees, all hosts free.
    for sid in (a, b):
        (change,) = site.events(sid, "change")
        assert {c.cluster: c.profile.steps for c in change.changes} == {
            "c1": ((T0 + 1, 8),),
            "c2": ((T0 + 1, 4),),
        }
    site.request(a, {"c1": 4, "c2": 2}, 100)
    site.request(b, {"c1": 3, "c2": 2}, 50, user="bob")
    site.step(T0 + 2)
    starts = {sid: site.events(sid, "start") for sid in (a, b)}
    assert all(len(s) == 1 for s in starts.values())
    start_a, start_b = starts[a][0], starts[b][0]
    assert start_a.time == start_b.time == T0 + 2
    assert (start_a.end, start_b.end) == (T0 + 102, T0 + 52)
    for event, sid, owner, nodes in ((start_a, a, "alice", (4, 2)), (start_b, b, "bob", (3, 2))):
        assert site.state(sid) is AppState.STARTED
        for cluster, hosts in zip(("c1", "c2"), nodes, strict=True):
            allocation = event.allocations[cluster]
            held = site.ours(cluster)[allocation.reservation]
            assert len(allocation.hosts) == hosts
            assert set(held.host_names) == set(allocation.hosts)
            assert held.users == (owner,)
            assert (held.start, held.end) == (event.time, event.end)
    # Nobody shares a host.
    for cluster in ("c1", "c2"):
        assert not set(start_a.allocations[cluster].hosts) & set(start_b.allocations[cluster].hosts)
    # A job submitted into the placeholder runs on its hosts.


def test_a_waiting_application_gets_its_placeholders_within_the_horizon_and_starts(tmp_path):
    site = Site(tmp_path, horizon=100)
    first, second = site.subscribe(), site.subscribe()
    site.step(T0 + 1)
    site.request(first, {"c1": 8}, 500)
    site.request(second, {"c1": 4, "c2": 4}, 60)
    site.step(T0 + 2)
    assert site.state(first) is AppState.STARTED
    row = site.store.session(second)
    assert row.state is AppState.WAITING
    assert row.estimated_start == T0 + 502
    assert site.store.placeholders(second) == []  # 500 s away: beyond the horizon
    site.step(T0 + 402)
    held = site.store.placeholders(second)
    assert [(p.cluster, p.start, p.end, p.hosts) for p in held] == [
        ("c1", T0 + 502, T0 + 562, 4),
        ("c2", T0 + 502, T0 + 562, 4),
    ]
    assert set(site.ours("c2")) == {held[1].name}
    site.step(T0 + 502)
    (start,) = site.events(second, "start")
    assert start.time == T0 + 502
    assert {c: a.reservation for c, a in start.allocations.items()} == {
        p.cluster: p.name for p in held
    }


def test_done_leaves_a_ghost_for_fair_start_then_releases_everything(site):
    sid = site.subscribe()
    site.step(T0 + 1)
    site.request(sid, {"c1": 2, "c2": 1}, 1000)
    site.step(T0 + 2)
    site.step(T0 + 10)
    site.bridge.done("alice", sid)
    site.step(T0 + 11)
    assert site.state(sid) is AppState.GHOST
    assert {r.end for r in site.ours("c1").values()} == {T0 + 40}  # done at 10 + fair_start 30
    assert site.bridge.done("alice", sid).state is AppState.GHOST  # repeating is harmless
    site.step(T0 + 40)
    assert site.state(sid) is AppState.FINISHED
    assert site.ours("c1") == site.ours("c2") == {}
    assert site.store.placeholders(sid) == []
    assert site.events(sid)[-1].type == "ended"


def test_a_done_late_in_its_second_keeps_the_ghost_for_the_whole_fair_start(site, monkeypatch):
    """A done at +10.94 s: a ghost counted from +10 would end 0.94 s early, and a local job
    could start on its hosts then. It ends at +41, not before done + 30."""
    sid = site.subscribe()
    site.step(T0 + 1)
    site.request(sid, {"c1": 2, "c2": 1}, 1000)
    site.step(T0 + 2)
    site.step(T0 + 10)
    monkeypatch.setattr(site.adapter, "instant", lambda: T0 + 10.94)
    assert site.bridge.done("alice", sid).done_at == T0 + 11
    site.step(T0 + 11)
    assert {r.end for c in ("c1", "c2") for r in site.ours(c).values()} == {T0 + 41}
    site.step(T0 + 40)
    assert site.state(sid) is AppState.GHOST
    site.step(T0 + 41)
    assert site.state(sid) is AppState.FINISHED


class LeadingAdapter(MockAdapter):
    """A batch system that makes reservations only from 20 s ahead (as OAR's next pass)."""

    def reservation_lead(self) -> int:
        return 20


def test_placeholders_start_a_reservation_lead_ahead_and_the_start_is_told_when_they_begin(
    tmp_path,
):
    site = Site(tmp_path, fair_start=5, adapter=LeadingAdapter)
    sid = site.subscribe()
    site.step(T0 + 1)
    site.request(sid, {"c1": 2, "c2": 1}, 1000)
    site.step(T0 + 2)
    held = {r.start for c in ("c1", "c2") for r in site.ours(c).values()}
    assert held == {T0 + 22}  # one start for every cluster, the lead ahead
    assert site.events(sid, "start") == []  # its jobs would wait for the placeholders
    site.step(T0 + 21)
    assert site.events(sid, "start") == []
    site.step(T0 + 22)
    (start,) = site.events(sid, "start")
    assert (start.time, start.end) == (T0 + 22, T0 + 22 + 1000)  # when they begin
    assert site.state(sid) is AppState.STARTED


class LateLauncher(LeadingAdapter):
    """As OAR: a reservation is launched only at a scheduler pass, 3 s after its start here;
    every change to a reservation is counted (OAR re-submits one it has not launched)."""

    updates = 0

    def reservation(self, cluster, name):
        made = super().reservation(cluster, name)
        if made is None:
            return None
        return made.model_copy(update={"launched": self.now() >= made.start + 3})

    def update_reservation(self, cluster, spec):
        type(self).updates += 1
        return super().update_reservation(cluster, spec)


def test_a_start_waits_for_the_batch_system_to_launch_the_placeholders_and_leaves_them_be(
    tmp_path,
):
    site = Site(tmp_path, fair_start=5, adapter=LateLauncher)
    sid = site.subscribe()
    site.step(T0 + 1)
    site.request(sid, {"c1": 2, "c2": 1}, 1000)
    site.step(T0 + 2)
    held = {(r.start, r.end) for c in ("c1", "c2") for r in site.ours(c).values()}
    assert held == {(T0 + 22, T0 + 1022)}
    for t in range(T0 + 3, T0 + 25):  # looked at every second, never moved while it waits
        site.step(t)
        assert site.events(sid, "start") == [], t
        assert T0 + 22 <= site.store.session(sid).estimated_start <= max(T0 + 22, t + 1)
    assert LateLauncher.updates == 0
    site.step(T0 + 25)  # launched at +25: started then, lengthened to its whole duration
    (start,) = site.events(sid, "start")
    assert (start.time, start.end) == (T0 + 25, T0 + 1025)
    assert {r.end for c in ("c1", "c2") for r in site.ours(c).values()} == {T0 + 1025}


def test_withdraw_before_start_cancels_and_releases_placeholders_held_ahead(site):
    blocker, sid = site.subscribe(), site.subscribe()
    site.step(T0 + 1)
    site.request(blocker, {"c2": 4}, 100)
    site.request(sid, {"c1": 1, "c2": 1}, 100)
    site.step(T0 + 2)
    assert len(site.store.placeholders(sid)) == 2  # starts at +102, within the horizon
    assert site.bridge.withdraw("alice", sid).state is AppState.CANCELLED
    site.step(T0 + 3)
    assert site.store.placeholders(sid) == []
    assert set(site.ours("c1")) == {p.name for p in site.store.placeholders(blocker)} & set(
        site.ours("c1")
    )
    assert all(sid not in name for name in site.ours("c1") | site.ours("c2"))
    assert site.events(sid)[-1].state is AppState.CANCELLED
    with pytest.raises(Conflict):
        site.bridge.done("alice", blocker) and site.bridge.withdraw("alice", blocker)


def test_a_refusing_cluster_rolls_back_and_the_start_is_retried(site):
    sid = site.subscribe()
    site.step(T0 + 1)
    site.adapter.refuse_reservations("c2", 1, "Requested nodes are busy")
    site.request(sid, {"c1": 2, "c2": 2}, 100)
    site.step(T0 + 2)
    assert site.state(sid) is AppState.WAITING
    assert site.ours("c1") == {}  # rolled back: nothing held anywhere
    assert site.service.stats.placement_failures == 1
    site.step(T0 + 3)
    assert site.state(sid) is AppState.STARTED
    (start,) = site.events(sid, "start")
    assert start.time == T0 + 3


def test_reconciliation_deletes_orphans_and_recreates_lost_placeholders(site):
    sid = site.subscribe()
    site.step(T0 + 1)
    site.request(sid, {"c1": 2, "c2": 1}, 1000)
    site.step(T0 + 2)
    orphan = ReservationSpec(
        name=f"coorm-{site.store.instance}-nobody-c1",
        start=T0 + 5,
        end=T0 + 50,
        hosts=1,
        users=("mallory",),
    )
    site.adapter.create_reservation("c1", orphan)
    lost = site.store.placeholder(sid, "c2")
    site.adapter.delete_reservation("c2", lost.name)
    done = site.loop.reconcile()
    assert done == {"orphans": 1, "recreated": 1}
    assert set(site.ours("c1")) == {site.store.placeholder(sid, "c1").name}
    again = site.ours("c2")[lost.name]
    assert (again.hosts, again.end, again.users) == (1, lost.end, ("alice",))
    assert site.loop.reconcile() == {}


def test_a_silent_cluster_degrades_health_keeps_the_last_view_and_recovers(site):
    site.adapter.outage("c2", T0 + 10, T0 + 30)
    assert site.bridge.health().status == "ok"
    site.step(T0 + 10)
    health = site.bridge.health()
    assert health.status == "degraded"
    assert health.clusters["c2"].status == "stale"
    assert health.clusters["c2"].failures == 1
    assert "does not answer" in health.clusters["c2"].error
    assert health.clusters["c1"].status == "ok"
    assert site.service.poller.delay("c2") == 10.0  # backed off from 5
    sid = site.subscribe()
    site.step(T0 + 11)
    info = site.bridge.info("alice", sid)
    assert info.stale == ("c2",)
    assert {cap.cluster: cap.steps for cap in info.view.profiles}["c2"] == ((T0 + 11, 4),)
    site.step(T0 + 30)
    assert site.bridge.health().status == "ok"


def test_users_see_and_act_only_on_their_own_sessions(tmp_path):
    site = Site(tmp_path)
    site.service.settings.apply(
        site.config.model_copy(update={"bridge": BridgeSettings(admins=("root",))})
    )
    sid = site.subscribe()
    for act in (
        lambda: site.bridge.info("mallory", sid),
        lambda: site.bridge.put_request("mallory", sid, {"c1": 1}, 10),
        lambda: site.bridge.done("mallory", sid),
        lambda: site.bridge.withdraw("mallory", sid),
        lambda: site.bridge.events("mallory", sid, 0),
    ):
        with pytest.raises(NotFound):
            act()
    assert site.bridge.sessions_of("mallory") == []
    assert [s.session for s in site.bridge.sessions_of("root")] == [sid]
    assert site.bridge.info("root", sid).owner == "alice"
    assert site.state(sid) is AppState.SUBMITTED


def test_bad_requests_are_refused_and_change_nothing(site):
    sid = site.subscribe(clusters=("c1",))
    site.step(T0 + 1)
    before = site.store.session(sid)
    for nodes, duration in (({"c2": 1}, 10), ({"c1": 1}, -5), ({"c1": 0}, 10), ({"c1": "x"}, 10)):
        with pytest.raises(Invalid):
            site.bridge.put_request("alice", sid, nodes, duration)
    assert site.store.session(sid) == before
    with pytest.raises(Invalid):
        site.bridge.subscribe("alice", Filter(min_hosts=100), None)


def test_a_request_larger_than_the_platform_waits_with_no_estimate(site):
    sid = site.subscribe()
    site.step(T0 + 1)
    site.request(sid, {"c1": 9}, 10)
    site.step(T0 + 2)
    row = site.store.session(sid)
    assert (row.state, row.estimated_start) == (AppState.WAITING, None)


def test_a_node_going_down_is_seen_in_the_next_view(site):
    sid = site.subscribe()
    site.step(T0 + 1)
    site.adapter.set_node_state("c2", "c2-1", NodeState.DOWN)
    seen = site.store.last_seq(sid)
    site.step(T0 + 2)
    (change,) = site.store.events(sid, after=seen)  # what its launcher reads next
    profiles = {c.cluster: c.profile.steps for c in change.changes if c.profile is not None}
    assert profiles["c2"] == ((T0 + 2, 3),)


@pytest.mark.parametrize(("fair_start", "protected"), [(30, True), (5, False)])
def test_fair_start_protects_a_slow_selector_from_a_later_fast_one(tmp_path, fair_start, protected):
    """The paper's Fig. 5 and 7: App1 (older, selector takes 10 s) and App2 (younger, instant)
    both adapt to hosts freed early by App0. With fair_start above App1's 10 s, App1 gets them;
    below it, App2 takes them first and App1 ends much later."""
    site = Site(tmp_path, fair_start=fair_start)
    foreign = JobSpec(name="foreign", user="carol", argv=("sleep",), hosts=4, walltime=1000)
    site.adapter.submit("c1", foreign)
    app0, app1, app2 = (site.subscribe(clusters=("c1",)) for _ in range(3))
    site.step(T0 + 1)
    site.request(app0, {"c1": 4}, 1000)
    site.request(app1, {"c1": 8}, 500)
    site.request(app2, {"c1": 4}, 2000)
    site.step(T0 + 2)
    assert site.store.session(app1).estimated_start == T0 + 1002
    assert site.store.session(app2).estimated_start == T0 + 1502
    site.step(T0 + 100)
    site.bridge.done("alice", app0)  # finishes 900 s early: 4 hosts are free
    site.step(T0 + 100)
    site.request(app2, {"c1": 4}, 800)  # the fast selector adapts at once
    for t in range(T0 + 101, T0 + 110):
        site.step(t)
    site.request(app1, {"c1": 4}, 800)  # the slow one, 10 s after the view changed
    for t in range(T0 + 110, T0 + 140):
        site.step(t)
    site.step(T0 + 2000)
    start1 = site.store.session(app1).started_at
    start2 = site.store.session(app2).started_at
    if protected:
        assert start1 == T0 + 100 + fair_start
        assert start2 > start1
    else:
        assert start2 == T0 + 100 + fair_start
        assert start1 >= start2 + 800  # waits for App2: its end moves by ~800 s


def test_placeholders_follow_a_start_that_moves_and_keep_their_name(tmp_path):
    site = Site(tmp_path, horizon=600)
    first, second = site.subscribe(), site.subscribe()
    site.step(T0 + 1)
    site.request(first, {"c1": 8}, 500)
    site.request(second, {"c1": 2, "c2": 1}, 60)
    site.step(T0 + 2)
    before = {p.cluster: p for p in site.store.placeholders(second)}
    assert {p.start for p in before.values()} == {T0 + 502}
    site.step(T0 + 100)
    site.bridge.done("alice", first)  # 400 s early: the second moves to the ghost's end
    site.step(T0 + 100)
    after = {p.cluster: p for p in site.store.placeholders(second)}
    assert {c: (p.name, p.start, p.end) for c, p in after.items()} == {
        c: (p.name, T0 + 130, T0 + 190) for c, p in before.items()
    }
    held = site.ours("c1")[before["c1"].name]
    assert (held.start, held.end) == (T0 + 130, T0 + 190)
    site.step(T0 + 130)
    (start,) = site.events(second, "start")
    assert start.time == T0 + 130


def test_a_session_the_batch_system_rejects_does_not_hold_up_the_others(tmp_path):
    site = Site(tmp_path, attempts=2)
    original = site.adapter.create_reservation

    def picky(cluster, spec):
        if spec.users == ("mallory",):
            raise AdapterError("Invalid user id")
        return original(cluster, spec)

    site.adapter.create_reservation = picky
    rejected, fine = site.subscribe(user="mallory"), site.subscribe()
    site.step(T0 + 1)
    site.request(rejected, {"c1": 2}, 100, user="mallory")
    site.request(fine, {"c1": 2}, 100)
    for t in range(T0 + 2, T0 + 6):
        site.step(t)
    assert site.state(fine) is AppState.STARTED
    assert site.state(rejected) is AppState.WAITING
    assert site.store.placeholders(rejected) == []
    assert site.service.stats.placement_failures >= 2


def test_a_host_going_down_under_a_started_application_kills_it_and_frees_the_rest(site):
    sid, other = site.subscribe(), site.subscribe()
    site.step(T0 + 1)
    site.request(sid, {"c1": 2, "c2": 2}, 1000)
    site.step(T0 + 2)
    (start,) = site.events(sid, "start")
    lost = start.allocations["c2"].hosts[0]
    site.request(other, {"c2": 3}, 100)  # waits for the first one's hosts
    site.step(T0 + 3)
    assert site.state(other) is AppState.WAITING
    site.adapter.set_node_state("c2", lost, NodeState.DOWN)
    site.step(T0 + 10)
    killed = site.events(sid, "killed")
    assert [k.reason for k in killed] == [f"host {lost} of c2 went down"]
    assert site.state(sid) is AppState.FINISHED
    assert site.events(sid)[-1].type == "ended"
    assert site.store.placeholders(sid) == []
    assert all(sid not in name for name in site.ours("c1") | site.ours("c2"))
    # Its hosts are the others' again: three c2 hosts are up, just what the other one asked.
    site.step(T0 + 11)
    (other_start,) = site.events(other, "start")
    assert lost not in other_start.allocations["c2"].hosts


def test_a_cluster_upgrade_and_a_new_link_reach_the_sessions_that_see_them(site):
    both, only_c2 = site.subscribe(), site.subscribe(clusters=("c2",))
    site.step(T0 + 1)
    assert site.service.catalogue.refresh() == {}  # nothing changed: nobody is told anything
    before = {sid: site.store.last_seq(sid) for sid in (both, only_c2)}

    upgraded = site.adapter.upgrade("c1", speed=2.5, ram_per_host_mib=4096)
    changes = site.service.catalogue.refresh()
    assert [(c.cluster, c.kind) for cs in changes.values() for c in cs] == [("c1", "info")]
    # What each launcher reads next (the new change carries the views it superseded too).
    told = site.store.events(both, after=before[both])
    assert [(c.kind, c.info) for e in told for c in e.changes if c.kind == "info"] == [
        ("info", upgraded)
    ]
    assert site.store.last_seq(only_c2) == before[only_c2]
    assert {c.name: c.speed for c in site.bridge.infos} == {"c1": 2.5, "c2": 1.0}

    link = Link(clusters=("c1", "c2"), latency_s=0.002, bandwidth_bps=1e9)
    site.adapter.set_links([link])
    site.service.catalogue.refresh()
    for sid in (both, only_c2):
        last = site.events(sid)[-1]
        assert last.type == "change"
        links = {(c.cluster, c.links) for c in last.changes if c.kind == "interconnect"}
        assert links <= {("c1", (link,)), ("c2", (link,))}
    linked = [{c.cluster for c in site.events(s)[-1].changes if c.links} for s in (both, only_c2)]
    assert linked == [{"c1", "c2"}, {"c2"}]
    assert site.bridge.interconnect.links == (link,)


def test_a_batch_system_that_cannot_say_its_clusters_changes_nothing(site):
    sid = site.subscribe()
    site.step(T0 + 1)
    seen = len(site.events(sid))
    site.adapter.upgrade("c1", speed=3.0)
    original = site.adapter.clusters

    def silent():
        raise AdapterError("the controller does not answer")

    site.adapter.clusters = silent
    assert site.service.catalogue.refresh() == {}
    assert len(site.events(sid)) == seen
    site.adapter.clusters = original
    assert list(site.service.catalogue.refresh()) == ["c1"]


def test_a_cluster_name_of_60_characters_gets_valid_placeholders(tmp_path):
    long = "c" + "x" * 59  # hosts are named <cluster>-<i>: 63 characters at most
    platform = f'start = {T0}\n[[cluster]]\nname = "{long}"\nhosts = 2\n'
    adapter = MockAdapter(parse_platform(platform), VirtualClock(T0))
    with Store(tmp_path / "bridge.sqlite") as store:
        whole = Config(limits=LimitSettings(held_share=1.0))  # every host (default: half)
        service = assemble(whole, adapter, store)
        bridge, loop = service.bridge, service.loop
        sid = bridge.subscribe("alice", Filter(), None).session
        bridge.put_request("alice", sid, {long: 2}, 60)
        loop.poll(long)
        loop.tick()
        assert store.session(sid).state is AppState.STARTED
        (start,) = [e for e in store.events(sid) if e.type == "start"]
        name = start.allocations[long].reservation
        assert len(name) <= 63
        assert name.startswith(f"coorm-{store.instance}-{sid}-")
        shot = adapter.snapshot([long]).clusters[long]
        assert [r.name for r in shot.reservations] == [name]


def test_two_bridges_on_one_platform_leave_each_other_s_reservations_alone(tmp_path):
    adapter = MockAdapter(parse_platform(PLATFORM), VirtualClock(T0))
    bridges = []
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        store = Store(tmp_path / folder / "bridge.sqlite")
        bridges.append((assemble(Config(), adapter, store), store))
    (first, first_store), (second, second_store) = bridges
    assert first_store.instance != second_store.instance
    sid = first.bridge.subscribe("alice", Filter(clusters=("c2",)), None).session
    first.bridge.put_request("alice", sid, {"c2": 3}, 600)
    for service, _ in bridges:
        service.loop.poll("c2")
        service.loop.tick()
    assert first_store.session(sid).state is AppState.STARTED
    assert second.loop.reconcile() == {}  # not an orphan of the second bridge
    names = [r.name for r in adapter.snapshot(["c2"]).clusters["c2"].reservations]
    assert len(names) == 1
    assert names[0].startswith(f"coorm-{first_store.instance}-")
    # The second bridge sees the first one's hosts as taken: a newcomer there waits.
    other = second.bridge.subscribe("bob", Filter(clusters=("c2",)), None).session
    second.bridge.put_request("bob", other, {"c2": 2}, 60)
    second.loop.poll("c2")
    second.loop.tick()
    assert second_store.session(other).state is AppState.WAITING
    assert second_store.session(other).estimated_start == T0 + 600
    for _, store in bridges:
        store.close()
