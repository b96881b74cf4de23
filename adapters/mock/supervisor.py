"""``python -P -m coorm_bridge.adapters.mock.supervisor FOLDER``: one front-end job's process.

The daemon does not start a job's command itself but this small process, which starts it and
stays its parent, for two reasons. A job outlives the daemon, as a batch system's job outlives
its client: after a ``kill -9`` and a restart the daemon cannot wait for a process it did not
start, so the supervisor writes the exit status where the new daemon reads it (``status.json``,
atomically). And stopping a job is a sequence (SIGTERM to all its processes, SIGKILL after a
grace), which the supervisor carries out even while no daemon runs.

``FOLDER/spec.json`` says what to run (a :class:`~coorm_bridge.adapters.frontend.ProcessSpec`,
the grace, and whether to use a cgroup). The command runs contained (:mod:`.containment`): in
a cgroup of its own, made here and joined by the command's process before it executes its
program, or, where none can be made, found by its marker; every process it starts ends with
it, ``setsid`` ones included. It runs in a process group of its own, with no shell, in its
working folder, its output to the files named (created or truncated). A supervisor running as
root runs it as the session's owner (``user``), as slurmd does: the output files are created,
and the working folder entered, with the owner's rights, then the process takes the owner's
groups, gid and uid before it executes the command; it never runs as root for another user.

The supervisor ignores SIGINT and SIGHUP (a terminal closing must not end a job); SIGTERM stops
the job: SIGTERM to all its processes, then SIGKILL after the grace. When the command ends,
whatever it left is killed and its cgroup removed, as a batch system ends a job's processes
with it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from coorm_bridge.adapters.mock import containment

#: How often the supervisor looks at its command and its stop flag, in seconds.
TICK = 0.1


class _Stop:
    """Set by SIGTERM: the handler only records it, the loop acts on it."""

    asked = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.asked = True


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A Python handler rather than SIG_IGN: handlers are reset at exec, SIG_IGN would be
    inherited by the command."""


def write_status(folder: Path, status: dict[str, object]) -> None:
    """Write ``status.json`` atomically and durably: the daemon reads it whole or not at all."""
    partial = folder / "status.json.part"
    with partial.open("w") as out:
        json.dump(status, out)
        out.flush()
        os.fsync(out.fileno())
    partial.replace(folder / "status.json")


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(group, signum)


def _open_output(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)


class Owner:
    """The account a root supervisor runs the command as: the session's owner."""

    def __init__(self, name: str) -> None:
        entry = pwd.getpwnam(name)  # KeyError: no such account on this host
        self.uid, self.gid = entry.pw_uid, entry.pw_gid
        self.groups = os.getgrouplist(name, entry.pw_gid)

    @contextlib.contextmanager
    def acting(self) -> Iterator[None]:
        """The supervisor's effective ids are the owner's for a moment (it is single-threaded):
        what it opens is opened with the owner's rights, and created as theirs."""
        saved = os.getgroups(), os.getegid()
        os.setgroups(self.groups)
        os.setegid(self.gid)
        os.seteuid(self.uid)
        try:
            yield
        finally:
            os.seteuid(0)
            os.setegid(saved[1])
            os.setgroups(saved[0])

    def become(self) -> None:
        """For good, in the command's process: groups, then gid, then uid (after which root's
        rights are gone and cannot be taken back)."""
        os.setgroups(self.groups)
        os.setgid(self.gid)
        os.setuid(self.uid)


def _prepare(cgroup: Path | None, owner: Owner | None, workdir: str) -> Callable[[], None] | None:
    """What the command's process does between fork and exec: join the job's cgroup (while
    it may), then become the owner and enter the working folder as them."""
    if cgroup is None and owner is None:
        return None

    def prepare() -> None:
        if cgroup is not None:
            containment.join(cgroup)
        if owner is not None:
            owner.become()
            os.chdir(workdir)

    return prepare


