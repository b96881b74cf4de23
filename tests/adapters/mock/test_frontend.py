"""The mock's front end: jobs as processes of this host under supervisors that outlive the
daemon. Real processes; each test stops what it started, by PID (process groups included)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coorm_bridge.adapters.frontend import Launched, ProcessEnd, ProcessSpec
from coorm_bridge.adapters.mock import containment, frontend
from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.adapters.mock.frontend import ProcessFrontEnd
from coorm_bridge.adapters.mock.plugin import MockSettings, create
from coorm_bridge.adapters.registry import AdapterContext
from coorm_bridge.batchsim import VirtualClock, parse_platform
from coorm_bridge.core.batch import JobSpec, JobState, ReservationSpec
from tests import daemons

PY = sys.executable


class Ends:
    """What the front end told the simulated batch system."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str, JobState]] = []

    def __call__(self, cluster: str, job: str, state: JobState) -> None:
        self.told.append((cluster, job, state))


def unused(cluster: str, job: JobSpec) -> str:
    raise AssertionError("nothing is submitted here")


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[tuple[ProcessFrontEnd, list[Launched]]]:
    """A front end over ``tmp_path/jobs``; every process it launched is killed at the end."""
    ends = Ends()
    front = ProcessFrontEnd(tmp_path / "jobs", run_jobs=True, submit=unused, end=ends, grace=0.5)
    launched: list[Launched] = []
    yield front, launched
    daemons.end_jobs((tmp_path / "jobs").glob("*"))


def spec(work: Path, code: str, env: dict[str, str] | None = None) -> ProcessSpec:
    work.mkdir(exist_ok=True)
    return ProcessSpec(
        argv=(PY, "-c", code),
        environment={"PATH": os.environ["PATH"], **(env or {})},
        workdir=str(work),
        stdout=str(work / "out.txt"),
        stderr=str(work / "err.txt"),
    )


def finished(
    front: ProcessFrontEnd, job: str, launched: Launched, timeout: float = 30
) -> ProcessEnd:
    deadline = time.monotonic() + timeout
    while (outcome := front.outcome(job, launched)) is None:
        assert time.monotonic() < deadline, f"job {job} still runs"
        time.sleep(0.05)
    return outcome


def test_a_job_runs_with_its_environment_folder_and_files_and_its_status_comes_back(jobs, tmp_path):
    front, launched = jobs
    code = (
        "import os, sys, json; print(json.dumps([os.getcwd(), dict(os.environ)]));"
        "print('oops', file=sys.stderr); sys.exit(3)"
    )
    work = tmp_path / "work"
    launched.append(started := front.launch("j1", spec(work, code, {"MY_VAR": "x y=z"})))
    outcome = finished(front, "j1", started)
    assert (outcome.exit_code, outcome.signal, outcome.succeeded) == (3, None, False)
    cwd, env = json.loads((work / "out.txt").read_text())
    assert cwd == str(work)
    # Exactly the environment given, and the job's marker (by which its processes are found
    # where no cgroup can be made): nothing of the daemon's leaks in (LC_CTYPE aside, which
    # Python itself may set for its locale coercion).
    assert {k: v for k, v in env.items() if k != "LC_CTYPE"} == {
        "PATH": os.environ["PATH"],
        "MY_VAR": "x y=z",
        "COORM_JOB_TAG": containment.key(front.folder / "j1"),
    }
    assert (work / "err.txt").read_text() == "oops\n"
    # Asked again, the same answer: it is read from the status the supervisor left.
    assert front.outcome("j1", started) == outcome


def test_arguments_reach_the_command_verbatim_without_a_shell(jobs, tmp_path):
    front, launched = jobs
    work = tmp_path / "work"
    job = spec(work, "import sys; print(repr(sys.argv[1:]))")
    job = job.model_copy(update={"argv": (*job.argv, "$HOME", "a;b", "`id`", "*")})
    launched.append(started := front.launch("j1", job))
    assert finished(front, "j1", started).exit_code == 0
    assert (work / "out.txt").read_text() == "['$HOME', 'a;b', '`id`', '*']\n"


