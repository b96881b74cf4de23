"""API v2 (evolving applications, CooRMv2) through a real daemon on the real test OAR 2.5.9.

Each scenario is what a user does: an :class:`EvolvingClient` over the daemon's TCP port (a
token of a test user: OAR lets root submit nothing), and OAR's own commands as that user
(``oarsub``, ``oarstat``) to run the user's jobs and to read what OAR holds, never the bridge:

1. a pre-allocation is a container on exactly the hosts its start names; a non-preemptible
   request inside it starts in the same call, and a job submitted into the container on those
   hosts runs there; shrinking, ending;
2. a ``next`` request is a container that begins on its related request's hosts at that one's
   end plus OAR's security time (it refuses a container there earlier), and starts on them as
   soon as that one is done (no ghost in between);
3. a preemptible request runs a best-effort job on idle hosts; another session needs them: a
   ``preempt`` event with a deadline, then ``killed`` no earlier, the job gone from OAR (OAR
   kills a best-effort job whose hosts a job or container needs; the bridge's snapshot leaves
   best-effort jobs out, so its own cancel does not see them), and the other session started
   on those hosts;
4. a local job that OAR predicts to start at T behind a running one starts no later than T
   while preemptible work runs on the idle hosts meanwhile.

Two scenarios run at once in each test, each on its own cluster (OAR's tests are the suite's
longest). Every wait is for an event (long polls) or for OAR's answer (polled); the failsafes
only stop a test whose awaited moment never comes.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from coorm_bridge.adapters.oar import parse
from coorm_bridge.core.messages import PreemptEvent, StartEvent
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import Relation, RequestType
from coorm_bridge.launchers.evolving import EvolvingClient
from tests import daemons
from tests.daemons import wait_for
from tests.oar.lab import ACTIVE_STATES, FINAL_STATES, OarInstance

pytestmark = [pytest.mark.oar, pytest.mark.daemon]

TOKEN = "oar-v2-test-token-0123456789abcdef"
OTHER_TOKEN = "oar-v2-other-token-0123456789abcdef"
FAIR_START = 30
"""Long enough that a start within it after a done is no ghost's (a ghost lasts this long)."""
FAILSAFE = 120
PA, PREEMPTIBLE = RequestType.PRE_ALLOCATION, RequestType.PREEMPTIBLE
T = TypeVar("T")


def config(oar: OarInstance, port: int, fair_start: int = FAIR_START) -> str:
    adapter = {"kind": "oar", "reservation_lead": 5, "cluster": daemons.oar_clusters(oar)}
    return daemons.config(
        adapter,
        port=port,
        tokens={TOKEN: oar.users[0], OTHER_TOKEN: oar.users[1]},
        policy={"interval": 0.5, "fair_start": fair_start},
        placement={"poll_interval": 1, "horizon": 3600},
    )


@pytest.fixture
def daemon(
    oar: OarInstance, make_daemon, folder: Path, request: pytest.FixtureRequest
) -> Iterator[daemons.Daemon]:
    """Started; killed, its log shown (tests/conftest.py) and OAR reset afterwards. A test
    given ``indirect`` a number has that fair-start (its ghosts end sooner)."""
    oar.reset()
    folder.chmod(0o755)
    port = daemons.free_port()
    made = make_daemon(config(oar, port, getattr(request, "param", FAIR_START)), port=port)
    made.start()
    yield made
    made.stop(signal.SIGKILL)
    oar.reset()


def client(daemon: daemons.Daemon, token: str = TOKEN) -> EvolvingClient:
    return EvolvingClient(daemon.tcp, token=token, timeout=10)


def until(probe: Callable[[], T | None], what: str) -> T:
    """``probe()`` once it answers (polled: OAR's state changes at its own passes)."""
    deadline = time.monotonic() + FAILSAFE
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {FAILSAFE} s")
        time.sleep(0.2)
    return found


def hosts_of(start: StartEvent, cluster: str) -> list[str]:
    return list(start.allocations[cluster].hosts)


def container(oar: OarInstance, name: str) -> dict[str, Any] | None:
    """The live OAR job of a bridge placeholder named ``name`` (oarstat -f), or None."""
    for job_id, job in oar.active_jobs().items():
        if job["name"] == name and "container" in job["types"]:
            return oar.job(int(job_id))
    return None