class Job:
    """The job's processes, however they are contained: its cgroup, or the fallback's scan."""

    def __init__(self, name: str, uid: int, cgroup: Path | None) -> None:
        self.name, self.uid, self.cgroup = name, uid, cgroup

    def signal(self, group: int, signum: int) -> None:
        _signal_group(group, signum)
        if self.cgroup is not None:
            for pid in containment.members(self.cgroup):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)
        else:
            containment.signal_all(self.name, self.uid, signum)

    def end(self, group: int) -> None:
        """Whatever the command left goes with it; its cgroup is removed."""
        _signal_group(group, signal.SIGKILL)
        if self.cgroup is not None:
            containment.remove(self.cgroup)
        else:
            containment.kill_all(self.name, self.uid)


def _start(
    folder: Path, spec: dict[str, Any], owner: Owner | None
) -> tuple[Job, subprocess.Popen[bytes]]:
    """Start the command, contained; returns the job and its process. Raises OSError
    with what the owner lacks (a folder, a file) or what could not run."""
    argv = [str(arg) for arg in spec["argv"]]
    workdir = str(spec["workdir"])
    name = containment.key(folder)
    cgroup = containment.create(name) if spec.get("cgroup", True) else None
    (folder / containment.CGROUP_FILE).write_text(str(cgroup or ""))
    job = Job(name, owner.uid if owner is not None else os.geteuid(), cgroup)
    try:
        return job, _spawn(argv, workdir, spec, owner, cgroup)
    except BaseException:
        if cgroup is not None:  # nothing runs in it, or what does goes
            containment.remove(cgroup)
        raise


def _spawn(
    argv: list[str], workdir: str, spec: dict[str, Any], owner: Owner | None, cgroup: Path | None
) -> subprocess.Popen[bytes]:
    with owner.acting() if owner is not None else contextlib.nullcontext():
        if owner is not None and not os.access(workdir, os.X_OK, effective_ids=True):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), workdir)
        out = _open_output(str(spec["stdout"]))
        err = out if spec["stderr"] == spec["stdout"] else _open_output(str(spec["stderr"]))
    try:
        child = subprocess.Popen(  # noqa: S603 - an argument vector, no shell
            argv,
            cwd=None if owner is not None else workdir,
            env=spec["environment"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            close_fds=True,
            process_group=0,
            preexec_fn=_prepare(cgroup, owner, workdir),  # noqa: PLW1509 - single-threaded
        )
    finally:
        os.close(out)
        if err != out:
            os.close(err)
    return child


def supervise(folder: Path) -> dict[str, object]:
    """Run the command of ``folder/spec.json`` to its end; returns the status to write."""
    spec = json.loads((folder / "spec.json").read_text())
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, _ignore)
    signal.signal(signal.SIGHUP, _ignore)
    user = spec.get("user")
    try:
        owner = Owner(user) if user is not None else None
    except KeyError:
        return {"exit_code": None, "signal": None, "reason": f"{user} has no account on this host"}
    try:
        job, child = _start(folder, spec, owner)
    except OSError as error:
        where = error.filename or spec["argv"][0]
        return {"exit_code": None, "signal": None, "reason": f"{where}: {error.strerror}"}
    pid = child.pid
    (folder / "job.pid").write_text(str(pid))
    grace = float(spec["grace"])
    killed_at: float | None = None
    stopping = False
    while child.poll() is None:
        if stop.asked and not stopping:
            stopping = True
            job.signal(pid, signal.SIGTERM)
            killed_at = time.monotonic() + grace
        if killed_at is not None and time.monotonic() >= killed_at:
            job.signal(pid, signal.SIGKILL)
            killed_at = None
        time.sleep(TICK)
    job.end(pid)  # what the command left behind goes with it
    code = child.returncode
    reason = "stopped (SIGTERM, then SIGKILL after the grace)" if stopping else None
    if code < 0:
        return {"exit_code": None, "signal": -code, "reason": reason}
    return {"exit_code": code, "signal": None, "reason": reason}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -P -m coorm_bridge.adapters.mock.supervisor FOLDER", file=sys.stderr)
        return 2
    folder = Path(args[0])
    # First thing: a daemon that crashed before it recorded this pid finds it here.
    (folder / "supervisor.pid").write_text(str(os.getpid()))
    try:
        status = supervise(folder)
    except Exception as error:  # a broken spec: say so where the daemon looks
        status = {"exit_code": None, "signal": None, "reason": f"supervisor failed: {error}"}
    write_status(folder, status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
