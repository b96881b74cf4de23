"""The mock platform's front end through a real daemon: jobs submitted into a session's own
placeholders run as processes on this host, the simulated batch system sees them, and they end
as a batch system's would (exit, cancel, time limit, session's end), never twice across a
``kill -9``.

Each test starts its own ``coorm-bridge serve`` and stops it by PID; the job processes it
leaves (supervisors outlive the daemon on purpose) are killed by the PIDs in its state folder.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import FILE_NAME, Journal, VirtualClock, load_platform
from coorm_bridge.core.batch import ClusterSnapshot, JobState
from coorm_bridge.core.model import Filter, Submission
from coorm_bridge.launchers.client import BridgeError
from tests import daemons
from tests.daemons import free_port
from tests.jobs import gone, job, started, wait_job

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789abc"


def _account(name: str) -> str | None:
    """A root daemon runs each job as its owner, who must have an account here: the test user
    ``coorm_NAME`` (.ci/run makes them; None: there is none); a daemon not root needs none."""
    if os.geteuid() != 0:
        return name
    try:
        return pwd.getpwnam(f"coorm_{name}").pw_name
    except KeyError:
        return None


ACCOUNTS = {ALICE: _account("alice"), BOB: _account("bob")}
USERS = {token: account or "" for token, account in ACCOUNTS.items()}

pytestmark = [
    pytest.mark.daemon,
    pytest.mark.skipif(
        None in ACCOUNTS.values(),
        reason="run as root, jobs run as their owners: the test users coorm_alice and coorm_bob "
        "must exist (.ci/run makes them)",
    ),
]


class Daemon(daemons.Daemon):
    """``coorm-bridge serve`` over a folder of its own, its front end running jobs."""

    def __init__(self, folder: Path, run_jobs: object = True) -> None:
        port = free_port()
        adapter = {**daemons.MOCK, **({"run_jobs": True} if run_jobs else {})}
        text = daemons.config(adapter, port=port, tokens=USERS)
        super().__init__(folder, text, daemons.PLATFORM, port)

    @property
    def jobs_folder(self) -> Path:
        return self.folder / "state" / "jobs"

    def batch(self, cluster: str, batch_job: str) -> tuple[JobState, ClusterSnapshot]:
        """What the simulated batch system says of a job, and its cluster now: read from the
        platform the daemon saved, without the daemon (as ``python -m ...adapters.mock``)."""
        with Journal(self.folder / "state" / FILE_NAME, readonly=True) as journal:
            now = journal.resume_time(time.time())
            assert now is not None
            spec = load_platform(self.folder / "platform.toml")
            adapter = MockAdapter(spec, VirtualClock(now), journal=journal)
            return adapter.job_state(cluster, batch_job), adapter.snapshot([cluster]).clusters[
                cluster
            ]


@pytest.fixture
def make_daemon(make_daemon: Callable[..., Daemon]) -> Callable[..., Daemon]:
    """Daemons of this module's kind (tests/conftest.py stops them and the jobs they left)."""
    return functools.partial(make_daemon, cls=Daemon)


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon().start()


