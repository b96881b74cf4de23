"""The mock platform as the bridge sees it: through the adapter interface, on a virtual clock."""

import threading
import time

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import (
    RUNTIME_KEY,
    VirtualClock,
    WallClock,
    load_platform,
    parse_platform,
    read_swf,
    replay_jobs,
    trace_path,
)
from coorm_bridge.core.batch import (
    AdapterError,
    JobSpec,
    JobState,
    NodeState,
    Refused,
    ReservationSpec,
    Unavailable,
)

DATA = trace_path("nasa").parent
NASA = DATA / "NASA-iPSC-1993-3.1-cln.swf.gz"
T0 = 1_000_000


def small(hosts: int = 8, clusters: tuple[str, ...] = ("a", "b"), extra: str = "") -> MockAdapter:
    text = f"start = {T0}\n" + "".join(
        f'[[cluster]]\nname = "{name}"\nhosts = {hosts}\n' for name in clusters
    )
    return MockAdapter(parse_platform(text + extra, base_dir=DATA), VirtualClock(T0))


def job(hosts: int, walltime: int, reservation: str | None = None, runtime: int | None = None):
    env = {} if runtime is None else {RUNTIME_KEY: str(runtime)}
    return JobSpec(
        name="app",
        user="alice",
        argv=("true",),
        hosts=hosts,
        walltime=walltime,
        reservation=reservation,
        environment=env,
    )


def resa(name: str, start: int, end: int, hosts: int) -> ReservationSpec:
    return ReservationSpec(name=name, start=start, end=end, hosts=hosts, users=("alice",))


def run_to_completion(platform: MockAdapter) -> None:
    while (due := platform.next_event_time()) is not None:
        platform.run_until(due)


def test_default_platform_runs_with_no_configuration():
    platform = MockAdapter(load_platform(), VirtualClock(T0))
    assert [c.name for c in platform.clusters()] == ["alpha", "beta", "gamma"]
    assert platform.interconnect().link("alpha", "gamma") is not None
    platform.run_until(T0 + 6 * 3600)
    snap = platform.snapshot()
    assert snap.time == T0 + 6 * 3600
    assert {name: len(s.nodes) for name, s in snap.clusters.items()} == {
        "alpha": 64,
        "beta": 32,
        "gamma": 16,
    }
    assert any(j.state is JobState.RUNNING for s in snap.clusters.values() for j in s.jobs)


@pytest.mark.slow
def test_nasa_replay_executes_exactly_the_trace_node_seconds():
    extra = '[[load]]\nkind = "swf"\ncluster = "a"\npath = "NASA-iPSC-1993-3.1-cln.swf.gz"\n'
    platform = small(hosts=128, clusters=("a",), extra=extra)
    run_to_completion(platform)
    records = platform.schedulers["a"].records()
    expected = replay_jobs(read_swf(NASA), max_hosts=128)
    assert len(records) == len(expected) == 18_066
    submits = {f"load1-{j.id}": T0 + j.submit for j in expected}
    assert all(r.start is not None and r.start >= submits[r.id] for r in records)
    assert all(r.state is JobState.COMPLETED for r in records)
    used = sum((r.end - r.start) * r.hosts for r in records if r.end and r.start)
    assert used == sum(j.runtime * j.hosts for j in expected) == 474_238_015


def test_on_a_cluster_too_large_to_queue_every_job_starts_at_submit():
    extra = (
        '[[load]]\nkind = "swf"\ncluster = "a"\npath = "NASA-iPSC-1993-3.1-cln.swf.gz"\n'
        "max_jobs = 3000\n"
    )
    platform = small(hosts=100_000, clusters=("a",), extra=extra)
    expected = replay_jobs(read_swf(NASA), max_hosts=128)[:3000]
    submits = {f"load1-{j.id}": T0 + j.submit for j in expected}
    run_to_completion(platform)
    records = platform.schedulers["a"].records()
    assert len(records) == 3000
    assert all(r.start == submits[r.id] for r in records)


