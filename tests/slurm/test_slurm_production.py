"""The bridge on a real Slurm 22.05 under load, the way a site runs it: placeholders behind
running jobs (Slurm's boundary), and co-allocated applications among running and pending jobs.

In-process bridge and loop (as tests/slurm/test_slurm_adapter.py), real Slurm commands. Time
limits are whole minutes in Slurm, so these tests wait for jobs to reach them.
"""

from __future__ import annotations

import calendar
import getpass
import subprocess
import time

import hostlist
import pytest

from coorm_bridge.adapters.slurm.plugin import make_slurm_adapter
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import JobSpec
from coorm_bridge.core.messages import ChangeEvent, StartEvent
from coorm_bridge.core.model import Filter
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.launchers.client import job_time_limit
from coorm_bridge.service.config import Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store
from coorm_bridge.store.rows import PlaceholderRow, PlaceholderStatus

pytestmark = pytest.mark.slurm

USER = getpass.getuser()


class Site:
    """A bridge with its loop over the partitions of ``slurm_partitions``."""

    def __init__(self, slurm, tmp_path) -> None:
        self.slurm = slurm
        settings = SlurmSettings(
            clusters=tuple(
                SlurmCluster(name=p, partition=p, slurm_conf=slurm.conf) for p in slurm.clusters
            )
        )
        config = Config(
            policy=PolicyConfig(interval=0.5, fair_start=5),
            placement=PlacementSettings(poll_interval=1.0, hold_first=4),
            limits=LimitSettings(held_share=1.0),  # one user may hold every host (default: half)
            adapter=settings,
        )
        self.adapter = make_slurm_adapter(settings)
        self.store = Store(tmp_path / "bridge.sqlite")
        self.service = assemble(config, self.adapter, self.store)
        self.bridge, self.loop = self.service.bridge, self.service.loop

    def sbatch(self, partition: str, nodes: int, minutes: int, *extra: str) -> str:
        done = self.slurm.run(
            "sbatch", "--parsable", "-p", partition, f"-N{nodes}", f"-t{minutes}",
            "-o", "/dev/null", "--chdir=/tmp", *extra, "--wrap", "sleep 600",
        )  # fmt: skip
        return done.stdout.strip().split(";")[0]

    def job_times(self, job: str) -> tuple[str, int | None, int | None]:
        """State, start and end (the time limit's) of a job, as squeue prints them in UTC."""
        line = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T %S %e"],
            env={**self.slurm.environ(), "TZ": "UTC"},
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        if not line.stdout.strip():
            return "GONE", None, None  # finished for longer than MinJobAge
        state, start, end = line.stdout.split()
        return state, _epoch(start), _epoch(end)

    def begun(self, job: str) -> tuple[int, list[str]] | None:
        """When a job started and on which hosts, once Slurm started it (running or ended
        since: a short job must not be missed between two looks)."""
        line = subprocess.run(
            ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T %S %N"],
            env={**self.slurm.environ(), "TZ": "UTC"},
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.split()
        if len(line) != 3 or line[0] in ("PENDING", "CONFIGURING"):
            return None
        start = _epoch(line[1])
        return None if start is None else (start, hostlist.expand_hostlist(line[2]))

    def events(self, sid: str, kind: str) -> list:
        return [e for e in self.store.events(sid) if e.type == kind]

    def close(self) -> None:
        self.loop.stop()
        self.slurm.run("scancel", "-u", USER, check=False)
        self.adapter.close()
        self.store.close()
        self.slurm.reset()


def _epoch(text: str) -> int | None:
    if text in ("N/A", "Unknown", "NONE"):
        return None
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def wait(predicate, timeout=60.0, step=0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def _held(row: PlaceholderRow | None) -> PlaceholderRow | None:
    """The row once Slurm has confirmed it (a REQUESTED row is written before ``scontrol``)."""
    return row if row is not None and row.status is PlaceholderStatus.HELD else None


@pytest.fixture
def site(slurm_partitions, tmp_path):
    site = Site(slurm_partitions, tmp_path)
    yield site
    site.close()


def test_a_placeholder_is_held_behind_a_running_job_at_its_end_and_kept_until_it_starts(site):
    """The issue's case: every host of alpha runs a job until E; Slurm 22.05 refuses a
    4-host reservation at exactly E, not 4 hosts named. Within one pass the application holds
    its placeholder at E and keeps it; it starts when the job is gone."""
    job = site.sbatch("alpha", 8, 1)
    _, _, end = wait(lambda: (s := site.job_times(job))[0] == "RUNNING" and s)
    assert end is not None
    site.loop.start()
    sid = site.bridge.subscribe(USER, Filter(clusters=("alpha",)), "behind").session
    asked = time.monotonic()
    site.bridge.put_request(USER, sid, {"alpha": 4}, 120)
    held = wait(lambda: _held(site.store.placeholder(sid, "alpha")), timeout=10)
    latency = time.monotonic() - asked
    print(f"request to placeholder: {latency:.2f} s")
    assert held.start == end
    assert latency < 3  # one pass (0.5 s) and the Slurm calls
    name = held.name
    while site.adapter.now() < end - 1:  # kept, at E, until E
        made = site.adapter.reservation("alpha", name)
        assert made is not None
        assert made.start == end
        time.sleep(2)
    # Slurm stops a job at its time limit only at its next time-limit check (up to 30 s
    # later) plus KillWait: the application is told to start once the hosts are really free.
    wait(lambda: site.job_times(job)[0] not in ("RUNNING", "COMPLETING"), timeout=90)
    gone = site.adapter.now()
    (start,) = wait(lambda: site.events(sid, "start"), timeout=30)
    print(f"time limit at {end}, job gone at {gone}, application started at {start.time}")
    assert end <= start.time
    assert gone - 2 <= start.time <= gone + 3
    assert len(start.allocations["alpha"].hosts) == 4
    assert not site.events(sid, "placement_failed")


def test_co_allocated_applications_start_together_among_running_and_pending_jobs(site):
    """Two applications over alpha and beta behind a background load of running and pending
    jobs of mixed time limits: each one's jobs start within a second of each other, inside its
    placeholders, no later than its last estimate."""
    background = [
        site.sbatch("alpha", 5, 1),
        site.sbatch("alpha", 3, 2),
        site.sbatch("beta", 6, 1),
        site.sbatch("beta", 2, 2),
    ]
    wait(lambda: all(site.job_times(j)[0] == "RUNNING" for j in background))
    site.sbatch("alpha", 2, 1)  # pending, planned by Slurm at the first ends
    site.sbatch("beta", 4, 1)
    site.loop.start()
    apps = {
        site.bridge.subscribe(USER, Filter(clusters=("alpha", "beta")), "one").session: {
            "alpha": 4,
            "beta": 3,
        },
        site.bridge.subscribe(USER, Filter(clusters=("alpha", "beta")), "two").session: {
            "alpha": 2,
            "beta": 2,
        },
    }
    for sid, nodes in apps.items():
        site.bridge.put_request(USER, sid, nodes, 120)
    jobs: dict[str, dict[str, str]] = {}
    # Every job's begin is looked at while the others are awaited, and remembered once seen:
    # with MinJobAge=5, a job ended by its time limit before a later application's start
    # would be gone from squeue by the time it is looked at.
    begins: dict[str, tuple[int, list[str]]] = {}

    def all_begun() -> bool:
        for by_cluster in jobs.values():
            for job in by_cluster.values():
                if job not in begins and (seen := site.begun(job)) is not None:
                    begins[job] = seen
        return len(begins) == sum(len(b) for b in jobs.values())

    deadline = time.monotonic() + 240
    while len(jobs) < len(apps):
        assert time.monotonic() < deadline, [site.store.events(sid) for sid in apps]
        for sid in apps.keys() - jobs.keys():
            started = site.events(sid, "start")
            if started:
                jobs[sid] = launch(site, started[0])
        all_begun()
        time.sleep(0.25)
    try:  # Slurm starts a job in a placeholder at its next scheduling pass
        wait(all_begun, timeout=90)
    except AssertionError:
        queue = site.slurm.run(
            "squeue", "-t", "all", "-o", "%i %T %r %S %e %l %N %v", check=False
        ).stdout
        shown = site.slurm.run("scontrol", "-o", "show", "reservation", check=False).stdout
        raise AssertionError(f"jobs {jobs} not running ({begins}):\n{queue}\n{shown}") from None
    for sid, by_cluster in jobs.items():
        (start,) = site.events(sid, "start")
        estimates = [
            e.estimated_start
            for e in site.store.events(sid)
            if isinstance(e, ChangeEvent) and e.seq < start.seq and e.estimated_start
        ]
        assert estimates
        assert start.time <= estimates[-1] + 1
        runs = {c: begins[j] for c, j in by_cluster.items()}
        starts = [began for began, _ in runs.values()]
        apart, late = max(starts) - min(starts), start.time - estimates[-1]
        print(f"{sid}: jobs started {apart} s apart, {late} s from the last estimate")
        # Each job starts as soon as it is in its placeholder (every placeholder began at the
        # start): as far apart as their submissions were, one after the other, give or take a
        # second (a busy machine's sbatch takes seconds).
        submitted = [submitted_at[c, j] for c, j in by_cluster.items()]
        assert apart <= max(submitted) - min(submitted) + 1, (starts, submitted)
        for cluster, (_, hosts) in runs.items():
            assert set(hosts) == set(start.allocations[cluster].hosts)
        site.bridge.done(USER, sid)


#: When each job's submission was answered, by cluster and job id.
submitted_at: dict[tuple[str, str], int] = {}


def launch(site: Site, start: StartEvent) -> dict[str, str]:
    """The launcher's part at ``start``: one job per cluster, in its placeholder, on its hosts,
    with a time limit no later than the allocation's end."""
    jobs = {}
    walltime = job_time_limit(start, site.adapter.now())
    assert walltime >= 60
    for cluster, allocation in start.allocations.items():
        spec = JobSpec(
            name="coupled",
            user=USER,
            argv=("sleep", "600"),  # ended by its time limit, or by done
            hosts=len(allocation.hosts),
            walltime=walltime,
            reservation=allocation.reservation,
            workdir="/tmp",
        )
        jobs[cluster] = site.adapter.submit(cluster, spec)
        submitted_at[cluster, jobs[cluster]] = site.adapter.now()
    return jobs