def wait_file(path: Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().endswith("\n"):
        assert time.monotonic() < deadline, f"{path} never came"
        time.sleep(0.05)
    return path.read_text()


def go(folder: Path, code: int) -> None:
    """Let a waiting job end with ``code``: ``go`` appears whole (renamed into place), never
    empty, as a job that sees it may read it at once (an empty read exited 1 in CI)."""
    (folder / "go.tmp").write_text(str(code))
    (folder / "go.tmp").rename(folder / "go")


#: A job that says what it got, then waits for ``go`` and exits with the code written in it.
REPORTER = (
    "import json, os, sys, time; print('to stderr', file=sys.stderr);"
    "print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ), 'pid': os.getpid()}),"
    " flush=True)\n"
    "while not os.path.exists('go'): time.sleep(0.05)\n"
    "sys.exit(int(open('go').read()))"
)
#: A job that notes each start in ``runs``, then waits for ``go`` and exits with its code.
RUNNER = (
    "import os, sys, time; open('runs', 'a').write(f'{os.getpid()}\\n')\n"
    "while not os.path.exists('go'): time.sleep(0.05)\n"
    "sys.exit(int(open('go').read()))"
)
SLEEPER = "import os, time; open('pid', 'w').write(f'{os.getpid()}\\n'); time.sleep(600)"


def test_a_job_runs_in_its_session_on_this_host_and_the_batch_system_sees_it_end(daemon):
    with daemon.client() as client:
        told = {info.name: info.submission for info in client.clusters()}
        assert told == {"c1": Submission(kind="mock"), "c2": Submission(kind="mock")}
        sid, start = started(client, {"c1": 3, "c2": 1})
        work = daemon.folder / "work"
        answer = client.submit_job(sid, job(work, REPORTER, environment={"MY_VAR": "a b=c"}))
        assert (answer.cluster, answer.hosts) == ("c1", tuple(start.allocations["c1"].hosts))
        said = json.loads(wait_file(work / "out.txt"))
        assert said["cwd"] == str(work)
        env = said["env"]
        assert env["MY_VAR"] == "a b=c"
        assert env["COORM_JOB_ID"] == answer.job
        assert env["COORM_JOB_HOSTS"] == ",".join(answer.hosts)
        assert env["COORM_CLUSTER"] == "c1"
        for inherited in ("PATH", "HOME", "LANG"):
            assert env.get(inherited) == os.environ.get(inherited)
        assert set(env) - {"LC_CTYPE"} <= {"MY_VAR", "PATH", "HOME", "LANG"} | {
            "COORM_JOB_ID",
            "COORM_JOB_HOSTS",
            "COORM_CLUSTER",
            "COORM_JOB_TAG",  # the front end's marker of the job's processes
        }
        assert (work / "err.txt").read_text() == "to stderr\n"
        info = wait_job(client, sid, answer.job, lambda j: j.state == "running")
        assert info.batch_job is not None
        # The simulated batch system runs it inside the session's placeholder, on its hosts.
        state, shot = daemon.batch("c1", info.batch_job)
        assert state is JobState.RUNNING
        (seen,) = [j for j in shot.jobs if j.id == info.batch_job]
        assert seen.reservation == start.allocations["c1"].reservation
        assert set(seen.host_names) == set(answer.hosts)

        # A second job on the same cluster waits: each one runs on all the allocation's hosts.
        again = client.submit_job(sid, job(daemon.folder / "work2", "pass"))
        time.sleep(1)
        assert [j.state for j in client.jobs(sid)] == ["running", "pending"]

        go(work, 3)
        info = wait_job(client, sid, answer.job, lambda j: j.state != "running")
        assert (info.state, info.exit_code, info.signal) == ("failed", 3, None)
        state, shot = daemon.batch("c1", info.batch_job)
        assert state is JobState.FAILED  # it ended with its process, not at its limit
        assert info.batch_job not in {j.id for j in shot.jobs}
        assert gone(said["pid"])

        # The next one then runs, and exits 0: completed, there too.
        info = wait_job(client, sid, again.job, lambda j: j.state not in ("pending", "running"))
        assert (info.state, info.exit_code) == ("completed", 0)
        assert daemon.batch("c1", info.batch_job)[0] is JobState.COMPLETED
        assert [j.job for j in client.jobs(sid)] == [answer.job, again.job]


def test_only_the_owner_submits_sees_and_cancels_its_jobs(daemon):
    with daemon.client(ALICE) as alice, daemon.client(BOB) as bob:
        sid, _ = started(alice, {"c1": 1})
        mine = alice.submit_job(sid, job(daemon.folder / "w", SLEEPER))
        for call in (
            lambda: bob.submit_job(sid, job(daemon.folder / "w", "pass")),
            lambda: bob.jobs(sid),
            lambda: bob.cancel_job(sid, mine.job),
        ):
            with pytest.raises(BridgeError) as refused:
                call()
            assert refused.value.status == 404
        assert [j.job for j in alice.jobs(sid)] == [mine.job]
        with pytest.raises(BridgeError) as refused:
            alice.cancel_job(sid, "nosuchjob")
        assert refused.value.status == 404
        alice.cancel_job(sid, mine.job)


def test_refused_jobs_change_nothing(daemon):
    work = daemon.folder / "w"
    with daemon.client() as client:
        waiting = client.subscribe(Filter(clusters=("c1", "c2"))).session
        sid, start = started(client, {"c1": 2}, duration=120)
        left = start.end - client.health().time
        refusals = [
            (waiting, job(work, "pass"), 409, "not started"),
            (sid, job(work, "pass", cluster="c2"), 409, "c2 is not in the allocation"),
            (sid, job(work, "pass", walltime=left + 60), 409, "passes the allocation's end"),
            (sid, job(work, "pass", workdir="/no/such/folder", stdout="/no/such/folder/o",
                      stderr="/no/such/folder/e", walltime=30), 422, "not a folder"),
        ]  # fmt: skip
        for session, body, status, words in refusals:
            with pytest.raises(BridgeError) as refused:
                client.submit_job(session, body)
            assert (refused.value.status, refused.value.code) == (
                status,
                "conflict" if status == 409 else "invalid",
            )
            assert words in refused.value.detail
        # What the protocol refuses before anything else (no shell, bounded, inside workdir).
        raw = job(work, "pass", walltime=30).model_dump(mode="json")
        http = client._http  # the body as a launcher in another language could send it
        base = f"{client._base}/v1/sessions/{sid}/jobs"
        for bad in (
            {"argv": ["/bin/echo", "a\u0000b"]},
            {"argv": ["x"] * 2000},
            {"stdout": "/etc/passwd"},
            {"workdir": "relative/path"},
            {"environment": {"COORM_JOB_ID": "mine"}},
            {"environment": {"A": "x" * 40_000}},
            {"name": "two words"},
            {"walltime": 0},
        ):
            answer = http.post(base, json=raw | bad, timeout=10)
            assert answer.status_code == 422, (bad, answer.text)
            assert answer.json()["error"] == "invalid"
        assert client.jobs(sid) == []
        assert client.jobs(waiting) == []
    assert not daemon.jobs_folder.exists() or not any(daemon.jobs_folder.iterdir())
    assert not (work / "out.txt").exists()


def test_cancel_stops_the_process_and_done_stops_the_rest(daemon):
    with daemon.client() as client:
        sid, _ = started(client, {"c1": 2, "c2": 2})
        first = client.submit_job(sid, job(daemon.folder / "a", SLEEPER))
        second = client.submit_job(sid, job(daemon.folder / "b", SLEEPER, cluster="c2"))
        pids = [int(wait_file(daemon.folder / w / "pid")) for w in ("a", "b")]
        answer = client.cancel_job(sid, first.job)
        assert answer.job == first.job
        info = wait_job(client, sid, first.job, lambda j: j.state != "running")
        assert (info.state, info.exit_code, info.signal) == ("cancelled", None, signal.SIGTERM)
        assert gone(pids[0])
        assert daemon.batch("c1", info.batch_job)[0] is JobState.CANCELLED
        assert client.cancel_job(sid, first.job).state == "cancelled"  # again: harmless
        # done: the application has exited; whatever it left running goes.
        client.done(sid)
        info = wait_job(client, sid, second.job, lambda j: j.state != "running")
        assert info.state == "cancelled"
        assert info.reason == "its application sent done: the jobs it left are cancelled"
        assert gone(pids[1])


def test_a_job_still_running_at_the_allocations_end_is_killed(daemon):
    with daemon.client() as client:
        sid, start = started(client, {"c1": 1}, duration=6)
        for _ in range(3):  # a second may pass between reading the time and submitting
            left = start.end - client.health().time
            try:
                answer = client.submit_job(sid, job(daemon.folder / "w", SLEEPER, walltime=left))
                break
            except BridgeError as error:
                if error.status != 409:
                    raise
        else:
            pytest.fail("the job was refused three times for passing the allocation's end")
        pid = int(wait_file(daemon.folder / "w" / "pid"))
        info = wait_job(client, sid, answer.job, lambda j: j.state != "running", timeout=60)
        ended_at = client.health().time
        assert info.state in ("failed", "cancelled")  # its limit, or its session's end
        assert info.exit_code is None
        assert info.ended is not None
        assert start.end - 1 <= info.ended <= start.end + 3
        assert ended_at <= start.end + 10
        assert gone(pid)


def test_a_job_past_its_own_walltime_is_killed_by_the_batch_system_as_failed(daemon):
    with daemon.client() as client:
        sid, _ = started(client, {"c1": 1})
        answer = client.submit_job(sid, job(daemon.folder / "w", SLEEPER, walltime=3))
        pid = int(wait_file(daemon.folder / "w" / "pid"))
        info = wait_job(client, sid, answer.job, lambda j: j.state != "running")
        assert (info.state, info.exit_code, info.signal) == ("failed", None, signal.SIGTERM)
        assert "time limit" in (info.reason or "")
        assert info.submitted is not None
        assert info.started is not None
        assert info.ended is not None
        # Its limit counts from the batch system's start, between its submission and the moment
        # the launch returned (``started``; a second later on a busy machine): so at least 3 s
        # from the submission, and at most 5 s from ``started``.
        assert info.ended - info.submitted >= 3
        assert info.ended - info.started <= 5
        assert gone(pid)
        assert daemon.batch("c1", info.batch_job or "")[0] is JobState.FAILED
        assert client.session(sid).state.value == "started"  # the session goes on


def test_a_killed_daemon_restarted_runs_no_job_twice_and_finds_how_each_ended(make_daemon):
    first = make_daemon().start()
    folder = first.folder
    with first.client() as client:
        sid, _ = started(client, {"c1": 1, "c2": 1})
        other, _ = started(client, {"c1": 1})
        running = client.submit_job(sid, job(folder / "a", RUNNER))
        meanwhile = client.submit_job(sid, job(folder / "b", RUNNER, cluster="c2"))
        lost = client.submit_job(other, job(folder / "c", SLEEPER, name="lost"))
        for work in ("a", "b"):
            wait_file(folder / work / "runs")
        wait_file(folder / "c" / "pid")
    first.kill(signal.SIGKILL)
    # While no daemon runs: one job ends by itself, the other is killed with its supervisor.
    go(folder / "b", 7)
    pids = [int((folder / "b" / "runs").read_text())]  # b's job, which exits with its code
    for name in ("supervisor.pid", "job.pid"):
        pids.append(int((first.jobs_folder / lost.job / name).read_text()))
        os.killpg(pids[-1], signal.SIGKILL)
    deadline = time.monotonic() + 30  # a failsafe: each ends at once
    while not all(map(gone, pids)):
        assert time.monotonic() < deadline, [p for p in pids if not gone(p)]
        time.sleep(0.05)
    second = make_daemon().start()
    with second.client() as client:
        ended = wait_job(client, sid, meanwhile.job, lambda j: j.state != "running")
        assert (ended.state, ended.exit_code) == ("failed", 7)
        gone_info = wait_job(client, other, lost.job, lambda j: j.state != "running")
        assert gone_info.state == "failed"
        assert "no exit status" in (gone_info.reason or "")
        assert client.jobs(sid)[0].state == "running"  # still running, watched again
        go(folder / "a", 0)
        done = wait_job(client, sid, running.job, lambda j: j.state != "running")
        assert (done.state, done.exit_code) == ("completed", 0)
    for work in ("a", "b"):
        assert len((folder / work / "runs").read_text().splitlines()) == 1  # never run again
    assert second.batch("c2", ended.batch_job or "")[0] is JobState.FAILED


def test_a_daemon_running_as_root_or_for_someone_else_runs_no_job_unless_told(make_daemon):
    daemon = make_daemon(run_jobs="").start()
    with daemon.client(ALICE) as alice:  # alice is not the daemon's account
        sid, _ = started(alice, {"c1": 1})
        with pytest.raises(BridgeError) as refused:
            alice.submit_job(sid, job(daemon.folder / "w", "pass"))
        assert refused.value.status == 409
        assert "runs jobs as the daemon's account" in refused.value.detail
        assert "run_jobs = true" in refused.value.detail
        assert alice.jobs(sid) == []
