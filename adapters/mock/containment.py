"""Every process of a front-end job, found and ended together, whatever the job does.

A process group is not a boundary: a job's child that calls ``setsid()`` leaves it, and a job
that kills its supervisor leaves nobody to end it. So each job is contained as a batch system
contains one (Slurm's ``proctrack/cgroup``, with ``proctrack/linuxproc`` as its fallback):

- **A cgroup of its own** (cgroup v2, the kernel's grouping): the supervisor creates
  ``coorm-job-<key>`` (:func:`key`) beside itself in the unified hierarchy (found from
  ``/proc/self/mountinfo``, never assumed at a path; the supervisor's own cgroup from
  ``/proc/self/cgroup``), the job's process joins it before its command is executed, and every
  process it ever starts is in it, ``setsid`` or not, whatever user it runs as. The job ends
  with ``cgroup.kill`` (or SIGKILL to each member, on kernels before 5.14), and the cgroup is
  removed once empty. Its path is written in the job's folder (``cgroup``), where the daemon
  finds it to stop a job whose supervisor died.
- **The fallback, where no cgroup can be made** (no cgroup v2 mounted, mounted read-only, or a
  daemon not root whose cgroup was not delegated to it): the processes are found by scanning
  ``/proc``: those whose environment holds the job's marker (``COORM_JOB_TAG=<key>``, which
  the front end always sets and a job may not), and every descendant of those. Its limits, as
  ``linuxproc``'s: a process that executes a program with an environment cleared of the
  marker *and* leaves the job's process tree (a double fork) is not found; processes of
  another account are never touched (the environment of another user's process cannot be read
  but by root); and a scan is a moment's picture, so the kill is repeated until a scan finds
  nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
from pathlib import Path

#: The marker every process of a job carries in its environment (the fallback's only clue).
MARKER = "COORM_JOB_TAG"
#: The file of a job's folder that names its cgroup.
CGROUP_FILE = "cgroup"
#: How many rounds of killing a fallback's scan makes before giving up for now.
ROUNDS = 50


def key(folder: Path) -> str:
    """The name of the job kept in ``folder`` for the kernel and the marker: the folder's name
    (the job's id) and a digest of where its front end keeps its jobs, so that two front ends'
    jobs of one id (two daemons on a host, tests side by side) are never taken for each other."""
    digest = hashlib.sha256(os.fsencode(folder.parent.absolute())).hexdigest()[:12]
    return f"{folder.name}.{digest}"


def unified_mount(mountinfo: str | None = None) -> tuple[Path, str] | None:
    """Where the cgroup v2 hierarchy is mounted and which of its cgroups is mounted there
    (None: it is not), from ``/proc/self/mountinfo`` (or the text given): ``/sys/fs/cgroup`` on
    a pure v2 host, ``/sys/fs/cgroup/unified`` on a hybrid one, wherever a container put it."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        fields = before.split()
        if after.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return Path(fields[4].replace("\\040", " ")), fields[3]
    return None


def own_cgroup() -> Path | None:
    """This process's cgroup in the unified hierarchy, as a folder (None: none to be found,
    or one outside what is mounted here)."""
    mounted = unified_mount()
    if mounted is None:
        return None
    mount, root = mounted
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            path = line[3:]
            inside = os.path.relpath(path, root)
            if inside.startswith(".."):
                return None
            where = mount / inside
            return where if where.is_dir() else None
    return None


def create(job: str) -> Path | None:
    """A new, empty cgroup for ``job`` beside this process's (None: none can be made here, the
    fallback applies). One left by an earlier attempt is reused once emptied."""
    beside = own_cgroup()
    if beside is None:
        return None
    where = beside / f"coorm-job-{job}"
    try:
        where.mkdir()
    except FileExistsError:
        kill(where)
    except OSError:
        return None
    if not (where / "cgroup.procs").exists():
        return None
    return where


def join(cgroup: Path) -> None:
    """Move the calling process into ``cgroup`` (its children started after follow it)."""
    descriptor = os.open(cgroup / "cgroup.procs", os.O_WRONLY)
    try:
        os.write(descriptor, b"0")
    finally:
        os.close(descriptor)


def members(cgroup: Path) -> list[int]:
    """The processes in ``cgroup`` now (none when it is gone)."""
    try:
        return [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill(cgroup: Path) -> bool:
    """SIGKILL every process of ``cgroup``, ``setsid`` ones and their children included, and
    wait (briefly) for it to be empty; True once it is."""
    with contextlib.suppress(OSError):
        (cgroup / "cgroup.kill").write_text("1")
    for _ in range(ROUNDS):
        pids = members(cgroup)
        if not pids:
            return True
        for pid in pids:  # kernels without cgroup.kill, and processes forked meanwhile
            _signal(pid, signal.SIGKILL)
        time.sleep(0.02)
    return not members(cgroup)


def remove(cgroup: Path) -> None:
    """Remove ``cgroup`` once its processes are gone (it stays if any is left)."""
    if kill(cgroup):
        with contextlib.suppress(OSError):
            cgroup.rmdir()


def recorded(folder: Path) -> Path | None:
    """The cgroup a job's supervisor made for it (None: it made none, the fallback applies)."""
    try:
        text = (folder / CGROUP_FILE).read_text().strip()
    except OSError:
        return None
    return Path(text) if text else None


# -- the fallback: a scan of /proc -------------------------------------------------------------


def scan(job: str, uid: int | None) -> set[int]:
    """The processes of ``job`` (see the module docstring): marked, or descending from a marked
    one; only those of ``uid`` when given (a root daemon scanning for a job of another
    account)."""
    marker = f"{MARKER}={job}".encode()
    parents: dict[int, int] = {}
    roots: set[int] = set()
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        try:
            if uid is not None and entry.stat().st_uid != uid:
                continue
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] in ("Z", "X"):
                continue
            parents[pid] = int(fields[1])
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                roots.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    found = set(roots)
    grew = True
    while grew:  # descendants, whatever their environment
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def signal_all(job: str, uid: int | None, signum: int) -> int:
    """Send ``signum`` to every process a scan finds; returns how many there were."""
    pids = scan(job, uid)
    for pid in pids:
        _signal(pid, signum)
    return len(pids)


def kill_all(job: str, uid: int | None) -> bool:
    """SIGKILL the job's processes until a scan finds none (True) or the rounds run out."""
    for _ in range(ROUNDS):
        if not signal_all(job, uid, signal.SIGKILL):
            return True
        time.sleep(0.02)
    return not scan(job, uid)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)