def test_same_inputs_give_the_same_event_sequence():
    def replay() -> list[tuple]:
        platform = MockAdapter(load_platform(), VirtualClock(T0))
        platform.run_until(T0 + 3 * 86_400)
        return [
            (r.id, r.start, r.end, r.host_names, r.state)
            for s in platform.schedulers.values()
            for r in s.records()
        ]

    first = replay()
    assert first == replay()
    assert sum(start is not None for _, start, *_ in first) > 100


def test_outage_makes_one_cluster_unavailable_then_it_recovers():
    platform = small()
    platform.outage("a", T0 + 100, T0 + 200)
    platform.run_until(T0 + 150)
    with pytest.raises(Unavailable) as caught:
        platform.snapshot(["a"])
    assert caught.value.cluster == "a"
    with pytest.raises(Unavailable):
        platform.create_reservation("a", resa("r1", T0 + 300, T0 + 400, 2))
    assert platform.snapshot(["b"]).clusters["b"].time == T0 + 150
    platform.run_until(T0 + 200)
    assert platform.snapshot(["a"]).time == T0 + 200


def test_refused_reservation_is_typed_and_only_the_next_ones():
    platform = small()
    platform.refuse_reservations("a", count=1, reason="Requested nodes are busy")
    with pytest.raises(Refused, match="busy"):
        platform.create_reservation("a", resa("r1", T0 + 10, T0 + 20, 2))
    assert platform.snapshot().clusters["a"].reservations == ()
    handle = platform.create_reservation("a", resa("r1", T0 + 10, T0 + 20, 2))
    assert len(handle.host_names) == 2


def test_reservation_larger_than_the_cluster_is_refused():
    platform = small(hosts=4)
    with pytest.raises(Refused):
        platform.create_reservation("a", resa("big", T0 + 10, T0 + 20, 5))


def test_job_in_a_reservation_starts_when_it_begins_on_its_hosts():
    platform = small()
    handle = platform.create_reservation("a", resa("coorm-1-a", T0 + 60, T0 + 600, 3))
    job_id = platform.submit("a", job(3, 300, reservation="coorm-1-a"))
    assert platform.job_state("a", job_id) is JobState.PENDING
    platform.run_until(T0 + 60)
    assert platform.job_state("a", job_id) is JobState.RUNNING
    (running,) = [j for j in platform.snapshot().clusters["a"].jobs if j.id == job_id]
    assert running.start == T0 + 60
    assert sorted(running.host_names) == sorted(handle.host_names)


def test_job_ending_early_and_job_overrunning():
    platform = small()
    early = platform.submit("a", job(2, 600, runtime=100))
    over = platform.submit("a", job(2, 600, runtime=900))
    platform.run_until(T0 + 100)
    assert platform.job_state("a", early) is JobState.COMPLETED
    assert platform.job_state("a", over) is JobState.RUNNING
    platform.run_until(T0 + 600)
    assert platform.job_state("a", over) is JobState.FAILED


def test_node_down_during_a_job_fails_it():
    platform = small(hosts=2, clusters=("a",))
    job_id = platform.submit("a", job(2, 600))
    platform.run_until(T0 + 10)
    (running,) = platform.snapshot().clusters["a"].jobs
    platform.set_node_state("a", running.host_names[0], NodeState.DOWN, at=T0 + 50)
    platform.run_until(T0 + 60)
    assert platform.job_state("a", job_id) is JobState.FAILED
    nodes = {n.name: n.state for n in platform.snapshot().clusters["a"].nodes}
    assert nodes[running.host_names[0]] is NodeState.DOWN


def test_simulated_runtime_must_be_whole_positive_seconds():
    platform = small()
    bad = JobSpec(
        name="x",
        user="alice",
        argv=("true",),
        hosts=1,
        walltime=60,
        environment={RUNTIME_KEY: "soon"},
    )
    with pytest.raises(AdapterError, match=RUNTIME_KEY):
        platform.submit("a", bad)
    with pytest.raises(AdapterError, match="unknown cluster"):
        platform.submit("zz", job(1, 60))


