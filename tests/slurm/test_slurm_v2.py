"""API v2 (evolving applications, CooRMv2) through a real daemon on the real test Slurm, as a
user runs it: an EvolvingClient over the daemon's TCP port, the user's jobs submitted with
``sbatch`` as that user, and what Slurm holds read back with ``scontrol`` and ``squeue``.

- a pre-allocation is a reservation on exactly the hosts its start names; a request inside it
  starts at once on some of them, and the user's job submitted into that reservation runs there;
- an announced update (``next``) is a reservation that begins at the end of the request it
  follows, on its hosts; that one done early, the update starts at once (no ghost between);
- a preemptible request runs on idle hosts outside any reservation; another session needing
  them, it is preempted, killed past its deadline, its job cancelled in Slurm, and the other
  session starts there;
- a local job Slurm predicts to start at T starts no later with preemptible work beside it.

The application is a Unix user of this run's own (Slurm checks reservation users and job
owners); local jobs are root's. Every wait polls the daemon (long polls) or Slurm until what
it waits for holds; a failsafe only ends a test that would hang.
"""

from __future__ import annotations

import calendar
import os
import pwd
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from coorm_bridge.core.messages import PreemptEvent, StartEvent
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import Relation, RequestType
from coorm_bridge.launchers.evolving import EvolvingClient
from tests import daemons
from tests.daemons import wait_for
from tests.slurm.conftest import SlurmInstance
from tests.slurm.test_slurm_rules import system_users

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]

#: Ends only a test that would hang: every wait below ends on what it waits for well before.
FAILSAFE = 300
TAG = f"{os.getpid() % 100000}"
USER = f"cev{TAG}"
TOKEN = f"evolving-{TAG}-0123456789abcdef"
TIME = "%Y-%m-%dT%H:%M:%S"
PA, PREEMPTIBLE = RequestType.PRE_ALLOCATION, RequestType.PREEMPTIBLE


# -- Slurm, read and driven as its users do ------------------------------------------------------


def utc(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, TIME))


def slurm_env(slurm: SlurmInstance) -> dict[str, str]:
    """Slurm's commands in UTC (they print local times)."""
    return {**slurm.environ(), "TZ": "UTC"}


def command(slurm: SlurmInstance, *args: str, user: str | None = None) -> str:
    """A Slurm command, as ``user`` when given (``setpriv``); its output, checked."""
    prefix: list[str] = []
    if user is not None:
        entry = pwd.getpwnam(user)
        prefix = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
    done = subprocess.run(
        [*prefix, *args],
        env=slurm_env(slurm),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/tmp",
    )
    assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def hostnames(slurm: SlurmInstance, nodes: str) -> set[str]:
    if nodes in ("", "(null)"):
        return set()
    return set(command(slurm, "scontrol", "show", "hostnames", nodes).split())


@dataclass(frozen=True)
class Reservation:
    start: int
    end: int
    nodes: frozenset[str]
    users: str


def reservations(slurm: SlurmInstance) -> dict[str, Reservation]:
    """Every reservation Slurm holds (``scontrol show reservation``), by name."""
    found = {}
    for line in command(slurm, "scontrol", "-o", "show", "reservation").splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if "ReservationName" not in fields:
            continue
        found[fields["ReservationName"]] = Reservation(
            start=utc(fields["StartTime"]),
            end=utc(fields["EndTime"]),
            nodes=frozenset(hostnames(slurm, fields["Nodes"])),
            users=fields.get("Users", ""),
        )
    return found


@dataclass(frozen=True)
class Job:
    state: str
    nodes: frozenset[str]
    start: int | None
    user: str
    reservation: str


def jobs(slurm: SlurmInstance) -> dict[str, Job]:
    """Every job ``squeue`` shows, by id: state, hosts, start (predicted while pending)."""
    found = {}
    shown = command(slurm, "squeue", "-h", "-a", "-t", "all", "-o", "%i|%T|%N|%S|%u|%v")
    for line in shown.splitlines():
        job, state, nodes, start, user, reservation = line.split("|")
        found[job] = Job(
            state=state,
            nodes=frozenset(hostnames(slurm, nodes)),
            start=utc(start) if start[:1].isdigit() else None,
            user=user,
            reservation=reservation,
        )
    return found


