"""Job containment on the mock's front end: every process a job starts ends with the job, the
escapes of issue 24 included (a ``setsid`` child, a job that kills its own supervisor), with a
cgroup of the job's own and with the fallback's scan; and a root front end runs each job as its
owner. Real processes, real cgroups where this host lets them be made; each test ends what it
started, by PID and by cgroup."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coorm_bridge.adapters.frontend import Launched, ProcessEnd, ProcessSpec
from coorm_bridge.adapters.mock import containment
from coorm_bridge.adapters.mock.frontend import ProcessFrontEnd, started_at
from coorm_bridge.core.batch import AdapterError
from tests import daemons

PY = sys.executable
#: For jobs run as another account (this one's virtual environment may be private).
SYSTEM_PY = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
#: A child that leaves the job's session and process group, notes its pid, and lingers.
ESCAPER = (
    "import os, time; os.setsid(); open('escaped.part', 'w').write(str(os.getpid()));"
    "os.replace('escaped.part', 'escaped'); time.sleep(600)"
)
#: Starts the escaper and waits for it to be away.
SPAWN = (
    "import os, subprocess, sys, time\n"
    f"subprocess.Popen([sys.executable, '-c', {ESCAPER!r}])\n"
    "while not os.path.exists('escaped'): time.sleep(0.02)\n"
)


def unused(*args: object) -> str:
    raise AssertionError("no batch system here")


@pytest.fixture(params=["cgroup", "scan"])
def front(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProcessFrontEnd]:
    """A front end with cgroups where this host allows them, or always with the fallback; what
    its jobs left is killed afterwards."""
    made = ProcessFrontEnd(
        tmp_path / "jobs", True, submit=unused, end=unused, grace=0.5,
        cgroups=request.param == "cgroup",
    )  # fmt: skip
    yield made
    daemons.end_jobs((tmp_path / "jobs").glob("*"))


def spec(work: Path, code: str, owner: str | None = None) -> ProcessSpec:
    work.mkdir(exist_ok=True)
    return ProcessSpec(
        argv=(PY if owner is None else SYSTEM_PY, "-c", code),
        environment={"PATH": os.environ["PATH"]},
        workdir=str(work),
        stdout=str(work / "out.txt"),
        stderr=str(work / "err.txt"),
        owner=owner,
    )


def wait_for(check, what: str, timeout: float = 30) -> None:
    """A failsafe only: each awaited thing comes at once or not at all."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def finished(front: ProcessFrontEnd, job: str, launched: Launched) -> ProcessEnd:
    outcome: list[ProcessEnd] = []
    wait_for(lambda: outcome.append(o) or True if (o := front.outcome(job, launched)) else False,
             f"job {job} still runs")  # fmt: skip
    return outcome[0]


def escaped(work: Path) -> int:
    wait_for((work / "escaped").exists, "the setsid child never started")
    return int((work / "escaped").read_text())


def gone(pid: int) -> bool:
    return started_at(pid) is None  # no such process, or a zombie


def contained_by(front: ProcessFrontEnd, job: str) -> str:
    cgroup = containment.recorded(front.folder / job)
    if not front.cgroups:
        assert cgroup is None
    return "scan" if cgroup is None else "cgroup"


def test_a_setsid_child_ends_when_its_job_exits(front, tmp_path):
    work = tmp_path / "work"
    started = front.launch("j1", spec(work, SPAWN + "sys.exit(0)"))
    outcome = finished(front, "j1", started)
    assert outcome.exit_code == 0
    child = escaped(work)
    assert gone(child), f"the setsid child outlived its job ({contained_by(front, 'j1')})"
    cgroup = containment.recorded(front.folder / "j1")
    assert cgroup is None or not cgroup.exists()  # removed with the job


def test_a_setsid_child_ends_when_its_job_is_stopped(front, tmp_path):
    work = tmp_path / "work"
    started = front.launch("j1", spec(work, SPAWN + "time.sleep(600)"))
    child = escaped(work)
    front.stop("j1", started)
    outcome = finished(front, "j1", started)
    assert outcome.signal == signal.SIGTERM
    assert gone(child), f"the setsid child outlived its job ({contained_by(front, 'j1')})"


def test_a_command_that_cannot_run_leaves_no_cgroup_behind(front, tmp_path):
    job = spec(tmp_path / "work", "").model_copy(update={"argv": ("/no/such/command",)})
    started = front.launch("j1", job)
    assert finished(front, "j1", started).reason == "/no/such/command: No such file or directory"
    cgroup = containment.recorded(front.folder / "j1")
    assert cgroup is None or not cgroup.exists()


PURE = "35 24 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate"
HYBRID = (
    "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw"
)
V1 = "30 25 0:26 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids"
#: A container given its own part of the host's hierarchy, without a cgroup namespace.
PART = "50 40 0:38 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw"


@pytest.mark.parametrize(
    ("mountinfo", "found"),
    [
        (PURE, (Path("/sys/fs/cgroup"), "/")),
        (HYBRID, (Path("/sys/fs/cgroup/unified"), "/")),
        (V1, None),
        (PART, (Path("/sys/fs/cgroup"), "/docker/abc")),
    ],
)
def test_the_unified_hierarchy_is_found_where_it_is_mounted(mountinfo, found):
    assert containment.unified_mount(mountinfo) == found


