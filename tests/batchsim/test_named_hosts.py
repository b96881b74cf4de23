"""Jobs that name their hosts on the mock's scheduler (Slurm's ``--nodelist``): the bridge's front
end runs an evolving application's request jobs so, on exactly the request's hosts. They start
only there, wait while one of them is busy or, outside a reservation, reserved over their
walltime, and are refused for names the cluster or their reservation does not have; a journal
of such jobs replays after a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from coorm_bridge.batchsim import (
    Journal,
    LocalJobSpec,
    LocalScheduler,
    SchedulingPolicy,
    Site,
    VirtualClock,
    parse_platform,
)
from coorm_bridge.core.batch import JobSpec, JobState, Refused, ReservationSpec

CBF = SchedulingPolicy.CONSERVATIVE
EASY = SchedulingPolicy.EASY


def cluster(policy: SchedulingPolicy = CBF, hosts: int = 4) -> LocalScheduler:
    return LocalScheduler("c", [f"n{i}" for i in range(hosts)], policy=policy, start=0)


def job(
    name: str,
    hosts: int,
    walltime: int,
    names: tuple[str, ...] = (),
    reservation: str | None = None,
) -> LocalJobSpec:
    return LocalJobSpec(
        id=name,
        user="u",
        hosts=hosts,
        walltime=walltime,
        runtime=walltime,
        reservation=reservation,
        host_names=names,
    )


def running_on(scheduler: LocalScheduler, job_id: str) -> tuple[str, ...]:
    (found,) = [j for j in scheduler.snapshot().jobs if j.id == job_id]
    assert found.state is JobState.RUNNING, found
    return found.host_names


@pytest.mark.parametrize("policy", [CBF, EASY])
def test_a_job_naming_free_hosts_starts_on_exactly_those(policy: SchedulingPolicy) -> None:
    s = cluster(policy)
    s.submit(job("a", 2, 100, ("n3", "n1")))
    assert set(running_on(s, "a")) == {"n1", "n3"}
    s.submit(job("b", 2, 100))  # anyone's job takes what is left
    assert set(running_on(s, "b")) == {"n0", "n2"}


@pytest.mark.parametrize("policy", [CBF, EASY])
def test_a_named_host_busy_makes_the_job_wait_for_it(policy: SchedulingPolicy) -> None:
    s = cluster(policy)
    s.submit(job("busy", 1, 100, ("n2",)))
    s.submit(job("a", 2, 50, ("n1", "n2")))
    assert s.job_state("a") is JobState.PENDING  # n1 is free, n2 is not: it waits
    if policy is CBF:
        (pending,) = [j for j in s.snapshot().jobs if j.id == "a"]
        assert pending.start == 100
        assert set(pending.host_names) == {"n1", "n2"}  # asked for, shown while it waits
    s.submit(job("other", 2, 150))  # others backfill around its planned hosts meanwhile
    assert set(running_on(s, "other")) == {"n0", "n3"}
    s.advance(100)
    assert set(running_on(s, "a")) == {"n1", "n2"}


def test_an_early_end_on_a_named_host_starts_the_waiting_job_then() -> None:
    s = cluster()
    s.submit(job("busy", 1, 100, ("n0",)))
    s.submit(job("a", 1, 50, ("n0",)))
    s.advance(10)
    s.end("busy", JobState.COMPLETED)
    assert running_on(s, "a") == ("n0",)


@pytest.mark.parametrize("policy", [CBF, EASY])
def test_outside_reservations_a_named_job_avoids_a_reservation_over_its_walltime(
    policy: SchedulingPolicy,
) -> None:
    s = cluster(policy)
    s.create_reservation(
        ReservationSpec(name="r", start=50, end=200, host_names=("n1",), users=("v",))
    )
    s.submit(job("long", 1, 100, ("n1",)))  # would run into the reservation: after it
    s.submit(job("short", 1, 40, ("n1",)))  # ends before it: now
    assert running_on(s, "short") == ("n1",)
    assert s.job_state("long") is JobState.PENDING
    s.advance(200)
    assert running_on(s, "long") == ("n1",)


def test_inside_a_reservation_a_named_job_runs_on_its_named_hosts_only() -> None:
    s = cluster()
    s.create_reservation(
        ReservationSpec(name="r", start=0, end=500, host_names=("n0", "n1", "n2"), users=("u",))
    )
    s.submit(job("first", 1, 100, ("n0",), reservation="r"))
    s.submit(job("second", 1, 100, ("n0",), reservation="r"))
    s.submit(job("any", 2, 100, reservation="r"))
    assert running_on(s, "first") == ("n0",)
    assert set(running_on(s, "any")) == {"n1", "n2"}
    assert s.job_state("second") is JobState.PENDING  # n0 only, though nothing else is free
    s.advance(100)
    assert running_on(s, "second") == ("n0",)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (job("x", 1, 10, ("n9",)), "n9 is not in c"),
        (job("x", 2, 10, ("n1", "n1")), "n1 is named twice"),
        (job("x", 2, 10, ("n1",)), "1 hosts named, 2 asked"),
        (job("x", 1, 10, ("n3",), reservation="r"), "n3 not in reservation r"),
    ],
)
def test_names_it_cannot_use_are_refused_and_change_nothing(
    spec: LocalJobSpec, reason: str
) -> None:
    s = cluster()
    s.create_reservation(ReservationSpec(name="r", start=0, end=500, hosts=2, users=("u",)))
    with pytest.raises(Refused, match=reason):
        s.submit(spec)
    assert s.records() == []


def test_the_bridge_s_job_spec_names_as_many_hosts_as_it_asks() -> None:
    with pytest.raises(ValueError, match="names 1 hosts but asks for 2"):
        JobSpec(name="j", user="u", argv=("true",), hosts=2, walltime=10, host_names=("n0",))
    with pytest.raises(ValueError, match="names a host twice"):
        JobSpec(name="j", user="u", argv=("true",), hosts=2, walltime=10, host_names=("a", "a"))


def test_a_site_s_journal_replays_named_jobs(tmp_path: Path) -> None:
    spec = parse_platform('start = 1000\n[[cluster]]\nname = "c1"\nhosts = 4\n')
    path = tmp_path / "journal.sqlite"
    submitted = JobSpec(
        name="j", user="u", argv=("true",), hosts=2, walltime=100, host_names=("c1-3", "c1-2")
    )
    site = Site(spec, VirtualClock(1000), journal=Journal(path))
    hosts = [n.name for n in site.snapshot(["c1"]).clusters["c1"].nodes]
    assert hosts[2:] == ["c1-2", "c1-3"]
    first = site.submit("c1", submitted.model_copy(update={"host_names": ("c1-2", "c1-3")}))
    again = site.submit("c1", submitted)  # the same hosts: it waits for the first
    seen = site.snapshot(["c1"]).clusters["c1"].jobs
    site.close()
    site = Site(spec, VirtualClock(1000), journal=Journal(path))
    try:
        assert site.snapshot(["c1"]).clusters["c1"].jobs == seen
        assert site.job_state("c1", first) is JobState.RUNNING
        assert site.job_state("c1", again) is JobState.PENDING
    finally:
        site.close()