def sbatch(slurm: SlurmInstance, *options: str, user: str | None = None) -> str:
    """A job of ``user`` (root when None) that runs until it is ended; its id."""
    out = command(
        slurm, "sbatch", "--parsable", "-p", "alpha", "-o", "/dev/null", "--chdir=/tmp",
        *options, "--wrap", "sleep 100000", user=user,
    )  # fmt: skip
    return out.strip().split(";")[0]


def until(test: Callable[[], Any], what: str) -> Any:
    """Poll ``test`` until it returns something true, and return it."""
    deadline = time.monotonic() + FAILSAFE
    while not (found := test()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {FAILSAFE} s")
        time.sleep(0.2)
    return found


def running(slurm: SlurmInstance, job: str) -> Job | None:
    state = jobs(slurm).get(job)
    return state if state is not None and state.state == "RUNNING" else None


def ended(slurm: SlurmInstance, job: str) -> str | None:
    """How ``job`` ended (``squeue``, which keeps it a few seconds: MinJobAge), or None while it
    runs or waits."""
    state = jobs(slurm).get(job)
    if state is None:
        return "purged"
    alive = ("RUNNING", "PENDING", "CONFIGURING", "COMPLETING", "SUSPENDED")
    return None if state.state in alive else state.state


# -- the daemon ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def user() -> Iterator[str]:
    with system_users([USER]):
        yield USER


@pytest.fixture
def bridge(slurm_partitions, make_daemon, user) -> Iterator[Callable[..., daemons.Daemon]]:
    """``bridge(**policy)``: a started daemon on the test Slurm (TCP with the user's token);
    Slurm is emptied afterwards (jobs, reservations)."""
    started: list[daemons.Daemon] = []

    def start(**policy: Any) -> daemons.Daemon:
        port = daemons.free_port()
        config = daemons.slurm_config(
            slurm_partitions,
            port=port,
            tokens={TOKEN: user},
            policy={**daemons.BATCH_POLICY, **policy},
        )
        started.append(make_daemon(config, port=port).start())
        return started[-1]

    try:
        yield start
    finally:
        for daemon in started:
            daemon.stop()
        slurm_partitions.reset()


def as_user(daemon: daemons.Daemon) -> EvolvingClient:
    """The application's client, as its user (TCP with the user's token)."""
    return EvolvingClient(daemon.tcp, token=TOKEN, timeout=10)


def hosts_of(start: StartEvent) -> set[str]:
    return set(start.allocations["alpha"].hosts)


# -- the scenarios ---------------------------------------------------------------------------------


def test_a_pre_allocation_is_a_reservation_the_application_grows_and_shrinks_in(
    bridge, slurm_partitions, user
):
    slurm = slurm_partitions
    with as_user(bridge()) as client:
        sid = client.subscribe_evolving(Filter(clusters=("alpha",)), name="amr").session
        client.send_request(sid, id="pa", cluster="alpha", hosts=4, duration=3600, type=PA)
        start = wait_for(client, sid, "start", request="pa", failsafe=FAILSAFE)
        held, name = hosts_of(start), start.allocations["alpha"].reservation
        assert len(held) == 4
        assert name is not None
        placeholder = reservations(slurm)[name]
        assert placeholder.nodes == held  # exactly the hosts the start event names
        assert user in placeholder.users
        assert placeholder.start <= time.time() < placeholder.end

        grow = client.send_request(sid, id="grow", cluster="alpha", hosts=2, duration=600)
        assert grow.state is AppState.STARTED  # in the call that sent it
        assert grow.inside == "pa"
        assert grow.reservation is None
        grown = set(grow.host_names)
        assert len(grown) == 2
        assert grown <= held
        event = wait_for(client, sid, "start", after=start.seq, request="grow", failsafe=FAILSAFE)
        assert event.allocations["alpha"].reservation == name
        job = sbatch(
            slurm, f"--reservation={name}", f"--nodelist={','.join(sorted(grown))}", "-N", "2",
            "--time=10", user=user,
        )  # fmt: skip
        ran = until(lambda: running(slurm, job), f"the user's job {job} running in {name}")
        assert ran.nodes == grown
        assert ran.reservation == name

        shrunk = client.done_request(sid, "grow", hosts=1)
        assert shrunk.state is AppState.STARTED
        assert len(shrunk.host_names) == 1
        assert set(shrunk.host_names) < grown
        assert reservations(slurm)[name].nodes == held  # the pre-allocation keeps its hosts

        assert client.end(sid).state is AppState.FINISHED
        # Its ghost (fair-start) goes untold, then the reservation and what runs in it go.
        until(lambda: name not in reservations(slurm), f"{name} deleted from Slurm")
        until(lambda: ended(slurm, job), f"the user's job {job} in {name} ended")
        assert client.evolving_info(sid).state is AppState.FINISHED


def test_a_next_request_is_held_from_the_end_of_the_one_it_follows_and_starts_at_its_done(
    bridge, slurm_partitions, user
):
    slurm = slurm_partitions
    fair_start = 60  # a ghost would hold R's hosts that long: the update must not wait for it
    with as_user(bridge(fair_start=fair_start)) as client:
        sid = client.subscribe_evolving(Filter(clusters=("alpha",)), name="amr").session
        client.send_request(sid, id="r", cluster="alpha", hosts=4, duration=3600)
        first = wait_for(client, sid, "start", request="r", failsafe=FAILSAFE)
        hosts, name = hosts_of(first), first.allocations["alpha"].reservation
        assert name is not None
        assert reservations(slurm)[name].nodes == hosts
        r_end = reservations(slurm)[name].end

        announced = client.send_request(
            sid, id="u", cluster="alpha", hosts=2, duration=600, related_to="r",
            related_how=Relation.NEXT,
        )  # fmt: skip
        assert announced.state is not AppState.STARTED

        def held() -> tuple[str, Reservation] | None:
            """The user's other reservation in Slurm: the update's placeholder."""
            others = [
                (other, shown)
                for other, shown in reservations(slurm).items()
                if other != name and user in shown.users
            ]
            return others[0] if others else None

        update, placeholder = until(held, "the next request's placeholder in Slurm")
        assert placeholder.start == r_end  # it begins at R's end...
        assert len(placeholder.nodes) == 2
        assert placeholder.nodes <= hosts  # ...on R's hosts
        assert user in placeholder.users
        # The user's job for the update, submitted into it now, waits for it (Slurm's word).
        job = sbatch(slurm, f"--reservation={update}", "-N", "2", "--time=5", user=user)
        waiting = jobs(slurm)[job]
        assert waiting.state == "PENDING"
        assert reservations(slurm)[name].nodes == hosts  # R keeps its hosts meanwhile

        done = client.done_request(sid, "r")
        assert done.done_at is not None
        started = wait_for(client, sid, "start", after=first.seq, request="u", failsafe=FAILSAFE)
        assert hosts_of(started) == set(placeholder.nodes)
        assert started.allocations["alpha"].reservation == update
        assert started.time < done.done_at + fair_start  # no ghost in between
        now = reservations(slurm)[update]
        assert now.start <= time.time()
        assert now.nodes == placeholder.nodes
        ran = until(lambda: running(slurm, job), f"the user's job {job} running in {update}")
        assert ran.nodes == placeholder.nodes
        until(lambda: name not in reservations(slurm), f"R's {name} deleted from Slurm")
        client.end(sid)


def test_preemptible_work_is_taken_back_at_its_deadline_and_its_job_cancelled(
    bridge, slurm_partitions, user
):
    slurm = slurm_partitions
    daemon = bridge()
    with as_user(daemon) as client, daemon.client() as root:
        sid = client.subscribe_evolving(Filter(clusters=("alpha",)), name="sweep").session
        client.send_request(sid, id="p", cluster="alpha", hosts=4, duration=600, type=PREEMPTIBLE)
        start = wait_for(client, sid, "start", request="p", failsafe=FAILSAFE)
        hosts = hosts_of(start)
        assert len(hosts) == 4
        assert start.allocations["alpha"].reservation is None
        # As preemptible work is submitted: on its hosts, outside reservations, its limit
        # ending by the request's end (the test Slurm has no preemptible QOS or partition).
        minutes = (start.end - int(time.time())) // 60
        job = sbatch(
            slurm, f"--nodelist={','.join(sorted(hosts))}", "-N", "4", f"--time={minutes}",
            user=user,
        )  # fmt: skip
        ran = until(lambda: running(slurm, job), f"the preemptible job {job} running")
        assert ran.nodes == hosts
        assert ran.reservation in ("", "(null)")

        # Another session (v1, root over the socket) needs every host of alpha.
        v1 = root.subscribe(Filter(clusters=("alpha",))).session
        root.request(v1, Request(nodes={"alpha": 8}, duration=300))
        preempt = wait_for(client, sid, "preempt", after=start.seq, request="p", failsafe=FAILSAFE)
        assert isinstance(preempt, PreemptEvent)
        assert preempt.hosts == 4
        killed = wait_for(client, sid, "killed", after=preempt.seq, request="p", failsafe=FAILSAFE)
        assert killed.time >= preempt.deadline
        how = until(lambda: ended(slurm, job), f"the preemptible job {job} cancelled")
        assert how == "CANCELLED"
        taken = wait_for(root, v1, "start", failsafe=FAILSAFE)
        assert taken.time >= preempt.deadline
        assert hosts <= hosts_of(taken)
        name = taken.allocations["alpha"].reservation
        assert name is not None
        assert reservations(slurm)[name].nodes >= hosts
        root.done(v1)
        client.end(sid)


def test_a_local_job_starts_no_later_than_slurm_predicted_beside_preemptible_work(
    bridge, slurm_partitions, user
):
    """Root's job on half of alpha runs (its limit: 8 minutes, ended early: on a busy machine
    the steps before the user's job took over 3, and the local job took the hosts at that limit);
    root's next job wants all of alpha: Slurm predicts it at the first one's limit, T.
    Preemptible work on the idle half,
    its job's limit ending by its deadline, does not move Slurm's prediction of T; and once the
    first job ends and the application answers its preemption (its job cancelled, the hosts
    given back), the local job starts at once: nothing of the bridge's holds it."""
    slurm = slurm_partitions
    nodes = sorted(slurm.nodes["alpha"])
    first = command(
        slurm, "sbatch", "--parsable", "-p", "alpha", "-o", "/dev/null", "--chdir=/tmp",
        f"--nodelist={','.join(nodes[:4])}", "-N", "4", "--time=8", "--wrap", "sleep 600",
    ).strip()  # fmt: skip
    until(lambda: running(slurm, first), f"root's job {first} running")
    local = sbatch(slurm, "-N", "8", "--time=5")

    def predicted() -> int | None:
        shown = jobs(slurm)[local]
        return shown.start if shown.state == "PENDING" else None

    before = until(predicted, f"Slurm's predicted start of root's job {local}")
    with as_user(bridge()) as client:
        sid = client.subscribe_evolving(Filter(clusters=("alpha",)), name="sweep").session
        client.send_request(sid, id="p", cluster="alpha", hosts=4, duration=3600, type=PREEMPTIBLE)
        start = wait_for(client, sid, "start", request="p", failsafe=FAILSAFE)
        hosts = hosts_of(start)
        assert hosts == set(nodes[4:])  # the idle ones
        assert start.time < before
        preempt = wait_for(client, sid, "preempt", after=start.seq, request="p", failsafe=FAILSAFE)
        assert preempt.hosts == 4
        assert preempt.deadline <= before  # to be given back by the local job's start
        # The user's job on them, its limit ending by the deadline, with room for Slurm's
        # time-limit check (every 30 s) and KillWait, and for its backfill's resolution (60 s:
        # a job whose end it rounds past the local job's planned start is never backfilled, as
        # one CI run saw).
        minutes = (preempt.deadline - int(time.time()) - 35 - 60) // 60
        assert minutes >= 1, (preempt.deadline, time.time())
        job = sbatch(
            slurm, f"--nodelist={','.join(sorted(hosts))}", "-N", "4", f"--time={minutes}",
            user=user,
        )  # fmt: skip
        until(lambda: running(slurm, job), f"the preemptible job {job} running")
        after = until(predicted, f"Slurm's predicted start of {local} beside it")
        assert after <= before  # Slurm's own planner: the local job is not delayed
        # The first job ends early, the application answers its preemption: the local job
        # starts at once, no later than T.
        command(slurm, "scancel", first)
        command(slurm, "scancel", job, user=user)
        assert client.done_request(sid, "p").state is AppState.FINISHED
        began = until(lambda: running(slurm, local), f"root's job {local} started")
        assert began.start is not None
        assert began.start <= before
        print(f"predicted {before}, with preemptible work {after}, started {began.start}")
        client.end(sid)
