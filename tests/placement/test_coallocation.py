"""Co-allocation on the mock platform: every cluster at one start, or nothing anywhere."""

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import VirtualClock, parse_platform
from coorm_bridge.core.batch import (
    AdapterError,
    JobSpec,
    JobState,
    Refused,
    ReservationHandle,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.placement.coallocation import CoAllocationFailed, hold, placeholder_name, release

T0 = 5_000_000
NODES = {"a": 4, "b": 2, "c": 3}


def platform(cls: type[MockAdapter] = MockAdapter) -> MockAdapter:
    text = f"start = {T0}\n" + "".join(
        f'[[cluster]]\nname = "{c}"\nhosts = 8\n' for c in ("a", "b", "c")
    )
    return cls(parse_platform(text), VirtualClock(T0))


def reservations(p: MockAdapter) -> dict[str, list[str]]:
    snap = p.snapshot()
    return {c: [r.name for r in s.reservations] for c, s in snap.clusters.items()}


def take(p: MockAdapter, **kw: object) -> dict[str, ReservationHandle]:
    args = {
        "prefix": "coorm-",
        "session_id": "s1",
        "owner": "alice",
        "nodes": NODES,
        "start": T0 + 60,
        "end": T0 + 660,
    } | kw
    return hold(p, **args)  # type: ignore[arg-type]


def test_every_cluster_holds_and_jobs_inside_start_at_the_same_moment():
    p = platform()
    handles = take(p)
    assert {c: len(h.host_names) for c, h in handles.items()} == NODES
    snap = p.snapshot()
    for cluster, shot in snap.clusters.items():
        (resa,) = shot.reservations
        assert resa.name == f"coorm-s1-{cluster}"
        assert resa.users == ("alice",)
        assert (resa.start, resa.end) == (T0 + 60, T0 + 660)
    jobs = {
        c: p.submit(
            c,
            JobSpec(
                name="app",
                user="alice",
                argv=("solver",),
                hosts=n,
                walltime=600,
                reservation=f"coorm-s1-{c}",
            ),
        )
        for c, n in NODES.items()
    }
    p.run_until(T0 + 59)
    assert all(p.job_state(c, j) is JobState.PENDING for c, j in jobs.items())
    p.run_until(T0 + 60)
    assert all(p.job_state(c, j) is JobState.RUNNING for c, j in jobs.items())


def test_a_busy_cluster_refuses_and_nothing_is_left_anywhere():
    p = platform()
    p.create_reservation(
        "b", ReservationSpec(name="maint", start=T0, end=T0 + 3600, hosts=8, users=("root",))
    )
    with pytest.raises(CoAllocationFailed, match="b refused") as caught:
        take(p)
    assert reservations(p) == {"a": [], "b": ["maint"], "c": []}
    assert caught.value.retry_after == {"b": T0 + 3600}
    assert caught.value.leftovers == ()


def test_a_silent_cluster_rolls_back_and_is_named():
    p = platform()
    p.outage("c", T0, T0 + 100)
    with pytest.raises(CoAllocationFailed, match="c did not answer") as caught:
        take(p)
    assert caught.value.unavailable == ("c",)
    assert isinstance(caught.value.__cause__, Unavailable)
    p.run_until(T0 + 100)
    assert reservations(p) == {"a": [], "b": [], "c": []}


class Shrinking(MockAdapter):
    """What Slurm 22.05 does when a partition is short: a smaller reservation, no error."""

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        if cluster == "b":
            spec = spec.model_copy(update={"hosts": spec.hosts - 1})
        return super().create_reservation(cluster, spec)


def test_a_reservation_smaller_than_asked_is_deleted_and_refused():
    p = platform(Shrinking)
    with pytest.raises(CoAllocationFailed, match="1 hosts instead of 2"):
        take(p)
    assert reservations(p) == {"a": [], "b": [], "c": []}


class Sticky(MockAdapter):
    """A batch system that will not delete (e.g. a reservation in use)."""

    def delete_reservation(self, cluster: str, name: str) -> None:
        raise Refused("Requested reservation is in use", cluster=cluster)


def test_what_cannot_be_rolled_back_is_reported_for_reconciliation():
    p = platform(Sticky)
    p.outage("c", T0, T0 + 100)
    with pytest.raises(CoAllocationFailed) as caught:
        take(p)
    assert caught.value.leftovers == (("a", "coorm-s1-a"), ("b", "coorm-s1-b"))


def test_release_deletes_every_placeholder():
    p = platform()
    handles = take(p)
    assert release(p, handles) == []
    assert reservations(p) == {"a": [], "b": [], "c": []}


def test_placeholder_names_are_validated():
    assert placeholder_name("coorm-", "Ab_9-x", "c1") == "coorm-Ab_9-x-c1"
    with pytest.raises(ValueError, match="not a valid"):
        placeholder_name("coorm-", "s;rm -rf", "c1")
    with pytest.raises(ValueError, match="not a valid"):
        placeholder_name("coorm-", "x" * 80, "c1")


def test_handles_name_the_hosts_the_batch_system_chose():
    p = platform()
    handles = take(p)
    snap = p.snapshot()
    for cluster, handle in handles.items():
        assert handle.cluster == cluster
        (resa,) = snap.clusters[cluster].reservations
        assert sorted(handle.host_names) == sorted(resa.host_names)
        assert len(set(handle.host_names)) == NODES[cluster]


def test_any_adapter_error_rolls_back_and_is_a_co_allocation_failure():
    class Broken(MockAdapter):
        def create_reservation(self, cluster, spec):
            if cluster == "c":
                raise AdapterError("Invalid user id")
            return super().create_reservation(cluster, spec)

    p = platform(Broken)
    with pytest.raises(CoAllocationFailed, match="c failed: Invalid user id"):
        take(p)
    assert reservations(p) == {"a": [], "b": [], "c": []}
