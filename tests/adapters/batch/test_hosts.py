"""Named hosts where a batch system refuses a host count: the choice, and the adapter's retry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coorm_bridge.adapters.batch.adapter import BatchAdapter
from coorm_bridge.adapters.batch.backend import Backend, BatchFailure, Binding, Hardware
from coorm_bridge.adapters.batch.hosts import choose_hosts, earliest_named_start
from coorm_bridge.adapters.batch.settings import BatchCluster, BatchSettings
from coorm_bridge.core.batch import (
    Job,
    JobState,
    Node,
    NodeState,
    Refused,
    Reservation,
    ReservationSpec,
)

NOW = 1_000_000
END = NOW + 300  # when the running job's time limit ends
NODES = tuple(Node(name=f"n{i}") for i in range(8))


def running(name, hosts, end=END, reservation=None):
    return Job(
        id=name,
        state=JobState.RUNNING,
        hosts=len(hosts),
        host_names=tuple(hosts),
        walltime=end - (NOW - 60),
        start=NOW - 60,
        reservation=reservation,
    )


def spec(start=END, hosts=4, name="coorm-x-a"):
    return ReservationSpec(name=name, start=start, end=start + 600, hosts=hosts, users=("alice",))


def test_hosts_of_a_job_ending_at_the_start_are_free_and_those_running_past_it_are_not():
    jobs = [running("1", ["n0", "n1", "n2", "n3"]), running("2", ["n4", "n5"], end=END + 1)]
    assert choose_hosts(spec(), NODES, jobs, ()) == ("n0", "n1", "n2", "n3")
    assert choose_hosts(spec(hosts=6), NODES, jobs, ()) == ("n0", "n1", "n2", "n3", "n6", "n7")
    assert choose_hosts(spec(hosts=7), NODES, jobs, ()) is None
    assert choose_hosts(spec(start=END - 1, hosts=3), NODES, jobs, ()) is None


def test_other_reservations_down_hosts_and_pending_jobs():
    nodes = (*NODES[:7], Node(name="n7", state=NodeState.DOWN))
    other = Reservation(name="theirs", start=END + 500, end=END + 900, hosts=2,
                        host_names=("n0", "n1"))  # fmt: skip
    before = Reservation(name="done", start=NOW, end=END, hosts=2, host_names=("n2", "n3"))
    pending = Job(id="3", state=JobState.PENDING, hosts=8, walltime=60, start=END)
    chosen = choose_hosts(spec(hosts=5), nodes, [pending], [other, before])
    assert chosen == ("n2", "n3", "n4", "n5", "n6")


def test_an_update_keeps_its_own_hosts_first_and_always_those_its_jobs_run_on():
    ours = Reservation(name="coorm-x-a", start=NOW, end=END, hosts=3, host_names=("n5", "n6", "n7"))
    inside = running("9", ["n7"], end=NOW + 10_000, reservation="coorm-x-a")
    chosen = choose_hosts(spec(hosts=4), NODES, [inside], [ours])
    assert chosen == ("n7", "n5", "n6", "n0")


@given(
    ends=st.lists(st.integers(NOW, NOW + 2000), min_size=8, max_size=8),
    start=st.integers(NOW, NOW + 2000),
    size=st.integers(1, 8),
)
def test_a_choice_never_names_a_host_in_use_during_the_window(ends, start, size):
    jobs = [running(str(i), [f"n{i}"], end=e) for i, e in enumerate(ends)]
    chosen = choose_hosts(spec(start=start, hosts=size), NODES, jobs, ())
    free = [f"n{i}" for i, e in enumerate(ends) if e <= start]
    if len(free) < size:
        assert chosen is None
    else:
        assert chosen is not None
        assert len(set(chosen)) == size
        assert set(chosen) <= set(free)


class SlurmLike(Backend[Binding]):
    """Slurm 22.05's rule: a host count avoids hosts whose job ends at the start (off by one);
    hosts named are free from the job's end."""

    def __init__(self) -> None:
        self.jobs = [running("1", [n.name for n in NODES])]  # every host, until END
        self.reservations: dict[str, Reservation] = {}
        self.asked: list[ReservationSpec] = []

    def hardware(self, binding):
        return Hardware(hosts=8, cores_per_host=2, ram_per_host_mib=1000)

    def read(self, binding, now):
        return list(NODES), list(self.jobs), list(self.reservations.values())

    def reservation(self, binding, name):
        return self.reservations.get(name)

    def create_reservation(self, binding, spec):
        self.asked.append(spec)
        if spec.host_names:
            busy = {h for j in self.jobs if j.end > spec.start for h in j.host_names}
            hosts = spec.host_names
        else:
            busy = {h for j in self.jobs if j.end >= spec.start for h in j.host_names}
            hosts = tuple(n.name for n in NODES if n.name not in busy)[: spec.hosts]
        if busy & set(hosts) or len(hosts) < spec.size:
            raise BatchFailure("busy", "Requested nodes are busy")
        self.reservations[spec.name] = Reservation(
            name=spec.name, start=spec.start, end=spec.end, hosts=len(hosts), host_names=hosts
        )

    def update_reservation(self, binding, spec, *, begun=False):
        old = self.reservations.pop(spec.name)
        try:
            self.create_reservation(binding, spec)
        except BatchFailure:
            self.reservations[spec.name] = old
            raise

    def delete_reservation(self, binding, name):
        self.reservations.pop(name, None)

    def submit(self, binding, job):
        raise NotImplementedError

    def cancel(self, binding, job_id):
        raise NotImplementedError

    def job_state(self, binding, job_id):
        raise NotImplementedError


