"""A placeholder refused with the batch system's hint ("this reservation could run at X", as OAR
and Slurm say): the session is tried again at once, held from X, not left unheld until X.

Waiting until X to try again left the hosts free for anyone in between, and the bridge then met
a new refusal with a new hint, over and over: OAR's ``security_time`` made an announced update's
placeholder a second too early, and the update was not held for the 30 minutes of its related
request (seen on a loaded machine).
"""

from __future__ import annotations

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import VirtualClock, parse_platform
from coorm_bridge.core.batch import Refused, ReservationHandle, ReservationSpec
from coorm_bridge.core.model import Filter
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.core.states import AppState
from coorm_bridge.service.config import Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

T0 = 1_000_000
PLATFORM = f'start = {T0}\n[[cluster]]\nname = "c1"\nhosts = 8\n'
HINT = T0 + 600  # within the placement horizon


class Hinting(MockAdapter):
    """Refuses any reservation that begins before ``HINT``, saying it could run at ``HINT``."""

    asked: list[int]

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self.asked.append(spec.start)
        if spec.start < HINT:
            raise Refused("Reservation not valid", cluster=cluster, retry_after=HINT)
        return super().create_reservation(cluster, spec)


def step(adapter, service, t):
    adapter.run_until(t)
    service.loop.poll("c1")
    service.loop.tick()


def test_a_refused_placeholder_is_held_from_the_hint_at_the_next_attempt(tmp_path):
    adapter = Hinting(parse_platform(PLATFORM), VirtualClock(T0))
    adapter.asked = []
    config = Config(
        policy=PolicyConfig(interval=1.0, fair_start=0),
        placement=PlacementSettings(poll_interval=1.0, horizon=3600),
        limits=LimitSettings(held_share=1.0),
    )
    service = assemble(config, adapter, Store(tmp_path / "bridge.sqlite"))
    sid = service.bridge.subscribe("alice", Filter(), None).session
    service.bridge.put_request("alice", sid, {"c1": 4}, 1200)
    t = T0
    while service.store.placeholder(sid, "c1") is None and t < T0 + 10:
        t += 1
        step(adapter, service, t)
    held = service.store.placeholder(sid, "c1")
    assert held is not None, f"not held within 10 s of the refusal; asked from {adapter.asked}"
    assert held.start == HINT
    assert adapter.asked[0] < HINT  # refused once, then held from the hint
    (failed,) = [e for e in service.store.events(sid) if e.type == "placement_failed"]
    assert failed.retry_at < HINT  # the launcher is told the next attempt, not the hint
    changes = [e for e in service.store.events(sid) if e.type == "change"]
    assert changes[-1].estimated_start == HINT
    step(adapter, service, HINT)
    assert service.store.session(sid).state is AppState.STARTED
