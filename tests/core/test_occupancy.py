"""Free-host profiles derived from batch-system snapshots (what the policy starts from)."""

from coorm_bridge.core.batch import ClusterSnapshot, Job, JobState, Node, NodeState, Reservation
from coorm_bridge.core.occupancy import free_profile

NOW = 1_000
PREFIX = "coorm-"


def nodes(up: int, down: int = 0, drained: int = 0) -> tuple[Node, ...]:
    made = [Node(name=f"n{i}") for i in range(up)]
    made += [Node(name=f"d{i}", state=NodeState.DOWN) for i in range(down)]
    made += [Node(name=f"r{i}", state=NodeState.DRAINED) for i in range(drained)]
    return tuple(made)


def snapshot(**kw: object) -> ClusterSnapshot:
    return ClusterSnapshot(cluster="c1", time=NOW, **kw)  # type: ignore[arg-type]


def test_empty_cluster_is_all_free():
    profile = free_profile(snapshot(nodes=nodes(8)), PREFIX)
    assert profile.value_at(NOW) == 8
    assert len(profile) == 0


def test_running_job_holds_until_its_walltime_bound():
    job = Job(id="1", state=JobState.RUNNING, hosts=3, walltime=600, start=NOW - 100)
    profile = free_profile(snapshot(nodes=nodes(8), jobs=(job,)), PREFIX)
    assert profile.value_at(NOW) == 5
    assert profile.value_at(NOW + 499) == 5
    assert profile.value_at(NOW + 500) == 8


def test_overrunning_job_still_holds_its_hosts_now():
    job = Job(id="1", state=JobState.RUNNING, hosts=3, walltime=60, start=NOW - 100)
    profile = free_profile(snapshot(nodes=nodes(8), jobs=(job,)), PREFIX)
    assert profile.value_at(NOW) == 5
    assert profile.value_at(NOW + 1) == 8


def test_pending_job_counts_from_its_predicted_start_only():
    predicted = Job(id="1", state=JobState.PENDING, hosts=4, walltime=100, start=NOW + 50)
    unknown = Job(id="2", state=JobState.PENDING, hosts=8, walltime=100)
    profile = free_profile(snapshot(nodes=nodes(8), jobs=(predicted, unknown)), PREFIX)
    assert profile.steps(NOW) == [(NOW, 8), (NOW + 50, 4), (NOW + 150, 8)]


def test_down_and_drained_nodes_are_unavailable_forever():
    profile = free_profile(snapshot(nodes=nodes(6, down=1, drained=1)), PREFIX)
    assert profile.value_at(NOW) == 6
    assert profile.final == 6


def test_down_node_running_a_job_is_not_counted_twice():
    job = Job(
        id="1",
        state=JobState.RUNNING,
        hosts=2,
        host_names=("n0", "d0"),
        walltime=100,
        start=NOW,
    )
    profile = free_profile(snapshot(nodes=nodes(3, down=1), jobs=(job,)), PREFIX)
    assert profile.value_at(NOW) == 2
    assert profile.final == 3


def test_foreign_reservation_counts_and_its_jobs_do_not_count_twice():
    resa = Reservation(name="maint", start=NOW + 10, end=NOW + 20, hosts=4)
    inside = Job(
        id="1", state=JobState.PENDING, hosts=4, walltime=10, start=NOW + 10, reservation="maint"
    )
    profile = free_profile(snapshot(nodes=nodes(8), jobs=(inside,), reservations=(resa,)), PREFIX)
    assert profile.steps(NOW) == [(NOW, 8), (NOW + 10, 4), (NOW + 20, 8)]


def test_our_placeholders_and_their_jobs_are_not_foreign_load():
    ours = Reservation(name="coorm-s1-c1", start=NOW, end=NOW + 100, hosts=4, users=("alice",))
    job = Job(
        id="7",
        state=JobState.RUNNING,
        hosts=4,
        walltime=100,
        start=NOW,
        reservation="coorm-s1-c1",
    )
    profile = free_profile(snapshot(nodes=nodes(8), jobs=(job,), reservations=(ours,)), PREFIX)
    assert profile.value_at(NOW) == 8


def test_past_reservation_is_ignored_and_overcommit_is_clamped():
    old = Reservation(name="old", start=NOW - 200, end=NOW - 100, hosts=8)
    big = Reservation(name="big", start=NOW, end=NOW + 10, hosts=8)
    job = Job(id="1", state=JobState.RUNNING, hosts=4, walltime=10, start=NOW)
    profile = free_profile(snapshot(nodes=nodes(8), jobs=(job,), reservations=(old, big)), PREFIX)
    assert profile.value_at(NOW) == 0
    assert profile.min_value() == 0
    assert profile.value_at(NOW + 10) == 8