def running_container(oar: OarInstance, name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        job = container(oar, name)
        return job if job is not None and job["state"] == "Running" else None

    return until(probe, f"container {name} running in OAR")


def planned_hosts(oar: OarInstance, job_id: int) -> set[str]:
    """The hosts OAR gives a job: assigned once it runs, in the gantt while it waits."""
    job = oar.job(job_id)
    if job.get("assigned_network_address"):
        return set(job["assigned_network_address"])
    now = datetime.now()
    gantt = oar.gantt(now - timedelta(seconds=1), now + timedelta(hours=3))
    return set(gantt["jobs"][str(job_id)]["network_address"])


def on_hosts(hosts: list[str] | tuple[str, ...]) -> str:
    return "network_address in (" + ", ".join(f"'{h}'" for h in hosts) + ")"


def pre_allocation(daemon: daemons.Daemon, oar: OarInstance, cluster: str) -> None:
    user = oar.users[0]
    with client(daemon) as app:
        sid = app.subscribe_evolving(Filter(clusters=(cluster,)), name="amr").session
        app.send_request(sid, id="pa", cluster=cluster, hosts=4, duration=1800, type=PA)
        start = wait_for(app, sid, "start", request="pa", failsafe=FAILSAFE)
        held = hosts_of(start, cluster)
        name = start.allocations[cluster].reservation
        assert name is not None
        assert len(held) == 4
        # OAR holds exactly the hosts the start names, already running the container
        pa = running_container(oar, name)
        assert sorted(pa["assigned_network_address"]) == sorted(held)
        assert pa["owner"] == user

        # A spontaneous update: started in the call, on hosts of the pre-allocation.
        grow = app.send_request(sid, id="grow", cluster=cluster, hosts=2, duration=600)
        assert grow.state is AppState.STARTED
        assert grow.inside == "pa"
        assert grow.reservation is None  # nothing more is asked of OAR
        assert set(grow.host_names) <= set(held)
        told = wait_for(app, sid, "start", after=start.seq, request="grow")
        assert told.allocations[cluster].reservation == name
        assert set(hosts_of(told, cluster)) == set(grow.host_names)

        # The user's job goes into the pre-allocation's container on those hosts, and runs.
        job_id = oar.submit(
            "-t", f"inner={pa['Job_Id']}",
            "-p", on_hosts(grow.host_names),
            "-l", f"/host={len(grow.host_names)},walltime=0:05:00",
            "sort -u $OAR_NODEFILE",
            user=user,
        )  # fmt: skip
        ran = oar.wait_job(job_id, FINAL_STATES, timeout=FAILSAFE)
        assert ran["state"] == "Terminated", ran
        assert ran["exit_code"] == 0
        assert sorted(ran["assigned_network_address"]) == sorted(grow.host_names)

        # Shrinking: one host back, one kept; the container is untouched.
        shrunk = app.done_request(sid, "grow", hosts=1)
        assert shrunk.state is AppState.STARTED
        assert len(shrunk.host_names) == 1
        assert set(shrunk.host_names) < set(grow.host_names)
        assert container(oar, name) is not None

        # Ending: the request inside ends with it, and OAR's container goes (after the ghost).
        app.done_request(sid, "grow")
        ended = wait_for(app, sid, "ended", after=told.seq, request="grow")
        assert ended.state is AppState.FINISHED
        app.done_request(sid, "pa")
        app.end(sid)
        until(lambda: container(oar, name) is None or None, f"container {name} deleted")
        assert app.evolving_info(sid).state is AppState.FINISHED


def next_request(daemon: daemons.Daemon, oar: OarInstance, cluster: str) -> None:
    with client(daemon) as app:
        sid = app.subscribe_evolving(Filter(clusters=(cluster,)), name="update").session
        app.send_request(sid, id="r", cluster=cluster, hosts=4, duration=1800)
        first = wait_for(app, sid, "start", request="r", failsafe=FAILSAFE)
        held = hosts_of(first, cluster)
        r_job = parse.record(running_container(oar, first.allocations[cluster].reservation or ""))
        assert sorted(r_job.addresses) == sorted(held)
        # r's end as OAR has it: a container that a busy OAR launched a second late ends a
        # second later (OAR cuts its walltime from its start as planned, then sets its start).
        r_end = (r_job.start or 0) + r_job.walltime
        assert first.end <= r_end <= first.end + 30
        app.send_request(
            sid, id="n", cluster=cluster, hosts=2, duration=600,
            related_to="r", related_how=Relation.NEXT,
        )  # fmt: skip

        # Its placeholder: a reservation of the user's in OAR from r's end (a waiting
        # request's is not told: read from OAR), on r's hosts.
        r_name = first.allocations[cluster].reservation

        def placeholder() -> dict[str, Any] | None:
            # Only this cluster's: the scenario beside it holds the same user's containers.
            for job_id, job in oar.active_jobs().items():
                name = str(job["name"])
                ours = name.startswith("coorm-") and name.endswith(f"-{cluster}")
                if ours and name != r_name and "container" in job["types"]:
                    found = oar.job(int(job_id))
                    scheduled = found["reservation"] == "Scheduled" and found["scheduledStart"]
                    if found["owner"] == oar.users[0] and scheduled:
                        return found
            return None

        waiting = until(placeholder, "n's placeholder validated by OAR")
        info = app.request_info(sid, "n")
        assert info.state is AppState.WAITING
        assert waiting["state"] != "Running"
        # OAR keeps SCHEDULER_JOB_SECURITY_TIME (60 s) after r: held from a second past it
        # (past r's end as OAR has it: a start earlier than that is refused with OAR's hint,
        # which the bridge holds from at its next attempt).
        assert int(waiting["scheduledStart"]) == max(first.end, r_end) + 61
        assert info.reservation == waiting["name"]
        reserved = planned_hosts(oar, int(waiting["Job_Id"]))
        assert len(reserved) == 2
        assert reserved <= set(held)

        # r done early: n starts at once on those hosts (no ghost of r in between).
        done = app.done_request(sid, "r")
        assert done.done_at is not None
        following = wait_for(app, sid, "start", after=first.seq, request="n", failsafe=FAILSAFE)
        assert set(hosts_of(following, cluster)) == reserved
        assert following.time - done.done_at < FAIR_START, (following.time, done.done_at)
        name = following.allocations[cluster].reservation
        assert name is not None
        began = running_container(oar, name)
        assert set(began["assigned_network_address"]) == reserved
        app.end(sid)


def besteffort(oar: OarInstance, hosts: list[str], walltime: int, user: str) -> int:
    """What a preemptible request's launcher runs: a best-effort job on its hosts, outside any
    reservation, running until killed or its time limit."""
    limit = f"{walltime // 3600}:{walltime // 60 % 60:02}:{walltime % 60:02}"
    job_id = oar.submit(
        "-t", "besteffort",
        "-p", on_hosts(hosts),
        "-l", f"/host={len(hosts)},walltime={limit}",
        f"sleep {walltime + 60}",
        user=user,
    )  # fmt: skip
    job = oar.wait_job(job_id, {"Running"}, timeout=FAILSAFE)
    assert sorted(job["assigned_network_address"]) == sorted(hosts)
    assert job["queue"] == "besteffort"
    return job_id


def preemptible_killed(daemon: daemons.Daemon, oar: OarInstance, cluster: str) -> None:
    user = oar.users[0]
    with client(daemon) as app, client(daemon, OTHER_TOKEN) as other:
        sid = app.subscribe_evolving(Filter(clusters=(cluster,)), name="sweep").session
        app.send_request(sid, id="p", cluster=cluster, hosts=8, duration=1800, type=PREEMPTIBLE)
        start = wait_for(app, sid, "start", request="p", failsafe=FAILSAFE)
        hosts = hosts_of(start, cluster)
        assert sorted(hosts) == sorted(oar.nodes[cluster])  # every host was idle
        assert start.allocations[cluster].reservation is None
        job_id = besteffort(oar, hosts, 1700, user)

        # Another user's v1 session needs the whole cluster.
        v1 = other.subscribe(Filter(clusters=(cluster,)), "solver").session
        other.request(v1, Request(nodes={cluster: 8}, duration=600))
        preempt = wait_for(app, sid, "preempt", after=start.seq, request="p", failsafe=FAILSAFE)
        assert isinstance(preempt, PreemptEvent)
        assert preempt.hosts == 8
        assert preempt.deadline >= preempt.time

        killed = wait_for(app, sid, "killed", after=preempt.seq, request="p", failsafe=FAILSAFE)
        assert killed.time >= preempt.deadline
        gone = oar.wait_job(job_id, FINAL_STATES, timeout=FAILSAFE)
        assert gone["state"] in FINAL_STATES
        taken = wait_for(other, v1, "start", failsafe=FAILSAFE)
        assert sorted(hosts_of(taken, cluster)) == sorted(hosts)
        began = running_container(oar, taken.allocations[cluster].reservation or "")
        assert sorted(began["assigned_network_address"]) == sorted(hosts)
        assert oar.job(job_id)["state"] not in ACTIVE_STATES
        other.done(v1)
        app.end(sid)


def local_job(daemon: daemons.Daemon, oar: OarInstance, cluster: str) -> None:
    user, local = oar.users[0], oar.users[1]
    nodes = oar.nodes[cluster]
    # A running local job on half the cluster, ending when the test says (or at its limit),
    # and a local job behind it on the whole cluster: OAR predicts its start T.
    go = oar.workdir(local) / f"go-{time.monotonic_ns()}"
    first = oar.submit(
        "-p", on_hosts(nodes[:4]),
        "-l", "/host=4,walltime=0:05:00",
        f"while [ ! -e {go} ]; do sleep 0.2; done",
        user=local,
    )  # fmt: skip
    oar.wait_job(first, {"Running"}, timeout=FAILSAFE)
    second = oar.submit(
        "-p", f"cluster='{cluster}'", "-l", "/host=8,walltime=0:05:00", "true", user=local
    )
    predicted = oar.wait_prediction(second, timeout=FAILSAFE)

    with client(daemon) as app:
        sid = app.subscribe_evolving(Filter(clusters=(cluster,)), name="sweep").session
        app.send_request(sid, id="p", cluster=cluster, hosts=4, duration=1800, type=PREEMPTIBLE)
        start = wait_for(app, sid, "start", request="p", failsafe=FAILSAFE)
        hosts = hosts_of(start, cluster)
        assert set(hosts) == set(nodes[4:])  # the idle ones
        assert start.time < predicted
        # Its hosts must be back by the local job's predicted start: told so.
        preempt = wait_for(app, sid, "preempt", after=start.seq, request="p", failsafe=FAILSAFE)
        assert preempt.deadline <= predicted
        walltime = preempt.deadline - int(time.time())
        assert walltime > 0
        job_id = besteffort(oar, hosts, walltime, user)
        assert oar.job(second)["scheduledStart"] <= predicted  # OAR's prediction, unmoved

        go.touch()  # the running local job ends: the one behind it may start
        began = oar.wait_job(second, {"Running", *FINAL_STATES}, timeout=FAILSAFE)
        assert began["startTime"] <= predicted, (began["startTime"], predicted)
        oar.wait_job(job_id, FINAL_STATES, timeout=FAILSAFE)  # OAR took its hosts back
        app.end(sid)


def side_by_side(**scenarios: Callable[[], None]) -> None:
    """Run scenarios at once, each on its own cluster (the OAR tests' time is the suite's
    longest); each failure names its scenario."""
    with ThreadPoolExecutor(len(scenarios)) as pool:
        running = {name: pool.submit(run) for name, run in scenarios.items()}
    for name, future in running.items():
        error = future.exception()
        if error is not None:
            raise AssertionError(f"{name}: {error}") from error


@pytest.mark.parametrize("daemon", [5], indirect=True, ids=["fair_start=5"])
def test_a_pre_allocation_holds_a_container_and_preemptible_work_is_taken_back_on_time(
    daemon: daemons.Daemon, oar: OarInstance
) -> None:
    """1. (alpha) A pre-allocation is a container, the application grows and shrinks inside it;
    3. (beta) preemptible work not given back is killed at its deadline, its job gone."""
    side_by_side(
        pre_allocation=lambda: pre_allocation(daemon, oar, "alpha"),
        preemptible_killed=lambda: preemptible_killed(daemon, oar, "beta"),
    )


def test_a_next_request_takes_its_hosts_over_and_local_jobs_are_not_delayed(
    daemon: daemons.Daemon, oar: OarInstance
) -> None:
    """2. (beta) A next request is held from its related one's end on its hosts and starts at
    that one's early done; 4. (alpha) a local job starts no later than OAR predicted beside
    preemptible work."""
    side_by_side(
        next_request=lambda: next_request(daemon, oar, "beta"),
        local_job=lambda: local_job(daemon, oar, "alpha"),
    )
