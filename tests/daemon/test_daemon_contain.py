"""Job containment through a real daemon (issue 24): what a job starts ends with the job, a
``setsid`` child included, even when the job ends while no daemon runs; a job that kills its
own supervisor is reported as what it is (running, then ended at its allocation's end at the
latest), not failed while it runs on; and a root daemon runs each job as the session's owner,
never as root. Each test starts its own ``coorm-bridge serve`` and stops it by PID; what the
jobs left is killed by tests/conftest.py (``daemons.end_jobs``)."""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from coorm_bridge.launchers.client import BridgeError
from tests import daemons
from tests.daemons import free_port
from tests.jobs import gone, info_of, job, started, wait_job

pytestmark = pytest.mark.daemon

ALICE = "coorm-alice-token-0123456789"
NOBODY = "nobody-here-token-0123456789"
#: A child that leaves the job's session and process group, notes its pid, and lingers.
ESCAPER = (
    "import os, time; os.setsid(); open('escaped.part', 'w').write(f'{os.getpid()}\\n');"
    "os.replace('escaped.part', 'escaped'); time.sleep(600)"
)
#: Starts the escaper and waits for it to be away.
SPAWN = (
    "import os, signal, subprocess, sys, time\n"
    f"subprocess.Popen([sys.executable, '-c', {ESCAPER!r}])\n"
    "while not os.path.exists('escaped'): time.sleep(0.02)\n"
)


class Daemon(daemons.Daemon):
    """``coorm-bridge serve`` running everyone's jobs, reachable over TCP by coorm_alice and
    by a user with no account here."""

    def __init__(self, folder: Path) -> None:
        port = free_port()
        tokens = {ALICE: "coorm_alice", NOBODY: "nosuch_coorm_user"}
        text = daemons.config({**daemons.MOCK, "run_jobs": True}, port=port, tokens=tokens)
        super().__init__(folder, text, daemons.PLATFORM, port)


@pytest.fixture
def make_daemon(make_daemon: Callable[..., Daemon]) -> Callable[..., Daemon]:
    return functools.partial(make_daemon, cls=Daemon)


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon().start()


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout  # a failsafe only
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def pid_in(path: Path) -> int:
    wait_for(lambda: path.exists() and path.read_text().endswith("\n"), f"{path} never came")
    return int(path.read_text())


def test_a_setsid_child_ends_with_its_job_at_its_walltime(daemon):
    work = daemon.folder / "w"
    with daemon.client() as client:
        sid, _ = started(client, {"c1": 1})
        answer = client.submit_job(sid, job(work, SPAWN + "time.sleep(600)", walltime=3))
        child = pid_in(work / "escaped")
        info = wait_job(client, sid, answer.job, lambda j: j.state != "running")
        assert info.state == "failed"
        assert "time limit" in (info.reason or "")
        assert gone(child), "the setsid child outlived its job's walltime"


def test_a_setsid_child_ends_with_its_job_when_it_ends_while_no_daemon_runs(make_daemon):
    first = make_daemon().start()
    work = first.folder / "w"
    code = SPAWN + "while not os.path.exists('go'): time.sleep(0.02)\n"
    with first.client() as client:
        sid, _ = started(client, {"c1": 1})
        answer = client.submit_job(sid, job(work, code))
        child = pid_in(work / "escaped")
    assert first.stop() == 0  # a daemon's stop leaves its jobs running, as sbatch's jobs
    assert not gone(child)
    (work / "go").write_text("")
    status = first.folder / "state" / "jobs" / answer.job / "status.json"
    wait_for(status.exists, "the job never ended")
    assert gone(child), "the setsid child outlived its job, ended while no daemon ran"
    second = make_daemon().start()
    with second.client() as client:
        info = wait_job(client, sid, answer.job, lambda j: j.state != "running")
        assert (info.state, info.exit_code) == ("completed", 0)


def test_a_job_that_kills_its_supervisor_runs_until_its_allocation_ends_and_no_longer(daemon):
    work = daemon.folder / "w"
    code = SPAWN + (
        "os.kill(os.getppid(), signal.SIGKILL)\n"
        "open('pid', 'w').write(f'{os.getpid()}\\n'); time.sleep(600)\n"
    )
    with daemon.client() as client:
        sid, start = started(client, {"c1": 1}, duration=10)
        left = start.end - client.health().time
        answer = client.submit_job(sid, job(work, code, walltime=left))
        child, pid = pid_in(work / "escaped"), pid_in(work / "pid")
        # Until its allocation ends, its processes run: so does the job, as the bridge says.
        while client.health().time < start.end - 1:
            info = info_of(client, sid, answer.job)
            assert not gone(pid)
            assert info.state == "running", info
            time.sleep(0.2)
        info = wait_job(client, sid, answer.job, lambda j: j.state != "running")
        assert info.state in ("failed", "cancelled")  # its limit, or its session's end
        assert info.ended is not None
        assert info.ended <= start.end + 3
        assert gone(pid), "the job ran on past its allocation's end"
        assert gone(child), "its setsid child ran on past its allocation's end"


# -- a root daemon runs each job as its session's owner -----------------------------------------


def _account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


OWNER = _account("coorm_alice")
SYSTEM_PY = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"


@pytest.mark.skipif(
    os.geteuid() != 0 or OWNER is None, reason="needs root and the account coorm_alice"
)
def test_a_root_daemon_runs_a_users_job_as_that_user_and_refuses_one_with_no_account(daemon):
    assert OWNER is not None
    daemon.folder.chmod(0o711)  # she may pass through to her folder, not read the daemon's
    work = daemon.folder / "alice"
    work.mkdir()
    os.chown(work, OWNER.pw_uid, OWNER.pw_gid)
    code = (
        "import os; print(os.getuid(), os.geteuid(), os.getgid(), os.getegid());"
        "print(sorted(os.getgroups())); print(os.environ['HOME'], os.environ['USER'])"
    )
    with daemon.client(ALICE) as alice, daemon.client(NOBODY) as nobody:
        sid, _ = started(alice, {"c1": 1})
        answer = alice.submit_job(sid, job(work, code, python=SYSTEM_PY))
        info = wait_job(alice, sid, answer.job, lambda j: j.state not in ("pending", "running"))
        assert info.state == "completed", info
        ids, groups, env = (work / "out.txt").read_text().splitlines()
        uid, gid = OWNER.pw_uid, OWNER.pw_gid
        assert ids == f"{uid} {uid} {gid} {gid}", "the job did not run as its owner"
        assert groups == str(sorted(os.getgrouplist("coorm_alice", gid)))
        assert env == f"{OWNER.pw_dir} coorm_alice"
        assert (work / "out.txt").stat().st_uid == uid  # created as hers

        other, _ = started(nobody, {"c2": 1})
        with pytest.raises(BridgeError) as refused:
            nobody.submit_job(other, job(daemon.folder / "n", "pass", cluster="c2"))
        assert refused.value.status == 409
        assert "nosuch_coorm_user has no account on this host" in refused.value.detail
        assert nobody.jobs(other) == []
