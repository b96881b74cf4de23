"""BatchAdapter, the generic part of every batch-system adapter, over an in-memory back-end."""

from __future__ import annotations

import pytest

from coorm_bridge.adapters.batch.adapter import BatchAdapter
from coorm_bridge.adapters.batch.backend import Backend, BatchFailure, Binding, Hardware
from coorm_bridge.adapters.batch.settings import BatchCluster, BatchSettings
from coorm_bridge.core.batch import (
    AdapterError,
    Job,
    JobSpec,
    JobState,
    LacksRights,
    Node,
    NotPermitted,
    Refused,
    Reservation,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.model import Submission

NOW = 1_000_000


class Memory(Backend[Binding]):
    """A batch system of 4 hosts per cluster that may shrink reservations or fail on demand."""

    def __init__(self) -> None:
        self.reservations: dict[str, Reservation] = {}
        self.hardware_reads = 0
        self.shrink = False
        self.failure: BatchFailure | None = None
        self.jobs = [
            Job(id="1", state=JobState.RUNNING, hosts=4, walltime=600, start=NOW - 60),
            Job(id="2", state=JobState.PENDING, hosts=2, walltime=600),
        ]

    def _fail(self) -> None:
        if self.failure is not None:
            raise self.failure

    def hardware(self, binding):
        self.hardware_reads += 1
        return Hardware(hosts=4, cores_per_host=8, ram_per_host_mib=1024)

    def read(self, binding, now):
        self._fail()
        nodes = [Node(name=f"{binding.name}{i}") for i in range(4)]
        return nodes, list(self.jobs), list(self.reservations.values())

    def reservation(self, binding, name):
        return self.reservations.get(name)

    def create_reservation(self, binding, spec):
        self._fail()
        hosts = spec.size - 1 if self.shrink else spec.size
        self.reservations[spec.name] = Reservation(
            name=spec.name,
            start=spec.start,
            end=spec.end,
            hosts=hosts,
            host_names=tuple(f"{binding.name}{i}" for i in range(hosts)),
            users=spec.users,
        )

    def update_reservation(self, binding, spec, *, begun=False):
        self._fail()
        self.create_reservation(binding, spec)

    def delete_reservation(self, binding, name):
        self._fail()
        if self.reservations.pop(name, None) is None:
            raise BatchFailure("no_such_reservation", f"Reservation {name} not found")

    def submit(self, binding, job):
        self._fail()
        if job.name.startswith("0."):
            raise ValueError(f"invalid job name {job.name!r}")
        return "7"

    def cancel(self, binding, job_id):
        self._fail()

    def job_state(self, binding, job_id):
        self._fail()
        return JobState.RUNNING


class Clocked(BatchAdapter[Binding]):
    system = "Memory"

    def now(self) -> int:
        return NOW


@pytest.fixture
def backend():
    return Memory()


@pytest.fixture
def adapter(backend):
    clusters = (BatchCluster(name="a", speed=2.0), BatchCluster(name="b"))
    settings = BatchSettings(kind="memory", clusters=clusters)
    return Clocked(settings, backend, [Binding("a"), Binding("b")])


def spec(start=NOW + 60, end=NOW + 600, hosts=2):
    return ReservationSpec(name="coorm-s-a", start=start, end=end, hosts=hosts, users=("alice",))


def test_the_catalogue_is_read_once_and_completed_from_the_settings(adapter, backend):
    first = adapter.clusters()
    assert adapter.clusters() == first
    assert backend.hardware_reads == 2
    assert [(c.name, c.hosts, c.cores_per_host, c.speed) for c in first] == [
        ("a", 4, 8, 2.0),
        ("b", 4, 8, 1.0),
    ]


def test_each_cluster_says_how_to_submit_as_its_binding_tells(backend):
    class Told(Binding):
        def submission(self) -> Submission:
            return Submission(kind="slurm", partition=self.name)

    clusters = (BatchCluster(name="a"), BatchCluster(name="b"))
    settings = BatchSettings(kind="memory", clusters=clusters)
    adapter = Clocked(settings, backend, [Told("a"), Binding("b")])
    infos = {c.name: c.submission for c in adapter.clusters()}
    assert infos == {"a": Submission(kind="slurm", partition="a"), "b": None}


def test_a_pending_job_without_a_start_gets_one(adapter):
    (pending,) = [j for j in adapter.snapshot(["a"]).clusters["a"].jobs if j.id == "2"]
    assert pending.start == NOW + 540  # after the running job frees the hosts


def test_what_was_made_is_verified_and_a_smaller_one_deleted(adapter, backend):
    handle = adapter.create_reservation("a", spec())
    assert (handle.start, handle.end, handle.host_names) == (NOW + 60, NOW + 600, ("a0", "a1"))
    adapter.delete_reservation("a", "coorm-s-a")
    backend.shrink = True
    with pytest.raises(Refused, match="Memory made reservation coorm-s-a with 1 hosts instead"):
        adapter.create_reservation("a", spec())
    assert backend.reservations == {}


def test_a_begun_reservation_keeps_its_start(adapter):
    adapter.create_reservation("a", spec(start=NOW - 10))
    with pytest.raises(Refused, match="has begun"):
        adapter.update_reservation("a", spec(start=NOW + 30))
    longer = adapter.update_reservation("a", spec(start=NOW - 10, end=NOW + 900))
    assert longer.end == NOW + 900


def test_deleting_what_is_gone_is_not_an_error(adapter):
    adapter.delete_reservation("a", "never-made")


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("unreachable", Unavailable),
        ("busy", Refused),
        ("overlap", Refused),
        ("in_use", Refused),
        ("invalid_time", Refused),
        ("invalid_user", NotPermitted),  # for good: the session it was for ends
        ("no_rights", LacksRights),  # the bridge's own: an admin must act, no session ends
        ("other", AdapterError),
    ],
)
def test_failures_become_the_interfaces_errors(adapter, backend, kind, error):
    backend.failure = BatchFailure(kind, "no")
    with pytest.raises(error, match=r"^a: no$") as caught:
        adapter.create_reservation("a", spec())
    assert type(caught.value) is error
    assert caught.value.cluster == "a"
    # Whatever a read failed with, the batch system cannot be used now.
    with pytest.raises(Unavailable):
        adapter.snapshot(["a"])