def test_wall_clock_platform_moves_by_itself():
    clock = WallClock(speedup=1000.0, origin=T0)
    try:
        platform = MockAdapter(load_platform(), clock)
        first = platform.snapshot().time
        time.sleep(0.05)
        assert platform.snapshot().time >= first + 20
        with pytest.raises(AdapterError, match="virtual clock"):
            platform.run_until(T0 + 10)
    finally:
        clock.close()


def test_now_is_the_platform_clock():
    platform = small()
    assert platform.now() == T0
    platform.run_until(T0 + 500)
    assert platform.now() == platform.snapshot().time == T0 + 500


def test_scheduled_outage_is_relative_to_the_clock_at_construction():
    t1 = 2_000_000
    text = "".join(f'[[cluster]]\nname = "{name}"\nhosts = 4\n' for name in ("a", "b"))
    text += '[[outage]]\ncluster = "a"\nstart = 100\nend = 200\n'
    platform = MockAdapter(parse_platform(text), VirtualClock(t1))
    for t, down in ((t1 + 99, False), (t1 + 100, True), (t1 + 199, True), (t1 + 200, False)):
        platform.run_until(t)
        assert platform.snapshot(["b"]).time == t
        if down:
            with pytest.raises(Unavailable, match="simulated outage") as caught:
                platform.snapshot(["a"])
            assert caught.value.cluster == "a"
            with pytest.raises(Unavailable):
                platform.submit("a", job(1, 60))
        else:
            assert platform.snapshot(["a"]).time == t