def test_a_job_that_kills_its_supervisor_still_runs_and_is_stopped_with_its_children(
    front, tmp_path
):
    work = tmp_path / "work"
    code = SPAWN + (
        "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "os.kill(os.getppid(), signal.SIGKILL); open('pid.new', 'w').write(str(os.getpid()))\n"
        "os.rename('pid.new', 'pid')\n"  # whole when it appears
        "time.sleep(600)\n"
    )
    started = front.launch("j1", spec(work, code))
    child = escaped(work)
    wait_for((work / "pid").exists, "the job never killed its supervisor")
    job = int((work / "pid").read_text())
    wait_for(lambda: gone(started.pid), "the supervisor outlived its SIGKILL")
    # Its processes run: so does the job, whatever became of its supervisor.
    assert front.outcome("j1", started) is None
    assert front.outcome("j1", started) is None
    front.stop("j1", started)  # SIGTERM: the job ignores it, its child does not
    wait_for(lambda: gone(child), "the setsid child outlived the stop")
    assert front.outcome("j1", started) is None
    assert not gone(job)
    front.stop("j1", started, force=True)
    outcome = finished(front, "j1", started)
    assert gone(job)
    assert outcome.exit_code is None
    assert "its supervisor was killed by signal 9 while the job ran" in (outcome.reason or "")
    # A daemon restarted meanwhile says the same.
    again = ProcessFrontEnd(front.folder, True, submit=unused, end=unused)
    assert again.outcome("j1", started) == outcome


def test_a_restarted_daemon_finds_a_job_whose_supervisor_died_still_running(front, tmp_path):
    work = tmp_path / "work"
    code = SPAWN + "os.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(600)\n"
    started = front.launch("j1", spec(work, "import signal\n" + code))
    child = escaped(work)
    wait_for(lambda: gone(started.pid), "the supervisor outlived its SIGKILL")
    again = ProcessFrontEnd(front.folder, True, submit=unused, end=unused, grace=0.5)
    assert again.outcome("j1", started) is None
    # One that died before it could record the launch finds the job too: it is not lost.
    found = again.recover("j1")
    assert found is not None
    assert again.outcome("j1", found) is None
    again.stop("j1", started, force=True)
    outcome = finished(again, "j1", started)
    assert gone(child)
    assert "no exit status" not in (outcome.reason or "")
    assert "its supervisor died while the job ran" in (outcome.reason or "")


# -- a root front end runs each job as its owner ------------------------------------------------


def _account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


ALICE = _account("coorm_alice")
as_root = pytest.mark.skipif(
    os.geteuid() != 0 or ALICE is None, reason="needs root and the account coorm_alice"
)


@pytest.fixture
def alices() -> Iterator[Path]:
    """A folder of coorm_alice's that she can reach (the tests' own are root's, mode 700)."""
    assert ALICE is not None
    where = Path(tempfile.mkdtemp(prefix="coorm-alice-", dir="/tmp"))
    os.chown(where, ALICE.pw_uid, ALICE.pw_gid)
    yield where
    shutil.rmtree(where, ignore_errors=True)


@as_root
def test_a_root_front_end_runs_a_job_as_its_owner_never_as_root(front, alices):
    assert ALICE is not None
    code = (
        "import os; print(os.getuid(), os.geteuid(), os.getgid(), sorted(os.getgroups()));"
        "print(*(os.environ.get(k) for k in ('HOME', 'USER', 'LOGNAME', 'SHELL')));"
        "print(os.getcwd())"
    )
    work = alices / "run"
    work.mkdir()
    os.chown(work, ALICE.pw_uid, ALICE.pw_gid)
    started = front.launch("j1", spec(work, code, owner="coorm_alice"))
    assert finished(front, "j1", started).exit_code == 0, (work / "err.txt").read_text()
    ids, env, cwd = (work / "out.txt").read_text().splitlines()
    groups = sorted(os.getgrouplist("coorm_alice", ALICE.pw_gid))
    uid, gid = ALICE.pw_uid, ALICE.pw_gid
    assert ids == f"{uid} {uid} {gid} {groups}"
    assert env == f"{ALICE.pw_dir} coorm_alice coorm_alice {ALICE.pw_shell or '/bin/sh'}"
    assert cwd == str(work)
    for name in ("out.txt", "err.txt"):  # created as hers
        assert ((work / name).stat().st_uid, (work / name).stat().st_gid) == (uid, gid)
    assert grp.getgrgid(gid).gr_name  # her group exists: the ids above are hers, not root's


@as_root
def test_a_root_front_end_opens_the_files_with_the_owners_rights(front, alices):
    rootish = alices / "roots"
    rootish.mkdir(mode=0o755)  # root's: she may enter it, not write in it
    started = front.launch("j1", spec(rootish, "print('x')", owner="coorm_alice"))
    outcome = finished(front, "j1", started)
    assert outcome.exit_code is None
    assert outcome.reason == f"{rootish / 'out.txt'}: Permission denied"
    assert not (rootish / "out.txt").exists()


@as_root
def test_a_root_front_end_refuses_an_owner_without_an_account(tmp_path):
    front = ProcessFrontEnd(tmp_path, True, submit=unused, end=unused)
    said = front.refusal("nosuch_coorm_user") or ""
    assert "nosuch_coorm_user has no account on this host" in said
    assert "runs each job as its session's owner" in said
    assert front.refusal("coorm_alice") is None
    with pytest.raises(AdapterError, match="has no account on this host"):
        front.launch("j1", spec(tmp_path / "w", "pass", owner="nosuch_coorm_user"))
    assert not (tmp_path / "j1").exists()
