"""Jobs of evolving applications' requests (API v2) through a real daemon's front end on the
mock: a job of an update inside a pre-allocation runs in that reservation on the update's
hosts, one on some of a preemptible request's hosts runs there outside reservations, each is
stopped when its request ends (done, or killed past a preemption's deadline), and a daemon
killed with -9 finds them again. Others get 404; what a request cannot run is refused.

Every wait is for an event (long polls) or for a job's state to change, with a failsafe that
only stops a test whose awaited change never comes. Each test starts its own daemon; the job
processes it leaves are killed by the PIDs in its state folder (tests/conftest.py).
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import FILE_NAME, Journal, VirtualClock, load_platform
from coorm_bridge.core.batch import Job, JobState
from coorm_bridge.core.model import Filter
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import RequestType
from coorm_bridge.launchers.client import BridgeError
from coorm_bridge.launchers.evolving import EvolvingClient
from coorm_bridge.protocol import JobInfo
from coorm_bridge.protocol_v2 import RequestJobRequest
from tests import daemons
from tests.daemons import free_port, wait_for
from tests.jobs import gone

pytestmark = pytest.mark.daemon

BOB = "bob-token-0123456789abc"
PRE = RequestType.PRE_ALLOCATION
PREEMPTIBLE = RequestType.PREEMPTIBLE
#: A job that says where it runs, notes its pid, then waits for ``go`` (or to be stopped).
WAITER = (
    "import json, os, time\n"
    "print(json.dumps({'hosts': os.environ['COORM_JOB_HOSTS'], 'pid': os.getpid()}),"
    " flush=True)\n"
    "while not os.path.exists('go'): time.sleep(0.05)\n"
)


class Daemon(daemons.Daemon):
    """Two clusters (c1: 8 hosts, c2: 4), its front end running jobs; the application over the
    socket (the daemon's own account, whose jobs it runs as root or not), bob over TCP."""

    def __init__(self, folder: Path) -> None:
        port = free_port()
        adapter = {**daemons.MOCK, "run_jobs": True}
        config = daemons.config(adapter, port=port, tokens={BOB: "bob"})
        super().__init__(folder, config, daemons.PLATFORM, port)

    def evolving(self, token: str | None = None) -> EvolvingClient:
        if token is None:
            return EvolvingClient(self.unix, timeout=10)
        return EvolvingClient(self.tcp, token=token, timeout=10)

    def batch_job(self, cluster: str, batch_job: str) -> tuple[JobState, Job | None]:
        """What the simulated batch system says of a job now, read from the platform the
        daemon saved, without the daemon (as ``python -m ...adapters.mock`` does)."""
        with Journal(self.folder / "state" / FILE_NAME, readonly=True) as journal:
            now = journal.resume_time(time.time())
            assert now is not None
            spec = load_platform(self.folder / "platform.toml")
            adapter = MockAdapter(spec, VirtualClock(now), journal=journal)
            shot = adapter.snapshot([cluster]).clusters[cluster]
            seen = next((j for j in shot.jobs if j.id == batch_job), None)
            return adapter.job_state(cluster, batch_job), seen


@pytest.fixture
def make(make_daemon: Callable[..., Daemon]) -> Callable[..., Daemon]:
    return functools.partial(make_daemon, cls=Daemon)


@pytest.fixture
def daemon(make: Callable[..., Daemon]) -> Daemon:
    return make().start()


def body(work: Path, code: str, cluster: str = "c1", **fields: object) -> RequestJobRequest:
    work.mkdir(exist_ok=True)
    given = {
        "cluster": cluster,
        "name": "task",
        "argv": [sys.executable, "-c", code],
        "workdir": str(work),
        "walltime": 300,
        "stdout": str(work / "out.txt"),
        "stderr": str(work / "err.txt"),
    }
    return RequestJobRequest.model_validate(given | fields)


def said(work: Path, failsafe: float = 60) -> dict[str, object]:
    """What the job printed first (it comes once its process runs)."""
    deadline = time.monotonic() + failsafe
    out = work / "out.txt"
    while not out.exists() or not out.read_text().endswith("\n"):
        assert time.monotonic() < deadline, f"{out} never came"
        time.sleep(0.05)
    told: dict[str, object] = json.loads(out.read_text().splitlines()[0])
    return told


def until(
    client: EvolvingClient,
    sid: str,
    rid: str,
    job: str,
    done: Callable[[JobInfo], bool],
    failsafe: float = 60,
) -> JobInfo:
    """The job once ``done`` says so (polled: its state changes by itself)."""
    deadline = time.monotonic() + failsafe
    while True:
        (info,) = [j for j in client.request_jobs(sid, rid) if j.job == job]
        if done(info):
            return info
        assert time.monotonic() < deadline, info
        time.sleep(0.1)


def test_a_job_inside_a_pre_allocation_runs_on_its_updates_hosts_and_its_output_arrives(
    daemon: Daemon,
) -> None:
    with daemon.evolving() as client:
        sid = client.subscribe_evolving(Filter(clusters=("c1",)), name="amr").session
        client.send_request(sid, id="pa", cluster="c1", hosts=6, duration=3600, type=PRE)
        wait_for(client, sid, "start", request="pa")
        pa = client.request_info(sid, "pa")
        grow = client.send_request(sid, id="grow", cluster="c1", hosts=2, duration=600)
        assert (grow.state, grow.inside) == (AppState.STARTED, "pa")
        work = daemon.folder / "grow"
        answer = client.submit_request_job(sid, "grow", body(work, WAITER))
        assert set(answer.hosts) == set(grow.host_names)
        told = said(work)
        assert set(str(told["hosts"]).split(",")) == set(grow.host_names)
        info = until(client, sid, "grow", answer.job, lambda j: j.state == "running")
        assert info.batch_job is not None
        state, seen = daemon.batch_job("c1", info.batch_job)
        assert state is JobState.RUNNING
        assert seen is not None
        assert seen.reservation == pa.reservation  # the pre-allocation's placeholder
        assert set(seen.host_names) == set(grow.host_names)
        (work / "go").write_text("")
        ended = until(client, sid, "grow", answer.job, lambda j: j.state != "running")
        assert (ended.state, ended.exit_code) == ("completed", 0)
        assert [j.job for j in client.request_jobs(sid, "grow")] == [answer.job]
        assert client.request_jobs(sid, "pa") == []
        client.end(sid)


def test_a_job_on_one_of_a_preemptible_requests_hosts_runs_there_outside_reservations(
    daemon: Daemon,
) -> None:
    with daemon.evolving() as client:
        sid = client.subscribe_evolving(Filter(clusters=("c2",)), name="sweep").session
        client.send_request(sid, id="p", cluster="c2", hosts=4, duration=3600, type=PREEMPTIBLE)
        wait_for(client, sid, "start", request="p")
        hosts = client.request_info(sid, "p").host_names
        assert len(hosts) == 4
        work = daemon.folder / "one"
        task = body(work, WAITER, cluster="c2", hosts=[hosts[2]])
        answer = client.submit_request_job(sid, "p", task)
        assert answer.hosts == (hosts[2],)
        assert said(work)["hosts"] == hosts[2]
        info = until(client, sid, "p", answer.job, lambda j: j.state == "running")
        assert info.batch_job is not None
        state, seen = daemon.batch_job("c2", info.batch_job)
        assert state is JobState.RUNNING
        assert seen is not None
        assert (seen.reservation, seen.host_names) == (None, (hosts[2],))
        # Its request ends: the job it left is stopped.
        client.done_request(sid, "p")
        ended = until(client, sid, "p", answer.job, lambda j: j.state != "running")
        assert ended.state == "cancelled"
        assert "its request p ended" in (ended.reason or "")
        assert gone(int(str(said(work)["pid"])))
        assert daemon.batch_job("c2", info.batch_job)[0] is JobState.CANCELLED
        client.end(sid)


def test_a_preempted_request_not_answered_by_its_deadline_has_its_job_stopped(
    daemon: Daemon,
) -> None:
    with daemon.evolving() as client:
        sweep = client.subscribe_evolving(Filter(clusters=("c2",)), name="sweep").session
        client.send_request(sweep, id="p", cluster="c2", hosts=4, duration=3600, type=PREEMPTIBLE)
        start = wait_for(client, sweep, "start", request="p")
        hosts = client.request_info(sweep, "p").host_names
        work = daemon.folder / "task"
        task = body(work, WAITER, cluster="c2", hosts=list(hosts[:2]))
        answer = client.submit_request_job(sweep, "p", task)
        pid = int(str(said(work)["pid"]))
        until(client, sweep, "p", answer.job, lambda j: j.state == "running")
        solver = client.subscribe_evolving(Filter(clusters=("c2",)), name="solver").session
        client.send_request(solver, id="np", cluster="c2", hosts=4, duration=600)
        preempt = wait_for(client, sweep, "preempt", after=start.seq, request="p")
        killed = wait_for(client, sweep, "killed", after=preempt.seq, request="p")
        assert killed.time >= preempt.deadline
        ended = until(client, sweep, "p", answer.job, lambda j: j.state != "running")
        assert ended.state in ("cancelled", "failed"), ended
        assert "preempted" in (ended.reason or ""), ended
        assert gone(pid)
        taken = wait_for(client, solver, "start", request="np")
        assert set(taken.allocations["c2"].hosts) == set(hosts)
        client.end(sweep)
        client.end(solver)


def test_others_get_404_and_what_a_request_cannot_run_is_refused(daemon: Daemon) -> None:
    work = daemon.folder / "w"
    with daemon.evolving() as client, daemon.evolving(BOB) as bob:
        sid = client.subscribe_evolving(Filter(clusters=("c1", "c2")), name="amr").session
        client.send_request(sid, id="pa", cluster="c1", hosts=2, duration=600, type=PRE)
        start = wait_for(client, sid, "start", request="pa")
        mine = client.submit_request_job(sid, "pa", body(work, WAITER))
        for call in (
            lambda: bob.submit_request_job(sid, "pa", body(work, "pass")),
            lambda: bob.request_jobs(sid, "pa"),
            lambda: bob.cancel_request_job(sid, "pa", mine.job),
        ):
            with pytest.raises(BridgeError) as refused:
                call()
            assert refused.value.status == 404
        left = start.end - client.health().time
        v1 = client.subscribe(Filter(clusters=("c1",))).session
        # All of c1, which the pre-allocation holds two of: not before that one ends.
        later = client.send_request(sid, id="later", cluster="c1", hosts=8, duration=60)
        assert later.state is not AppState.STARTED
        refusals = [
            (sid, "pa", body(work, "pass", walltime=left + 60), 409, "passes the end of"),
            (sid, "pa", body(work, "pass", cluster="c2"), 409, "is on cluster c1, not c2"),
            (sid, "pa", body(work, "pass", hosts=["c1-9"]), 422, "does not hold c1-9"),
            (sid, "nothing", body(work, "pass"), 404, "no request nothing"),
            (v1, "pa", body(work, "pass"), 409, "is a v1 session"),
            (sid, "later", body(work, "pass"), 409, "not started"),
        ]
        for session, rid, job, status, words in refusals:
            with pytest.raises(BridgeError) as refused:
                client.submit_request_job(session, rid, job)
            assert refused.value.status == status, refused.value
            assert words in refused.value.detail
        assert [j.job for j in client.request_jobs(sid, "pa")] == [mine.job]
        with pytest.raises(BridgeError) as refused:
            client.cancel_request_job(sid, "pa", "nosuchjob")
        assert refused.value.status == 404
        cancelled = client.cancel_request_job(sid, "pa", mine.job)
        assert cancelled.job == mine.job
        ended = until(client, sid, "pa", mine.job, lambda j: j.state not in ("pending", "running"))
        assert ended.state == "cancelled"
        assert client.cancel_request_job(sid, "pa", mine.job).state == "cancelled"  # harmless
        client.end(sid)


def test_a_killed_daemon_restarted_finds_a_requests_job_and_ends_it_with_its_request(
    make: Callable[..., Daemon],
) -> None:
    first = make().start()
    folder = first.folder
    with first.evolving() as client:
        sid = client.subscribe_evolving(Filter(clusters=("c2",)), name="sweep").session
        client.send_request(sid, id="p", cluster="c2", hosts=4, duration=3600, type=PREEMPTIBLE)
        wait_for(client, sid, "start", request="p")
        hosts = client.request_info(sid, "p").host_names
        work = folder / "task"
        answer = client.submit_request_job(sid, "p", body(work, WAITER, cluster="c2",
                                                          hosts=[hosts[0]]))  # fmt: skip
        pid = int(str(said(work)["pid"]))
        until(client, sid, "p", answer.job, lambda j: j.state == "running")
    first.kill(signal.SIGKILL)
    second = make().start()  # the platform replays its journal: the job, on its named host
    with second.evolving() as client:
        info = until(client, sid, "p", answer.job, lambda j: j.state == "running")
        assert info.batch_job is not None
        state, seen = second.batch_job("c2", info.batch_job)
        assert state is JobState.RUNNING
        assert seen is not None
        assert seen.host_names == (hosts[0],)
        assert not gone(pid)  # the same process, never started again
        client.done_request(sid, "p")
        ended = until(client, sid, "p", answer.job, lambda j: j.state != "running")
        assert ended.state == "cancelled"
        assert gone(pid)
        client.end(sid)
