"""A busy Slurm: the next placeholder begins on the same hosts the moment an allocation ends.

A job whose limit, counted from when Slurm starts it, would pass the allocation's end then
waits for ever (PENDING "BadConstraints"). The launcher gives a limit that fits once Slurm has
started the job, and lowers it while the job waits; the coupled run starts and exits 0."""

from __future__ import annotations

import calendar
import io
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coorm_bridge.adapters.batch.runner import LocalRunner
from coorm_bridge.core.messages import Allocation, StartEvent
from coorm_bridge.core.model import ClusterInfo, Submission
from coorm_bridge.launchers.app import parse_app
from coorm_bridge.launchers.client import BridgeClient
from coorm_bridge.launchers.deploy.run import Run
from coorm_bridge.launchers.deploy.slurm import SlurmDeployer
from coorm_bridge.launchers.display import PlainDisplay
from coorm_bridge.launchers.rundir import prepare
from tests import daemons

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]

#: Generous failsafes only: each wait below ends on an event well before.
FAILSAFE = 240


TIME = "%Y-%m-%dT%H:%M:%S"


def scontrol(slurm, *args: str) -> str:
    """scontrol in UTC (its times are local), output checked."""
    done = subprocess.run(
        ["scontrol", *args],
        env={**slurm.environ(), "TZ": "UTC"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def reserve(slurm, name: str, node: str, start: int, end: int) -> None:
    scontrol(
        slurm, "create", "reservation", f"reservationname={name}",
        f"starttime={time.strftime(TIME, time.gmtime(start))}",
        f"endtime={time.strftime(TIME, time.gmtime(end))}", f"nodes={node}", "users=root",
        "flags=ignore_jobs",
    )  # fmt: skip


def job_field(slurm, job: str, key: str) -> str:
    shown = scontrol(slurm, "-o", "show", "job", job)
    found = re.search(rf"\b{key}=(\S+)", shown)
    assert found is not None, shown
    return found.group(1)


@pytest.fixture
def clean(slurm_partitions) -> Iterator[None]:
    try:
        yield
    finally:
        slurm_partitions.reset()


def test_a_job_that_waits_past_its_slack_still_starts_before_the_next_placeholder(
    slurm_partitions, clean, tmp_path
):
    """The user's own earlier job still runs in the allocation (a busy host): the job waits,
    and by the time the host is free a start would end after the next placeholder began. Its
    limit is lowered while it waits, and it runs."""
    slurm = slurm_partitions
    node = slurm.nodes["alpha"][-1]
    now = int(time.time())
    start, end = now + 1, now + 1 + 127
    reserve(slurm, "busy-first", node, start, end)
    reserve(slurm, "busy-next", node, end, end + 300)
    while int(time.time()) < start:
        time.sleep(0.1)
    blocker = slurm.run(
        "sbatch", "--parsable", "-p", "alpha", "--reservation=busy-first", f"--nodelist={node}",
        "-t", "1", "-o", "/dev/null", "--chdir=/tmp", "--wrap=sleep 15",
    ).stdout.strip()  # fmt: skip

    app = parse_app(
        'duration = 127\n[selector]\nname = "rigid"\nparams = { nodes = { alpha = 1 } }\n'
        '[[component]]\nname = "solver"\ncommand = ["true"]\nclusters = ["alpha"]\n',
        base_dir=tmp_path,
    )
    event = StartEvent(
        seq=2, time=start, end=end,
        allocations={"alpha": Allocation(hosts=[node], reservation="busy-first")},
    )  # fmt: skip
    directory = prepare(
        app, "busy", event, {"alpha": ClusterInfo(name="alpha", hosts=8)}, {"alpha": "slurm"},
        root=tmp_path,
    )  # fmt: skip
    submission = Submission(kind="slurm", partition="alpha", slurm_conf=str(slurm.conf))
    deployer = SlurmDeployer("alpha", submission, LocalRunner(slurm.environ()))
    said = io.StringIO()
    run = Run(directory, {"alpha": deployer}, PlainDisplay(said, said))
    run.submit(event)
    job = run.jobs["alpha"]
    assert job_field(slurm, job, "TimeLimit") == "00:02:00"  # 2 minutes fit when submitted...
    assert job_field(slurm, job, "JobState") == "PENDING"  # ...but the host is busy
    while not run.poll():  # it must have run by the allocation's end
        assert time.time() < end, (said.getvalue(), slurm.run("squeue").stdout)
        time.sleep(0.5)
    assert run.exit_status() == 0, said.getvalue()
    assert job_field(slurm, job, "TimeLimit") == "00:01:00"  # lowered while it waited
    assert "time limit lowered to 60 s" in said.getvalue()
    assert job_field(slurm, blocker, "JobState") == "COMPLETED"
    run.close()


APP = """
duration = 120
[selector]
name = "rigid"
params = { nodes = { alpha = 2, beta = 1 } }
[deployment]
poll_interval = 0.5
[[component]]
name = "solver"
command = ["sh", "-c", 'date +%s.%N > "$COORM_RUN_DIR/solver.start"']
clusters = ["alpha"]
processes_per_host = 1
[[component]]
name = "coupler"
command = ["sh", "-c", 'date +%s.%N > "$COORM_RUN_DIR/coupler.start"']
clusters = ["beta"]
processes_per_host = 1
"""


@pytest.fixture
def bridge(slurm_partitions, make_daemon, folder) -> Iterator[tuple[Path, daemons.Daemon]]:
    placement = {**daemons.BATCH_PLACEMENT, "hold_first": 2}
    daemon = make_daemon(daemons.slurm_config(slurm_partitions, placement=placement)).start()
    yield folder, daemon
    daemon.stop()
    slurm_partitions.reset()


def placeholders(slurm, session: str) -> dict[str, tuple[int, int, str]]:
    """The session's reservations in Slurm: cluster -> (start, end, nodes)."""
    found = {}
    for line in scontrol(slurm, "-o", "show", "reservation").splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        name = fields.get("ReservationName", "")
        if f"-{session}-" in name:
            start, end = (
                calendar.timegm(time.strptime(fields[k], TIME)) for k in ("StartTime", "EndTime")
            )
            found[name.rsplit("-", 1)[1]] = (start, end, fields["Nodes"])
    return found


def wait_for(client: BridgeClient, session: str, kind: str) -> StartEvent | None:
    seq, deadline = 0, time.monotonic() + FAILSAFE
    while time.monotonic() < deadline:
        for event in client.events(session, after=seq, wait=5):
            seq = event.seq
            if event.type == kind:
                return event if isinstance(event, StartEvent) else None
    raise AssertionError(f"no {kind} event for {session}")


def test_a_coupled_run_followed_by_another_placeholder_on_its_hosts_runs(bridge, slurm_partitions):
    """Three sessions on every host in turn: the first holds all, the launcher's coupled run
    (2 minutes, a whole number) comes next, a third asks for every host right after it. When
    the run starts, the third's placeholders already begin at its end on the same hosts."""
    folder, daemon = bridge
    slurm = slurm_partitions
    every = {"alpha": 8, "beta": 8}
    with daemon.client() as client:
        first = client.subscribe(name="first").session
        client.request(first, nodes=every, duration=30)
        wait_for(client, first, "start")
        app = folder / "app.toml"
        app.write_text(APP)
        launcher = subprocess.Popen(
            [str(Path(sys.executable).with_name("coorm-launch")), str(app), "--url", daemon.unix],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=folder,
            env={**os.environ, "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"},
        )
        try:
            deadline = time.monotonic() + FAILSAFE
            while not any(s.request and s.session != first for s in client.sessions()):
                assert launcher.poll() is None, launcher.communicate()[0]
                assert time.monotonic() < deadline
                time.sleep(0.2)
            (coupled,) = [s.session for s in client.sessions() if s.session != first]
            third = client.subscribe(name="third").session
            client.request(third, nodes=every, duration=60)
            started = wait_for(client, coupled, "start")
            assert started is not None
            # at its start, the third's placeholders begin at its end on the same hosts
            ran, following = placeholders(slurm, coupled), placeholders(slurm, third)
            assert set(ran) == set(following) == {"alpha", "beta"}, (ran, following)
            for cluster, (_, end, _) in ran.items():
                assert end == started.end
                assert following[cluster][0] == end, (ran, following)
            output, _ = launcher.communicate(timeout=FAILSAFE)
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
        assert launcher.returncode == 0, output
        client.withdraw(third)
    (run,) = (folder / "coorm-runs").iterdir()
    assert (run / "solver.start").exists()
    assert (run / "coupler.start").exists()


def test_a_local_job_waits_the_whole_fair_start_after_done(bridge, slurm_partitions):
    """A local job queued on an application's hosts starts when its ghost ends: fair_start
    (3 s) after the done itself, not after the whole second before it."""
    folder, daemon = bridge
    slurm = slurm_partitions
    stamp = folder / "local.start"
    with daemon.client() as client:
        sid = client.subscribe(name="ghost").session
        client.request(sid, nodes={"alpha": 8}, duration=300)
        wait_for(client, sid, "start")
        local = slurm.run(
            "sbatch", "--parsable", "-p", "alpha", "-N", "8", "-t", "1", "-o", "/dev/null",
            f"--chdir={folder}", f"--wrap=date +%s.%N > {stamp}",
        ).stdout.strip()  # fmt: skip
        assert job_field(slurm, local, "JobState") == "PENDING"  # the placeholder holds
        while not 0.6 <= time.time() % 1 < 0.8:  # late in its second, as a done may well be
            time.sleep(0.01)
        done = time.time()
        client.done(sid)
        deadline = time.monotonic() + FAILSAFE
        while (info := client.session(sid)).state == "finish_sent":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert info.state == "ghost", info
        # The pass made it a ghost; the enactor then shrinks the placeholder in Slurm: read it
        # once shrunk, while it holds, before it expires.
        while (ghost := placeholders(slurm, sid).get("alpha", (0, 0, "")))[1] != info.end:
            assert time.monotonic() < deadline, (ghost, info)
            time.sleep(0.05)
        while job_field(slurm, local, "JobState") != "COMPLETED":
            assert time.monotonic() < deadline, slurm.run("squeue").stdout
            time.sleep(0.2)
    started = float(stamp.read_text())
    print(
        f"ghost until done + {ghost[1] - done:.2f} s, the local job started "
        f"{started - done:.2f} s after done (fair_start 3 s)"
    )
    assert info.end == ghost[1]
    assert done + 3 <= ghost[1] < done + 4  # to Slurm's second, never less
    assert started >= done + 3
