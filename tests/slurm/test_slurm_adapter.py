"""The Slurm adapter against a real Slurm 22.05 started by tests/slurm/slurm-local.sh.

One controller whose partitions stand for clusters (``slurm_partitions``), and for the
co-allocation test two controllers sharing a slurmdbd (``slurm_clusters``).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from coorm_bridge.adapters.slurm.plugin import make_slurm_adapter
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import JobSpec, JobState, Refused, ReservationSpec
from coorm_bridge.core.model import Filter, Submission
from coorm_bridge.core.occupancy import free_profile
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.service.config import Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

pytestmark = pytest.mark.slurm

USER = getpass.getuser()


@pytest.fixture
def adapter(slurm_partitions):
    settings = SlurmSettings(
        clusters=tuple(
            SlurmCluster(name=p, partition=p, slurm_conf=slurm_partitions.conf)
            for p in slurm_partitions.clusters
        )
    )
    adapter = make_slurm_adapter(settings)
    yield adapter
    adapter.close()
    slurm_partitions.reset()  # every job and reservation of the test goes


def sleeper(seconds=600, hosts=1, reservation=None, walltime=600):
    return JobSpec(
        name="sleeper",
        user=USER,
        argv=("sleep", str(seconds)),
        hosts=hosts,
        walltime=walltime,
        reservation=reservation,
        workdir="/tmp",
    )


def wait(predicate, timeout=60, step=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def test_clusters_are_the_partitions_with_their_hardware(adapter, slurm_partitions):
    infos = {info.name: info for info in adapter.clusters()}
    assert set(infos) == set(slurm_partitions.clusters)
    assert all(info.hosts == 8 for info in infos.values())


def test_the_snapshot_shows_what_was_submitted(adapter, slurm_partitions):
    name = slurm_partitions.clusters[0]
    running = adapter.submit(name, sleeper(hosts=6, walltime=1200))
    waiting = adapter.submit(name, sleeper(hosts=4, walltime=600))
    wait(lambda: adapter.job_state(name, running) is JobState.RUNNING)

    def predicted():
        shot = adapter.snapshot([name]).clusters[name]
        jobs = {job.id: job for job in shot.jobs}
        return shot if jobs.get(waiting) and jobs[waiting].start else None

    shot = wait(predicted)
    jobs = {job.id: job for job in shot.jobs}
    assert jobs[running].state is JobState.RUNNING
    assert len(jobs[running].host_names) == 6
    assert jobs[waiting].state is JobState.PENDING
    # Slurm predicts the 4-host job when the 6-host one reaches its walltime bound.
    assert jobs[waiting].start >= jobs[running].start + 1200 - 60
    assert len(shot.nodes) == 8
    free = free_profile(shot, "coorm-")
    assert free.value_at(shot.time) == 2


def test_placeholders_are_created_resized_shrunk_and_deleted(adapter, slurm_partitions):
    name = slurm_partitions.clusters[1]
    now = adapter.now()
    spec = ReservationSpec(
        name="coorm-t1-x", start=now + 600, end=now + 1800, hosts=2, users=(USER,)
    )
    handle = adapter.create_reservation(name, spec)
    assert (handle.start, handle.end, len(handle.host_names)) == (now + 600, now + 1800, 2)
    bigger = adapter.update_reservation(name, spec.model_copy(update={"hosts": 3}))
    assert len(bigger.host_names) == 3
    # Shrunk to a ghost the way placement does it: same hosts, named, earlier end.
    ghost = adapter.update_reservation(
        name,
        spec.model_copy(update={"hosts": 3, "host_names": bigger.host_names, "end": now + 900}),
    )
    assert ghost.end == now + 900
    assert ghost.host_names == bigger.host_names
    (seen,) = adapter.snapshot([name]).clusters[name].reservations
    assert (seen.name, seen.hosts, seen.users) == ("coorm-t1-x", 3, (USER,))
    adapter.delete_reservation(name, "coorm-t1-x")
    adapter.delete_reservation(name, "coorm-t1-x")  # idempotent
    assert adapter.snapshot([name]).clusters[name].reservations == ()


@contextlib.contextmanager
def system_users(names):
    """Users added to the system's database (Slurm checks reservation users there), deleted
    afterwards by name."""
    added = []
    try:
        for name in names:
            command = ["useradd", "--badname", "-M", "-N", "-s", "/usr/sbin/nologin", name]
            subprocess.run(command, check=True, capture_output=True)
            added.append(name)
        yield names
    finally:
        for name in added:
            subprocess.run(["userdel", name], check=False, capture_output=True)


def test_placeholders_for_users_named_with_at_and_dollar(adapter, slurm_partitions):
    """Names as SSSD and Samba give them reach scontrol's users= and come back the same."""
    name = slurm_partitions.clusters[1]
    now = adapter.now()
    with system_users([f"cs{os.getpid()}@example.org", f"CS{os.getpid()}$"]) as users:
        spec = ReservationSpec(
            name="coorm-t2-x", start=now + 600, end=now + 1800, hosts=1, users=tuple(users)
        )
        adapter.create_reservation(name, spec)
        (seen,) = adapter.snapshot([name]).clusters[name].reservations
        assert seen.users == tuple(users)
        adapter.delete_reservation(name, "coorm-t2-x")


