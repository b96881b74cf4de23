"""Start estimates for the pending jobs Slurm's backfill left without one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coorm_bridge.adapters.batch.estimate import estimate_starts
from coorm_bridge.core.batch import ClusterSnapshot, Job, JobState, Node, NodeState, Reservation
from coorm_bridge.core.model import MAX_TIME
from coorm_bridge.core.occupancy import foreign_load, free_profile
from coorm_bridge.core.profile import Profile

NOW = 1_000_000


def job(id, state, hosts, walltime, start=None, reservation=None):
    return Job(
        id=id,
        state=state,
        hosts=hosts,
        walltime=walltime,
        start=start,
        reservation=reservation,
        host_names=tuple(f"n{i}" for i in range(hosts)) if state is JobState.RUNNING else (),
    )


def snapshot(jobs, down=0, reservations=()):
    nodes = tuple(
        Node(name=f"n{i}", state=NodeState.DOWN if i >= 8 - down else NodeState.UP)
        for i in range(8)
    )
    return ClusterSnapshot(
        cluster="c", time=NOW, nodes=nodes, jobs=tuple(jobs), reservations=tuple(reservations)
    )


def starts(shot):
    return {j.id: j.start for j in shot.jobs}


def test_unestimated_jobs_are_planned_in_queue_order_after_the_known_ones():
    shot = snapshot(
        [
            job("run", JobState.RUNNING, 6, 100, start=NOW - 10),
            job("known", JobState.PENDING, 4, 50, start=NOW + 90),
            job("small", JobState.PENDING, 2, 30),
            job("wide", JobState.PENDING, 8, 10),
            job("later", JobState.PENDING, 2, 500),
            job("huge", JobState.PENDING, 9, 10),
            job("inside", JobState.PENDING, 1, 10, reservation="r"),
        ],
        reservations=[Reservation(name="r", start=NOW + 1000, end=NOW + 1100, hosts=1)],
    )
    got = starts(estimate_starts(shot))
    assert got["run"] == NOW - 10
    assert got["known"] == NOW + 90  # Slurm's own prediction is kept
    assert got["small"] == NOW  # 2 hosts free now for 30 s
    assert got["wide"] == NOW + 140  # all 8 once "known" ends
    assert got["later"] == NOW + 150  # after "wide", nothing earlier fits 500 s on 2 hosts
    assert got["huge"] is None  # larger than the cluster
    assert got["inside"] is None  # its reservation holds its hosts


def test_down_nodes_shrink_what_can_be_planned_and_free_hosts_count_the_estimates():
    shot = snapshot([job("wait", JobState.PENDING, 7, 100)], down=2)
    estimated = estimate_starts(shot)
    assert starts(estimated)["wait"] is None  # 6 nodes up: it cannot run
    shot = snapshot([job("wait", JobState.PENDING, 5, 100)], down=2)
    estimated = estimate_starts(shot)
    assert starts(estimated)["wait"] == NOW
    free = free_profile(estimated, "coorm-")
    assert free.value_at(NOW) == 1  # 8 - 2 down - 5 planned
    assert free.value_at(NOW + 100) == 6


def test_nothing_to_estimate_returns_the_same_snapshot():
    shot = snapshot([job("run", JobState.RUNNING, 2, 100, start=NOW)])
    assert estimate_starts(shot) is shot


def reference(snapshot):
    """The plan with immutable profiles, as estimate_starts first made it (its definition)."""
    missing = [
        i
        for i, j in enumerate(snapshot.jobs)
        if j.state is JobState.PENDING and j.start is None and j.reservation is None
    ]
    busy = Profile.from_intervals(len(snapshot.nodes), foreign_load(snapshot, own_prefix=None))
    free = busy.clamped(0) if busy.min_value() < 0 else busy
    jobs = list(snapshot.jobs)
    for i in missing:
        start = free.earliest_fit(jobs[i].hosts, jobs[i].walltime, snapshot.time)
        if start is None or start > MAX_TIME - jobs[i].walltime:
            continue
        free = free.add(-jobs[i].hosts, start, start + jobs[i].walltime)
        jobs[i] = jobs[i].model_copy(update={"start": start})
    return snapshot.model_copy(update={"jobs": tuple(jobs)})


@st.composite
def queues(draw):
    """Running jobs (possibly over-committing the cluster), pending ones with and without a
    predicted start, a few shapes repeated (as arrays and scripts make them), reservations."""
    shapes = draw(st.lists(st.tuples(st.integers(1, 9), st.sampled_from([10, 60, 300, 3600])),
                           min_size=1, max_size=4))  # fmt: skip
    jobs = []
    for k in range(draw(st.integers(0, 6))):
        hosts, walltime = draw(st.integers(1, 4)), draw(st.integers(1, 5000))
        jobs.append(job(f"r{k}", JobState.RUNNING, hosts, walltime, start=NOW - 10))
    for k in range(draw(st.integers(0, 40))):
        hosts, walltime = draw(
            st.one_of(st.sampled_from(shapes), st.tuples(st.integers(1, 9), st.integers(1, 5000)))
        )
        start = draw(st.one_of(st.none(), st.integers(NOW, NOW + 5000)))
        jobs.append(job(f"p{k}", JobState.PENDING, hosts, walltime, start=start))
    reservations = [
        Reservation(name=f"x{k}", start=s, end=s + length, hosts=draw(st.integers(1, 8)))
        for k in range(draw(st.integers(0, 3)))
        for s, length in [(draw(st.integers(NOW - 100, NOW + 4000)), draw(st.integers(1, 2000)))]
    ]  # fmt: skip
    return snapshot(jobs, down=draw(st.integers(0, 3)), reservations=reservations)


@given(queues())
def test_the_plan_is_the_conservative_backfill_of_immutable_profiles(shot):
    assert estimate_starts(shot) == reference(shot)