def test_concurrent_callers_never_enter_the_simulation_together():
    extra = (
        '[[load]]\nkind = "synthetic"\ncluster = "a"\nmean_interarrival = 5\nmean_runtime = 30\n'
        '[[load]]\nkind = "synthetic"\ncluster = "b"\nmean_interarrival = 5\nmean_runtime = 30\n'
    )
    text = f"start = {T0}\n" + "".join(
        f'[[cluster]]\nname = "{name}"\nhosts = 16\n' for name in ("a", "b")
    )
    far = T0 + 10**7  # reservations stay in the future for the whole test, even at 1000x
    threads, rounds = 8, 30
    kept: dict[str, dict[str, str]] = {"a": {}, "b": {}}  # cluster -> reservation -> job id
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def hammer(number: int) -> None:
        try:
            barrier.wait()
            for i in range(rounds):
                cluster = "ab"[(number + i) % 2]
                name = f"r-{number}-{i}"
                start = far + (number * rounds + i) * 1000
                platform.create_reservation(cluster, resa(name, start, start + 500, 2))
                assert cluster in platform.snapshot().clusters
                if i % 3 == 0:
                    platform.delete_reservation(cluster, name)
                    continue
                kept[cluster][name] = platform.submit(cluster, job(2, 400, reservation=name))
                platform.submit(cluster, job(1, 60, runtime=5))
        except BaseException as error:  # reported below with the thread's traceback
            errors.append(error)

    clock = WallClock(speedup=1000.0, origin=T0)
    try:
        platform = MockAdapter(parse_platform(text + extra), clock)
        workers = [threading.Thread(target=hammer, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        snap = platform.snapshot()
        assert snap.time > T0
        for cluster, reservations in kept.items():
            held = {r.name: r for r in snap.clusters[cluster].reservations}
            assert set(held) == set(reservations)
            assert all(len(set(r.host_names)) == r.hosts == 2 for r in held.values())
            pending = {j.id: j for j in snap.clusters[cluster].jobs if j.reservation}
            assert {j.reservation for j in pending.values()} == set(reservations)
            for name, job_id in reservations.items():
                assert pending[job_id].reservation == name
                assert platform.job_state(cluster, job_id) is JobState.PENDING
        ids = [j.id for s in snap.clusters.values() for j in s.jobs]
        assert len(ids) == len(set(ids))
    finally:
        clock.close()


def test_a_job_whose_process_ended_ends_in_the_simulation_with_its_state():
    platform = small()
    platform.create_reservation("a", resa("r", T0, T0 + 3600, 4))
    # A front end's job: its simulated run time is longer than its walltime (it runs until
    # its process ends), so that reaching the limit is a failure, as a killed job is.
    first = platform.submit("a", job(4, 600, "r", runtime=601))
    second = platform.submit("a", job(4, 600, "r", runtime=601))
    platform.run_until(T0 + 100)
    assert platform.job_state("a", first) is JobState.RUNNING
    assert platform.job_state("a", second) is JobState.PENDING
    platform.end_job("a", first, JobState.COMPLETED)
    assert platform.job_state("a", first) is JobState.COMPLETED
    # Its hosts are free at once: the next job of the reservation starts now, not at 600.
    (running,) = [j for j in platform.snapshot(["a"]).clusters["a"].jobs if j.id == second]
    assert (running.state, running.start) == (JobState.RUNNING, T0 + 100)
    platform.run_until(T0 + 100 + 600)
    assert platform.job_state("a", second) is JobState.FAILED  # killed at its limit
    platform.end_job("a", second, JobState.COMPLETED)  # too late: it stays as it ended
    assert platform.job_state("a", second) is JobState.FAILED
    with pytest.raises(AdapterError, match=r"no job a\.99"):
        platform.end_job("a", "a.99", JobState.FAILED)


def test_the_default_platform_opens_as_a_busy_site_whose_predictions_move():
    def opened() -> MockAdapter:
        return MockAdapter(load_platform(), VirtualClock(T0))

    platform = opened()
    snap = platform.snapshot()
    for name, cluster in snap.clusters.items():
        running = [j for j in cluster.jobs if j.state is JobState.RUNNING]
        pending = [j for j in cluster.jobs if j.state is JobState.PENDING]
        assert len(running) >= 3, name
        assert len(pending) >= 2, name
        assert all(j.start is not None and j.start < T0 for j in running)  # from before it opened
        assert all(j.start is not None and j.start > T0 for j in pending)  # with predicted starts
    assert opened().snapshot() == snap  # the same site every time
    # Jobs end before their walltime and others arrive: predicted starts move earlier.
    predicted = {
        j.id: j.start for c in snap.clusters.values() for j in c.jobs if j.state is JobState.PENDING
    }
    platform.run_until(T0 + 2 * 3600)
    later = platform.snapshot()
    moved = [
        j.id
        for c in later.clusters.values()
        for j in c.jobs
        if j.state is JobState.PENDING and j.id in predicted and j.start != predicted[j.id]
    ]
    arrived = [j.id for c in later.clusters.values() for j in c.jobs if j.id not in predicted]
    assert moved
    assert all(
        j.start is not None and predicted[j.id] is not None and j.start < predicted[j.id]
        for c in later.clusters.values()
        for j in c.jobs
        if j.id in moved
    )
    assert arrived


def test_a_warmup_runs_the_load_before_the_start_and_outages_still_count_from_it():
    text = (
        f"start = {T0}\nwarmup = 7200\n"
        '[[cluster]]\nname = "a"\nhosts = 4\n'
        '[[load]]\nkind = "synthetic"\ncluster = "a"\ncount = 50\nmean_interarrival = 300\n'
        '[[outage]]\ncluster = "a"\nstart = 60\nend = 120\n'
    )
    platform = MockAdapter(parse_platform(text), VirtualClock(T0))
    records = platform.schedulers["a"].records()
    assert min(r.submit for r in records) < T0 - 3600  # the load began two hours before
    assert platform.snapshot(["a"]).time == T0
    platform.run_until(T0 + 90)
    with pytest.raises(Unavailable):
        platform.snapshot(["a"])
    cold = parse_platform(text.replace("warmup = 7200\n", ""))
    assert MockAdapter(cold, VirtualClock(T0)).schedulers["a"].records()[0].submit >= T0
    assert cold.identity() != parse_platform(text).identity()
