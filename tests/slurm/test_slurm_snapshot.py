"""Snapshots of partitions of one real Slurm 22.05 controller through the command back-end's
text path: what they show is what was submitted, and each command runs once per snapshot
however many partitions are read (counted by a runner that wraps the real one)."""

from __future__ import annotations

import getpass
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

import pytest

from coorm_bridge.adapters.batch.runner import Completed, LocalRunner
from coorm_bridge.adapters.slurm import answers, parse
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import JobSpec, JobState, NodeState, ReservationSpec
from coorm_bridge.service.polling import Poller

pytestmark = pytest.mark.slurm

USER = getpass.getuser()


class Counting(LocalRunner):
    """The real commands, counted by name."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        self.calls[argv[0]] += 1
        return super().run(argv, env=env, timeout=timeout)


@pytest.fixture
def counted(slurm_partitions) -> Iterator[tuple[SlurmAdapter, Counting]]:
    runner = Counting()
    settings = SlurmSettings(
        clusters=tuple(
            SlurmCluster(name=p, partition=p, slurm_conf=slurm_partitions.conf)
            for p in slurm_partitions.clusters
        )
    )
    adapter = SlurmAdapter(settings, SlurmCliBackend(runner))
    try:
        yield adapter, runner
    finally:
        adapter.close()
        slurm_partitions.reset()


def sleeper(hosts: int, walltime: int) -> JobSpec:
    return JobSpec(name="snap", user=USER, argv=("sleep", "600"), hosts=hosts, walltime=walltime,
                   workdir="/tmp")  # fmt: skip


def sbatch(slurm, *options: str) -> str:
    done = slurm.run("sbatch", "--parsable", "--chdir=/tmp", *options, "--wrap=sleep 600")
    return answers.parse_job_id(done.stdout)


def wait(predicate, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError("condition not met in time")


def test_two_partitions_read_with_one_command_each_show_what_was_submitted(
    counted, slurm_partitions
):
    adapter, runner = counted
    alpha, beta = slurm_partitions.clusters[:2]
    running = adapter.submit(alpha, sleeper(hosts=6, walltime=1200))
    array = sbatch(slurm_partitions, f"--partition={alpha}", "--nodes=1", "--time=5",
                   "--array=0-2")  # fmt: skip
    waiting = adapter.submit(alpha, sleeper(hosts=4, walltime=600))
    # Before the 8-host job of two partitions: a scheduling pass between the two would start
    # that one on beta, all idle then (and the reservation below would find beta busy).
    unlimited = sbatch(slurm_partitions, f"--partition={beta}", "--nodes=3", "--time=UNLIMITED")
    both = sbatch(slurm_partitions, f"--partition={alpha},{beta}", "--nodes=8", "--time=30")
    now = adapter.now()
    reservation = ReservationSpec(name="coorm-snap-r", start=now + 900, end=now + 1800, hosts=2,
                                  users=(USER,))  # fmt: skip
    adapter.create_reservation(beta, reservation)

    def settled():
        runner.calls.clear()
        shot = adapter.snapshot([alpha, beta])
        jobs = {c: {j.id: j for j in shot.clusters[c].jobs} for c in (alpha, beta)}
        started = [jobs[alpha].get(i) for i in (running, f"{array}_0", f"{array}_1")]
        started.append(jobs[beta].get(unlimited))
        if all(j is not None and j.state is JobState.RUNNING for j in started):
            planned = jobs[alpha].get(waiting)
            # The backfill's own prediction (the adapter's estimate would be there at once).
            return shot if planned is not None and planned.start else None
        return None

    shot = wait(settled)
    # One controller: one squeue, one sinfo, one scontrol for both partitions.
    assert runner.calls == {"squeue": 1, "sinfo": 1, "scontrol": 1}
    a, b = shot.clusters[alpha], shot.clusters[beta]
    jobs_a, jobs_b = {j.id: j for j in a.jobs}, {j.id: j for j in b.jobs}

    assert set(jobs_a) == {running, f"{array}_0", f"{array}_1", f"{array}_2", waiting, both}
    assert set(jobs_b) == {unlimited, both}
    first = jobs_a[running]
    assert (first.hosts, first.walltime, first.user) == (6, 1200, USER)
    assert len(first.host_names) == 6
    assert {h for j in a.jobs for h in j.host_names} == set(slurm_partitions.nodes[alpha])
    # Array tasks are jobs of their own; the pending one has a start (Slurm's or estimated).
    assert [len(jobs_a[f"{array}_{i}"].host_names) for i in (0, 1)] == [1, 1]
    assert jobs_a[f"{array}_2"].state is JobState.PENDING
    assert jobs_a[f"{array}_2"].start is not None
    assert jobs_a[f"{array}_2"].walltime == 300
    # Slurm predicts the 4-host job when the 6-host one reaches its walltime bound.
    assert jobs_a[waiting].state is JobState.PENDING
    assert jobs_a[waiting].start >= first.start + 1200 - 60
    # A job pending in two partitions is in both clusters.
    assert jobs_a[both].state is jobs_b[both].state is JobState.PENDING
    assert jobs_a[both].hosts == 8
    assert jobs_b[unlimited].walltime == parse.UNLIMITED_WALLTIME
    assert len(jobs_b[unlimited].host_names) == 3
    (held,) = b.reservations
    assert (held.name, held.hosts, held.start, held.end) == (
        "coorm-snap-r", 2, reservation.start, reservation.end
    )  # fmt: skip
    assert a.reservations == ()
    assert [n.name for n in a.nodes] == slurm_partitions.nodes[alpha]
    assert [n.name for n in b.nodes] == slurm_partitions.nodes[beta]
    assert all(n.state is NodeState.UP for n in (*a.nodes, *b.nodes))

    # The JSON path, read now, agrees on every job but the array's tasks.
    raw = slurm_partitions.run("squeue", "--json").stdout
    by_json = {j.id: j for j in parse.parse_squeue(raw, alpha, now=shot.time)}
    for job_id in (running, waiting, both):
        seen = by_json[job_id]
        mine = jobs_a[job_id]
        assert (seen.state, seen.hosts, seen.host_names, seen.walltime) == (
            mine.state, mine.hosts, mine.host_names, mine.walltime
        )  # fmt: skip


def test_drained_and_down_nodes_are_seen_in_their_partition(counted, slurm_partitions):
    adapter, runner = counted
    alpha, beta = slurm_partitions.clusters[:2]
    drained, down = slurm_partitions.nodes[beta][-1], slurm_partitions.nodes[beta][-2]
    try:
        slurm_partitions.run("scontrol", "update", f"nodename={drained}", "state=drain",
                             "reason=coorm-test")  # fmt: skip
        slurm_partitions.run("scontrol", "update", f"nodename={down}", "state=down",
                             "reason=coorm-test")  # fmt: skip
        shot = adapter.snapshot([alpha, beta])
        assert runner.calls == {"squeue": 1, "sinfo": 1, "scontrol": 1}
        states = {n.name: n.state for n in shot.clusters[beta].nodes}
        assert states[drained] is NodeState.DRAINED
        assert states[down] is NodeState.DOWN
        assert sum(s is NodeState.UP for s in states.values()) == 6
        assert all(n.state is NodeState.UP for n in shot.clusters[alpha].nodes)
    finally:
        for node in (drained, down):
            slurm_partitions.run("scontrol", "update", f"nodename={node}", "state=resume",
                                 check=False)  # fmt: skip


def test_the_daemon_polls_the_partitions_of_one_controller_with_one_read(counted, slurm_partitions):
    """The daemon's poller, not only ``snapshot()``: polling alpha refreshes beta from the same
    answer, and the loop has one polling job for the controller."""
    adapter, runner = counted
    poller = Poller(adapter, list(slurm_partitions.clusters), "coorm-", interval=1.0)
    assert poller.groups == [tuple(slurm_partitions.clusters)]
    runner.calls.clear()
    poller.poll("alpha")
    assert (runner.calls["squeue"], runner.calls["sinfo"], runner.calls["scontrol"]) == (1, 1, 1)
    for name in slurm_partitions.clusters:
        status = poller.status(name)
        assert status.snapshot is not None
        assert not status.stale