@pytest.mark.parametrize("error", [Unavailable, AdapterError])
def test_the_runners_own_errors_name_the_cluster_too(adapter, backend, error):
    backend.failure = error("sinfo did not answer within 2 s; it said: no slurm.conf")
    with pytest.raises(error, match=r"^a: sinfo did not answer .*no slurm.conf$") as caught:
        adapter.create_reservation("a", spec())
    assert type(caught.value) is error
    assert caught.value.cluster == "a"


def test_a_request_the_back_end_refuses_to_build_is_a_configuration_error(adapter):
    job = JobSpec(name="0.hidden", user="alice", argv=("true",), hosts=1, walltime=60)
    with pytest.raises(AdapterError, match="invalid job name"):
        adapter.submit("a", job)


def test_unknown_clusters_and_unbound_clusters_are_named(adapter, backend):
    with pytest.raises(AdapterError, match=r"unknown cluster 'z' \(configured: a, b\)"):
        adapter.job_state("z", "1")
    settings = BatchSettings(kind="memory", clusters=(BatchCluster(name="a"),))
    with pytest.raises(AdapterError, match="clusters and bindings differ: b"):
        Clocked(settings, backend, [Binding("a"), Binding("b")])


def test_one_cluster_that_cannot_be_read_fails_alone(adapter, backend):
    """read_all's default reads every cluster; the one that failed raises for itself only, and
    a snapshot asking for it raises as a read of it alone did (a parser's ValueError as well)."""
    reads = []
    original = backend.read

    def read(binding, now):
        reads.append(binding.name)
        if binding.name == "a":
            raise BatchFailure("unreachable", "no")
        return original(binding, now)

    backend.read = read
    results = backend.read_all([Binding("a"), Binding("b")], NOW)
    assert isinstance(results["a"], BatchFailure)
    assert isinstance(results["b"], tuple)
    assert reads == ["a", "b"]
    assert set(adapter.snapshot(["b"]).clusters) == {"b"}
    with pytest.raises(Unavailable, match=r"^a: no$") as caught:
        adapter.snapshot()
    assert caught.value.cluster == "a"

    def garbled(binding, now):
        raise ValueError("garbled")

    backend.read = garbled
    with pytest.raises(AdapterError, match=r"^b: garbled$"):
        adapter.snapshot(["b"])