def test_a_command_that_cannot_run_fails_with_the_reason(jobs, tmp_path):
    front, launched = jobs
    job = spec(tmp_path / "work", "")
    missing = job.model_copy(update={"argv": ("/no/such/command",)})
    launched.append(started := front.launch("j1", missing))
    outcome = finished(front, "j1", started)
    assert outcome.exit_code is None
    assert outcome.reason == "/no/such/command: No such file or directory"


def test_stop_sends_sigterm_then_sigkill_after_the_grace_to_every_process_of_the_job(
    jobs, tmp_path
):
    front, launched = jobs
    work = tmp_path / "work"
    # The job ignores SIGTERM and leaves a grandchild behind in its group.
    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
        "open('child', 'w').write(str(child.pid)); print('ready', flush=True); time.sleep(600)"
    )
    launched.append(started := front.launch("j1", spec(work, code)))
    deadline = time.monotonic() + 30
    out = work / "out.txt"
    while not out.exists() or "ready" not in out.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int((work / "child").read_text())
    asked = time.monotonic()
    front.stop("j1", started)
    outcome = finished(front, "j1", started)
    assert time.monotonic() - asked >= 0.5  # the grace was given
    assert (outcome.exit_code, outcome.signal) == (None, signal.SIGKILL)
    assert "stopped" in (outcome.reason or "")
    # Gone with it (a zombie at most, while whoever inherited it has not reaped it).
    assert frontend.started_at(grandchild) is None
    front.stop("j1", started)  # stopping an ended job does nothing


def test_a_job_outlives_its_daemon_and_the_next_one_gets_its_status(jobs, tmp_path):
    front, launched = jobs
    work = tmp_path / "work"
    code = "import time; time.sleep(1.5)"
    launched.append(started := front.launch("j1", spec(work, code)))
    # A daemon restarted: a new front end over the same folder, knowing only what was stored.
    again = ProcessFrontEnd(tmp_path / "jobs", run_jobs=True, submit=unused, end=Ends(), grace=0.5)
    assert again.outcome("j1", started) is None
    assert finished(again, "j1", started).exit_code == 0
    assert finished(front, "j1", started).exit_code == 0  # the first one reaps its child


def test_a_process_gone_without_a_status_is_told_so_and_a_reused_pid_is_not_it(jobs, tmp_path):
    front, _ = jobs
    (tmp_path / "jobs" / "gone").mkdir(parents=True)
    # A pid that runs but started at another time is another process.
    other = Launched(pid=os.getpid(), since=(frontend.started_at(os.getpid()) or 0) + 1)
    outcome = front.outcome("gone", other)
    assert outcome is not None
    assert outcome.exit_code is None
    assert "no exit status" in (outcome.reason or "")


def test_the_simulated_job_ends_completed_or_failed_by_the_exit_status(tmp_path):
    ends = Ends()
    front = ProcessFrontEnd(tmp_path, run_jobs=True, submit=unused, end=ends)
    front.ended("a", "a.1", ProcessEnd(exit_code=0))
    front.ended("a", "a.2", ProcessEnd(exit_code=1))
    front.ended("a", "a.3", ProcessEnd(signal=9))
    assert ends.told == [
        ("a", "a.1", JobState.COMPLETED),
        ("a", "a.2", JobState.FAILED),
        ("a", "a.3", JobState.FAILED),
    ]