def test_slurm_refusals_are_refused_and_leave_nothing(adapter, slurm_partitions):
    name = slurm_partitions.clusters[2]
    now = adapter.now()
    too_big = ReservationSpec(
        name="coorm-t2-big", start=now + 600, end=now + 900, hosts=9, users=(USER,)
    )
    with pytest.raises(Refused, match="instead of 9"):
        adapter.create_reservation(name, too_big)  # Slurm 22.05 silently makes 8
    assert adapter.snapshot([name]).clusters[name].reservations == ()
    job = adapter.submit(name, sleeper(hosts=8))
    wait(lambda: adapter.job_state(name, job) is JobState.RUNNING)
    busy = ReservationSpec(
        name="coorm-t2-now", start=adapter.now() + 5, end=now + 900, hosts=1, users=(USER,)
    )
    with pytest.raises(Refused, match="busy"):
        adapter.create_reservation(name, busy)
    assert adapter.snapshot([name]).clusters[name].reservations == ()


def test_a_job_submitted_into_a_placeholder_starts_inside_it(adapter, slurm_partitions):
    name = slurm_partitions.clusters[0]
    start = adapter.now() + 5
    spec = ReservationSpec(name="coorm-t3-x", start=start, end=start + 600, hosts=2, users=(USER,))
    handle = adapter.create_reservation(name, spec)
    job = adapter.submit(name, sleeper(hosts=2, reservation="coorm-t3-x", walltime=300))
    wait(lambda: adapter.job_state(name, job) is JobState.RUNNING, timeout=90)
    (running,) = [j for j in adapter.snapshot([name]).clusters[name].jobs if j.id == job]
    assert set(running.host_names) == set(handle.host_names)
    assert running.reservation == "coorm-t3-x"
    with pytest.raises(Refused, match="in use"):
        adapter.delete_reservation(name, "coorm-t3-x")


def test_the_bridge_co_allocates_one_application_over_two_slurm_clusters(slurm_clusters, tmp_path):
    settings = SlurmSettings(
        clusters=tuple(
            SlurmCluster(name=c, slurm_conf=slurm_clusters.confs[c])
            for c in slurm_clusters.clusters
        )
    )
    config = Config(
        policy=PolicyConfig(interval=0.5, fair_start=5),
        placement=PlacementSettings(poll_interval=1.0),
        limits=LimitSettings(held_share=1.0),  # one user may hold every host (default: half)
        adapter=settings,
    )
    adapter = make_slurm_adapter(settings)
    store = Store(tmp_path / "bridge.sqlite")
    service = assemble(config, adapter, store)
    bridge, loop = service.bridge, service.loop
    loop.start()
    try:
        a, b = slurm_clusters.clusters[:2]
        sid = bridge.subscribe(USER, Filter(clusters=(a, b)), "coupled").session
        bridge.put_request(USER, sid, {a: 3, b: 5}, 600)
        start = wait(lambda: next((e for e in store.events(sid) if e.type == "start"), None))
        assert set(start.allocations) == {a, b}
        # The launcher's part: one job per cluster, into the bridge's reservations, at once.
        jobs = {
            c: adapter.submit(
                c,
                sleeper(hosts=len(alloc.hosts), reservation=alloc.reservation, walltime=300),
            )
            for c, alloc in start.allocations.items()
        }

        def started():
            shots = adapter.snapshot([a, b]).clusters
            found = {c: next(j for j in shots[c].jobs if j.id == jobs[c]) for c in (a, b)}
            return found if all(j.state is JobState.RUNNING for j in found.values()) else None

        running = wait(started, timeout=60)
        for c, job in running.items():
            assert set(job.host_names) == set(start.allocations[c].hosts)
        starts = [job.start for job in running.values()]
        print(f"co-allocated jobs started {max(starts) - min(starts)} s apart")
        assert max(starts) - min(starts) <= 2  # within one scheduling interval (bf_interval=2)
        bridge.done(USER, sid)
        wait(lambda: store.session(sid).state.value == "finished", timeout=60)
    finally:
        loop.stop()
        for c in slurm_clusters.clusters:
            slurm_clusters.run("scancel", "-u", USER, cluster=c, check=False)
        adapter.close()
        store.close()