class Clocked(BatchAdapter[Binding]):
    system = "Slurm"

    def now(self) -> int:
        return NOW


@pytest.fixture
def slurm_like():
    return SlurmLike()


@pytest.fixture
def adapter(slurm_like):
    settings = BatchSettings(kind="memory", clusters=(BatchCluster(name="a"),))
    return Clocked(settings, slurm_like, [Binding("a")])


def test_a_count_refused_at_a_job_end_is_held_by_naming_the_hosts(adapter, slurm_like):
    handle = adapter.create_reservation("a", spec())
    assert (handle.start, handle.host_names) == (END, ("n0", "n1", "n2", "n3"))
    assert [s.host_names for s in slurm_like.asked] == [(), ("n0", "n1", "n2", "n3")]


def test_a_move_to_a_job_end_names_the_hosts_too(adapter, slurm_like):
    adapter.create_reservation("a", spec(start=END + 100))
    handle = adapter.update_reservation("a", spec(start=END))
    assert handle.start == END
    assert len(handle.host_names) == 4


def test_hosts_really_busy_stay_refused_with_the_batch_systems_reason(adapter, slurm_like):
    with pytest.raises(Refused, match="Requested nodes are busy"):
        adapter.create_reservation("a", spec(start=END - 1))
    assert slurm_like.reservations == {}
    assert len(slurm_like.asked) == 1  # nothing free to name: not asked again


def test_a_refusal_for_want_of_hosts_over_the_whole_window_says_when_they_will_be():
    """The count-based plan saw 3 free hosts at END; but one of them is reserved from END + 60,
    so no two hosts are free over [END, END + 600) until that reservation ends."""
    nodes = NODES[:4]
    jobs = [running("1", ["n0", "n1", "n2"]), running("2", ["n3"], end=END + 60)]
    theirs = Reservation(name="theirs", start=END + 60, end=END + 200, hosts=2,
                         host_names=("n0", "n1"))  # fmt: skip
    want = spec(hosts=2)
    assert choose_hosts(want, nodes, jobs, [theirs]) is None
    assert earliest_named_start(want, nodes, jobs, [theirs]) == END + 60


def test_the_adapter_passes_the_hint_on(adapter, slurm_like):
    slurm_like.jobs.append(running("2", ["n0", "n1", "n2", "n3", "n4"], end=END + 100))
    with pytest.raises(Refused) as refused:
        adapter.create_reservation("a", spec(hosts=4))
    assert refused.value.retry_after == END + 100