@pytest.mark.parametrize(
    ("run_jobs", "uid", "private", "owner", "refused"),
    [
        (None, 1000, False, "me", None),
        (None, 1000, True, "me", None),
        (None, 1000, True, "bob", "as the daemon's account, me, so this daemon runs me's only"),
        (None, 0, False, "me", "runs as root and others can reach it"),
        # Its user's own daemon, which nobody else can reach: root's jobs as root grant nothing.
        (None, 0, True, "me", None),
        (None, 0, True, "bob", "runs me's only, not bob's"),
        # A root daemon runs each job as its owner: one with an account here (root has one).
        (True, 0, False, "root", None),
        (True, 0, False, "bob", "bob has no account on this host"),
        (False, 1000, True, "me", "run_jobs = false"),
    ],
)
def test_who_gets_jobs_run(monkeypatch, tmp_path, run_jobs, uid, private, owner, refused):
    monkeypatch.setattr(frontend.os, "geteuid", lambda: uid)
    monkeypatch.setattr(frontend, "account", lambda: "me")
    front = ProcessFrontEnd(tmp_path, run_jobs, submit=unused, end=Ends(), private=private)
    said = front.refusal(owner)
    if refused is None:
        assert said is None
    else:
        assert said is not None
        assert refused in said


@pytest.mark.parametrize(
    ("run_jobs", "uid", "owner"), [(None, 0, "me"), (None, 1000, "bob"), (False, 1000, "me")]
)
def test_a_refusal_says_what_to_do(monkeypatch, tmp_path, run_jobs, uid, owner):
    """Not a bare "no": the refused user's own daemon runs their jobs (or the admin may)."""
    monkeypatch.setattr(frontend.os, "geteuid", lambda: uid)
    monkeypatch.setattr(frontend, "account", lambda: "me")
    said = ProcessFrontEnd(tmp_path, run_jobs, submit=unused, end=Ends()).refusal(owner) or ""
    assert "`coorm-bridge serve` with no configuration" in said
    assert "`coorm-launch --start-daemon APP.toml`" in said
    assert "run_jobs = " in said


def test_the_daemons_platform_has_a_front_end_with_its_jobs_in_the_state_folder(tmp_path):
    adapter = create(MockSettings(run_jobs=False), AdapterContext(state_dir=tmp_path))
    try:
        front = adapter.front_end()
        assert isinstance(front, ProcessFrontEnd)
        assert front.folder == tmp_path / "jobs"
        said = front.refusal("anyone") or ""
        assert said.startswith("this simulated platform runs no jobs ([adapter] run_jobs = false)")
    finally:
        adapter.close()
    # Built from Python without a jobs folder, the platform only simulates.
    assert MockAdapter(parse_platform('[[cluster]]\nname = "c"\nhosts = 1\n')).front_end() is None


def test_a_launch_cut_short_by_a_crash_is_found_again_and_one_never_made_is_not(jobs, tmp_path):
    front, launched = jobs
    launched.append(
        started := front.launch("j1", spec(tmp_path / "w", "import time; time.sleep(1)"))
    )
    # The daemon died before it recorded ``started``: the next one finds the process anyway.
    deadline = time.monotonic() + 30
    while (found := front.recover("j1")) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert found.pid == started.pid
    assert finished(front, "j1", found).exit_code == 0
    assert front.recover("j1") is not None  # ended, with its status: still found
    assert front.recover("never") is None


def test_jobs_go_to_the_simulated_batch_system_and_end_with_their_process(tmp_path):
    text = 'start = 1000000\n[[cluster]]\nname = "c"\nhosts = 4\n'
    platform = MockAdapter(parse_platform(text), VirtualClock(1_000_000), jobs=tmp_path)
    front = platform.front_end()
    assert front is not None
    resa = ReservationSpec(name="r", start=1_000_000, end=1_003_600, hosts=2, users=("alice",))
    platform.create_reservation("c", resa)
    job = JobSpec(name="app", user="alice", argv=("x",), hosts=2, walltime=600, reservation="r")
    first, second = front.submit("c", job), front.submit("c", job)
    assert platform.job_state("c", first) is JobState.RUNNING
    front.ended("c", first, ProcessEnd(exit_code=0))
    assert platform.job_state("c", first) is JobState.COMPLETED
    platform.run_until(1_000_000 + 600)  # the second one's process never said it ended
    assert platform.job_state("c", second) is JobState.FAILED