def test_multi_cluster_addressing_with_dash_m_sees_each_cluster(slurm_clusters):
    a, b = slurm_clusters.clusters[:2]
    # One configuration file (a's) and -M for both: slurmdbd routes the commands.
    settings = SlurmSettings(
        clusters=(
            SlurmCluster(name="first", cluster=a, slurm_conf=slurm_clusters.confs[a]),
            SlurmCluster(name="second", cluster=b, slurm_conf=slurm_clusters.confs[a]),
        )
    )
    adapter = make_slurm_adapter(settings)
    try:
        conf = str(slurm_clusters.confs[a])
        assert {c.name: c.submission for c in adapter.clusters()} == {
            "first": Submission(kind="slurm", cluster=a, slurm_conf=conf),
            "second": Submission(kind="slurm", cluster=b, slurm_conf=conf),
        }
        job = adapter.submit("second", sleeper(hosts=2))
        shot = adapter.snapshot()
        assert {n.name for n in shot.clusters["first"].nodes} == set(slurm_clusters.nodes[a])
        assert {n.name for n in shot.clusters["second"].nodes} == set(slurm_clusters.nodes[b])
        assert job in {j.id for j in shot.clusters["second"].jobs}
        assert job not in {j.id for j in shot.clusters["first"].jobs}
    finally:
        slurm_clusters.run("scancel", "-u", USER, cluster=b, check=False)
        adapter.close()


def test_a_slurm_controller_that_stops_answering_degrades_the_bridge_until_it_is_back(
    slurm_partitions, tmp_path
):
    pid_line = next(
        line
        for line in slurm_partitions.conf.read_text().splitlines()
        if line.startswith("SlurmctldPidFile=")
    )
    ctld = int(Path(pid_line.split("=", 1)[1]).read_text())
    settings = SlurmSettings(
        timeout=2,
        clusters=tuple(
            SlurmCluster(name=p, partition=p, slurm_conf=slurm_partitions.conf)
            for p in slurm_partitions.clusters
        ),
    )
    config = Config(placement=PlacementSettings(poll_interval=0.5), adapter=settings)
    store = Store(tmp_path / "bridge.sqlite")
    service = assemble(config, make_slurm_adapter(settings), store)
    bridge, loop = service.bridge, service.loop
    loop.start()
    try:
        assert bridge.health().status == "ok"
        os.kill(ctld, signal.SIGSTOP)  # the controller hangs: commands time out
        try:
            # Each partition is polled on its own: all of them go stale within a few polls.
            def all_stale():
                health = bridge.health()
                return all(c.status == "stale" for c in health.clusters.values()) and health

            health = wait(all_stale, timeout=30)
            assert health.status == "degraded"
            # Its command timed out, or its poll ran past two intervals before that.
            said = ("did not answer", "has not answered", "does not answer")
            errors = [c.error or "" for c in health.clusters.values()]
            assert all(any(words in error for words in said) for error in errors), errors
        finally:
            os.kill(ctld, signal.SIGCONT)
        wait(lambda: bridge.health().status == "ok", timeout=60)
    finally:
        loop.stop()
        service.close()
        store.close()


def test_a_started_placeholder_with_a_job_inside_shrinks_to_its_ghost(adapter, slurm_partitions):
    name = slurm_partitions.clusters[1]
    start = adapter.now() + 3
    spec = ReservationSpec(name="coorm-t4-x", start=start, end=start + 600, hosts=2, users=(USER,))
    handle = adapter.create_reservation(name, spec)
    job = adapter.submit(name, sleeper(hosts=2, reservation="coorm-t4-x", walltime=300))
    wait(lambda: adapter.job_state(name, job) is JobState.RUNNING, timeout=90)
    until = adapter.now() + 30  # done now, fair_start 30
    ghost = adapter.update_reservation(
        name,
        spec.model_copy(update={"host_names": handle.host_names, "end": until}),
    )
    assert (ghost.start, ghost.end) == (start, until)
    assert ghost.host_names == handle.host_names
