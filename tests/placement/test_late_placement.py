"""A loaded machine: the batch system's clock moves on between the pass that plans a start for
"now" and the calls that reserve it. Slurm takes such a start (up to 600 s late for a new
reservation, 60 s for a move), and so must the mock: the placement goes through at the first
attempt, from the start planned, instead of failing as "in the past" and being retried.

Deterministic: the mock's virtual clock is moved one second on inside every reservation call,
as a call that waited a second for a busy machine would find it.
"""

from __future__ import annotations

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import VirtualClock, parse_platform
from coorm_bridge.core.batch import ReservationHandle, ReservationSpec
from coorm_bridge.core.model import Filter
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.core.states import AppState
from coorm_bridge.service.config import Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

T0 = 1_000_000
PLATFORM = f"""
start = {T0}
[[cluster]]
name = "c1"
hosts = 8
[[cluster]]
name = "c2"
hosts = 4
"""


class Loaded(MockAdapter):
    """Each reservation call reaches the simulated batch system a second after it was sent."""

    clock: VirtualClock

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self.clock.advance_to(self.clock.now() + 1)
        return super().create_reservation(cluster, spec)

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self.clock.advance_to(self.clock.now() + 1)
        return super().update_reservation(cluster, spec)


def bridge(tmp_path, hold_first=0):
    adapter = Loaded(parse_platform(PLATFORM), VirtualClock(T0))
    config = Config(
        policy=PolicyConfig(interval=1.0, fair_start=0),
        placement=PlacementSettings(poll_interval=5.0, hold_first=hold_first),
        limits=LimitSettings(held_share=1.0),  # one user may hold every host (default: half)
    )
    return adapter, assemble(config, adapter, Store(tmp_path / "bridge.sqlite"))


def step(adapter, service, t=None):
    """Poll every cluster and run a pass with its placements, at ``t`` (default: now)."""
    adapter.run_until(adapter.now() if t is None else t)
    for cluster in ("c1", "c2"):
        service.loop.poll(cluster)
    service.loop.tick()


def events(bridge, sid, kind):
    return [e for e in bridge.store.events(sid) if e.type == kind]


def test_a_start_planned_for_now_holds_though_every_call_arrives_a_second_late(tmp_path):
    adapter, site = bridge(tmp_path)
    sid = site.bridge.subscribe("alice", Filter(clusters=("c1", "c2")), None).session
    step(adapter, site, T0 + 1)
    site.bridge.put_request("alice", sid, {"c1": 4, "c2": 2}, 100)
    step(adapter, site, T0 + 2)
    assert events(site, sid, "placement_failed") == []
    assert site.store.session(sid).state is AppState.STARTED
    (start,) = events(site, sid, "start")
    assert (start.time, start.end) == (T0 + 2, T0 + 102)  # as planned, on both clusters
    assert adapter.now() == T0 + 4  # each cluster's call found the clock a second later
    for cluster, hosts in (("c1", 4), ("c2", 2)):
        held = adapter.reservation(cluster, start.allocations[cluster].reservation)
        assert held is not None
        assert (held.start, held.end, len(held.host_names)) == (T0 + 2, T0 + 102, hosts)


def test_placeholders_moved_to_now_hold_though_the_move_arrives_late(tmp_path):
    """The first waiting application holds its placeholders at its estimated start; when the
    application before it ends early they are moved to now, a second late on each cluster."""
    adapter, site = bridge(tmp_path, hold_first=1)
    first = site.bridge.subscribe("alice", Filter(clusters=("c1", "c2")), None).session
    second = site.bridge.subscribe("bob", Filter(clusters=("c1", "c2")), None).session
    step(adapter, site, T0 + 1)
    site.bridge.put_request("alice", first, {"c1": 8}, 500)
    site.bridge.put_request("bob", second, {"c1": 4, "c2": 2}, 60)
    step(adapter, site, T0 + 2)
    (held,) = {adapter.reservation(c, n).start for c, n in _names(site, second)}
    assert held > T0 + 100  # behind the first application, which holds c1 whole
    site.bridge.done("alice", first)
    done = adapter.now()
    step(adapter, site)  # the first one's placeholders go, the second's move to now
    assert events(site, second, "placement_failed") == []
    (start,) = events(site, second, "start")
    assert done <= start.time < adapter.now()  # planned for now, moved later than that
    assert {adapter.reservation(c, n).start for c, n in _names(site, second)} == {start.time}


def _names(site, sid):
    return [(p.cluster, p.name) for p in site.store.placeholders(sid)]
