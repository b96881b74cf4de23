"""A placeholder refused because preemptible work (API v2) still runs on the hosts it needs.

Slurm refuses a reservation on hosts where a job runs, and hints "retry when that job ends":
its time limit. When the job is preemptible work that the bridge takes back itself, following
the hint put the preempting session's placement, and so the preemption, off until the work's
own end: the session waited for the work it preempts. The mock here refuses as Slurm does.
"""

from __future__ import annotations

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import VirtualClock, parse_platform
from coorm_bridge.core.batch import (
    JobSpec,
    JobState,
    Refused,
    ReservationHandle,
    ReservationSpec,
)
from coorm_bridge.core.model import Filter
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import RequestType, TypedRequest
from coorm_bridge.service.config import Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

T0 = 1_000_000
PLATFORM = f'start = {T0}\n[[cluster]]\nname = "c1"\nhosts = 8\n'


class Busy(MockAdapter):
    """Refuses a reservation over hosts that running jobs outside reservations use, with the
    hint Slurm gives: when the last of them ends."""

    def _refuse_busy(self, cluster: str, spec: ReservationSpec) -> None:
        shot = self.snapshot([cluster]).clusters[cluster]
        jobs = [
            j
            for j in shot.jobs
            if j.state is JobState.RUNNING and j.reservation is None and (j.end or 0) > spec.start
        ]
        busy = {h for j in jobs for h in j.host_names}
        if len(shot.nodes) - len(busy) < spec.hosts:
            end = max(j.end or 0 for j in jobs)
            raise Refused("Requested nodes are busy", cluster=cluster, retry_after=end)

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self._refuse_busy(cluster, spec)
        return super().create_reservation(cluster, spec)

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self._refuse_busy(cluster, spec)
        return super().update_reservation(cluster, spec)


def step(adapter, service, t):
    adapter.run_until(t)
    service.loop.poll("c1")
    service.loop.tick()


def events(service, sid, kind):
    return [e for e in service.store.events(sid) if e.type == kind]


def test_a_session_preempting_work_starts_at_the_deadline_not_at_the_works_time_limit(tmp_path):
    adapter = Busy(parse_platform(PLATFORM), VirtualClock(T0))
    config = Config(
        policy=PolicyConfig(interval=1.0, fair_start=0),
        placement=PlacementSettings(poll_interval=1.0),
        limits=LimitSettings(held_share=1.0),
    )
    service = assemble(config, adapter, Store(tmp_path / "bridge.sqlite"))
    evolving = service.bridge.evolving
    assert evolving is not None
    sid = evolving.subscribe("alice", Filter(), None).session
    request = TypedRequest(
        id="p", cluster="c1", hosts=8, duration=7200, type=RequestType.PREEMPTIBLE
    )
    evolving.request("alice", sid, request)
    step(adapter, service, T0 + 1)
    assert evolving.request_info("alice", sid, "p").state is AppState.STARTED
    spec = JobSpec(name="sweep", user="alice", argv=("true",), hosts=8, walltime=7200)
    job = adapter.submit("c1", spec)
    step(adapter, service, T0 + 2)
    assert adapter.job_state("c1", job) is JobState.RUNNING

    bob = service.bridge.subscribe("bob", Filter(), None).session
    service.bridge.put_request("bob", bob, {"c1": 8}, 600)
    for t in range(T0 + 3, T0 + 20):
        step(adapter, service, t)
        if service.store.session(bob).state is AppState.STARTED:
            break
    (preempt,) = [e for e in events(service, sid, "preempt") if e.request == "p"]
    assert [e for e in events(service, sid, "killed") if e.request == "p"]
    assert adapter.job_state("c1", job) is JobState.CANCELLED
    assert service.store.session(bob).state is AppState.STARTED
    (start,) = events(service, bob, "start")
    assert preempt.deadline <= start.time < T0 + 20  # not at the work's limit, T0 + 7202
