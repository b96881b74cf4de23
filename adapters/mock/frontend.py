"""The mock platform's front end: jobs run as processes of the daemon's account on this host.

The simulated batch system has no commands a launcher could submit with, so the bridge takes the
jobs (:mod:`coorm_bridge.service.jobs`) and this module runs them, each under a supervisor
process (:mod:`.supervisor`) that outlives the daemon, in a folder of its own under the state
folder (``jobs/<job>/``: ``spec.json``, ``supervisor.pid``, ``job.pid``, ``status.json``,
``supervisor.log``).

A daemon not root runs processes as its own account, whoever owns the session: the mock is for a
user's own machine, tests and demos. So by default (``run_jobs`` unset) only the daemon's own
user gets jobs run; as root, only when the daemon is private (its default socket, mode 600, no
TCP: root alone can ask), never when others can reach it. ``[adapter] run_jobs = true`` runs
everyone's, ``false`` nobody's. A daemon running as root runs each job as the session's owner
(uid, gid, groups, and ``HOME``, ``USER``, ``LOGNAME``, ``SHELL`` from the owner's account, as
slurmd does), never as root for another user, and refuses an owner with no account here.

Every process of a job ends with it (:mod:`.containment`: a cgroup of its own, or a scan for
its marker). A supervisor that dies (killed by its own job, say) leaves the job's processes
behind: they are still the job, which is ``running`` until they are gone, stopped by the
daemon itself at the job's end at the latest, and then reported as what happened.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from coorm_bridge.adapters.frontend import FrontEnd, Launched, ProcessEnd, ProcessSpec
from coorm_bridge.adapters.mock import containment
from coorm_bridge.batchsim import RUNTIME_KEY
from coorm_bridge.core.batch import AdapterError, JobSpec, JobState
from coorm_bridge.core.model import MAX_DURATION

#: Seconds between a stop's SIGTERM and its SIGKILL.
GRACE = 5.0
#: What a user refused can do at once: a daemon of their own runs their jobs, root's included.
OWN_DAEMON = (
    "run your own daemon (`coorm-bridge serve` with no configuration) or "
    "`coorm-launch --start-daemon APP.toml`"
)
SUPERVISOR = "coorm_bridge.adapters.mock.supervisor"
#: The start time recorded for a supervisor found dead (no process started at tick 0 after it).
GONE = 0
#: The note of a job whose supervisor died while it ran (its reason, once its processes end).
ORPHANED = "orphaned"

log = logging.getLogger(__name__)


def account() -> str:
    """The daemon's account name (``uid1234`` when the user database has none)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def started_at(pid: int) -> int | None:
    """When the kernel started ``pid``, in clock ticks since boot (None: no such process, a
    zombie, or no /proc to tell): with the pid, it names one running process for good."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: count after the last ')'
        fields = text[text.rindex(")") + 2 :].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (ValueError, IndexError):
        return None


class ProcessFrontEnd(FrontEnd):
    """Runs jobs under supervisors in ``folder``. ``submit`` and ``end`` are the simulated
    batch system's (:meth:`.MockAdapter.submit`, :meth:`.MockAdapter.end_job`)."""

    def __init__(
        self,
        folder: Path,
        run_jobs: bool | None,
        *,
        submit: Callable[[str, JobSpec], str],
        end: Callable[[str, str, JobState], None],
        grace: float = GRACE,
        private: bool = False,
        cgroups: bool = True,
    ) -> None:
        self.folder = folder
        self.cgroups = cgroups
        """Whether jobs get a cgroup where one can be made (False: the fallback, always)."""
        self.run_jobs = run_jobs
        self.private = private
        """Only the daemon's own user can reach it (see the module docstring)."""
        self.grace = grace
        self._submit = submit
        self._end = end
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        """Supervisors this daemon started: polled, so that none is left a zombie."""
        self._lock = threading.Lock()

    def refusal(self, owner: str) -> str | None:
        """Why not, and what to do instead: a launcher shows it as it is."""
        if self.run_jobs is False:
            return (
                f"this simulated platform runs no jobs ([adapter] run_jobs = false): {OWN_DAEMON}"
            )
        me = account()
        if self.run_jobs:
            return _no_account(owner) if os.geteuid() == 0 and owner != me else None
        root = os.geteuid() == 0
        if owner != me:
            then = "each then runs as its owner" if root else f"everyone's jobs then run as {me}"
            return (
                f"the mock platform runs jobs as the daemon's account, {me}, so this daemon "
                f"runs {me}'s only, not {owner}'s: {OWN_DAEMON}; or its admin sets [adapter] "
                f"run_jobs = true ({then})"
            )
        if root and not self.private:
            return (
                "this daemon runs as root and others can reach it (a configured socket, TCP), "
                f"so it runs no jobs unless told: {OWN_DAEMON}; or set [adapter] run_jobs = "
                "true in its configuration (each job then runs as its owner, root's as root)"
            )
        return None

    def submit(self, cluster: str, job: JobSpec) -> str:
        """Into the simulation with a run time past its walltime: the simulated job runs until
        its process ends (:meth:`ended`), and reaching its limit is a failure, as for a job a
        batch system kills."""
        runtime = min(job.walltime + 1, MAX_DURATION)
        simulated = job.model_copy(update={"environment": {RUNTIME_KEY: str(runtime)}})
        return self._submit(cluster, simulated)

    def launch(self, job: str, spec: ProcessSpec) -> Launched:
        where = self.folder / job
        user = spec.owner if os.geteuid() == 0 and spec.owner not in (None, account()) else None
        environment = {**spec.environment, containment.MARKER: containment.key(where)}
        if user is not None:
            try:
                entry = pwd.getpwnam(user)
            except KeyError:
                raise AdapterError(f"job {job}: {_no_account(user)}") from None
            environment |= {
                "HOME": entry.pw_dir,
                "USER": user,
                "LOGNAME": user,
                "SHELL": entry.pw_shell or "/bin/sh",
            }
        told = spec.model_dump(mode="json") | {"environment": environment, "user": user}
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            where.mkdir(mode=0o700)  # never twice: a job's folder is made once
            text = json.dumps(told | {"grace": self.grace, "cgroup": self.cgroups})
            (where / "spec.json").write_text(text)
            with (where / "supervisor.log").open("wb") as log:
                child = subprocess.Popen(  # noqa: S603 - an argument vector, no shell
                    [sys.executable, "-P", "-m", SUPERVISOR, str(where)],
                    cwd=where,  # never a source tree that would shadow the installed package
                    env={k: v for k, v in os.environ.items() if k != containment.MARKER},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
        except OSError as error:
            raise AdapterError(f"job {job}: cannot start its process: {error}") from error
        with self._lock:
            self._children[job] = child
        # The supervisor writes it too, first thing; written here as well, it is there for
        # :meth:`recover` however soon a crash comes.
        with contextlib.suppress(OSError):
            (where / "supervisor.pid").write_text(str(child.pid))
        return Launched(pid=child.pid, since=started_at(child.pid))

    def recover(self, job: str) -> Launched | None:
        """From the pid the supervisor wrote first thing; a status means it ran and ended."""
        where = self.folder / job
        try:
            pid = int((where / "supervisor.pid").read_text())
        except (OSError, ValueError):
            return None  # never started, or died before it could say so
        since = started_at(pid)
        if since is None and not (where / "status.json").exists():
            if self._left(job):  # its supervisor died, the job did not: watched from here
                return Launched(pid=pid, since=GONE)
            return None
        return Launched(pid=pid, since=since)

    def outcome(self, job: str, launched: Launched) -> ProcessEnd | None:
        with self._lock:
            child = self._children.get(job)
            if child is not None:
                code = child.poll()
                if code is None:
                    return None
                del self._children[job]
        if child is None and self._alive(launched):
            return None  # started by an earlier daemon: watched by its pid
        code = child.returncode if child is not None else None
        if self._written(job) is None and self._left(job):
            self._orphaned(job, code)
            return None  # its supervisor died, not the job: it runs, watched from here
        return self._status(job, code)

    def stop(self, job: str, launched: Launched, *, force: bool = False) -> None:
        """The supervisor stops the job; one whose supervisor died is stopped from here."""
        if not self._alive(launched):
            if self._written(job) is None:
                self._signal_job(job, signal.SIGKILL if force else signal.SIGTERM)
            return
        if not force:
            _signal(launched.pid, signal.SIGTERM)
            return
        self._signal_job(job, signal.SIGKILL)
        _signal(-launched.pid, signal.SIGKILL)

    def ended(self, cluster: str, batch_job: str, outcome: ProcessEnd) -> None:
        state = JobState.COMPLETED if outcome.succeeded else JobState.FAILED
        self._end(cluster, batch_job, state)

    # -- internals ----------------------------------------------------------------------------

    def _alive(self, launched: Launched) -> bool:
        """Whether the supervisor still runs (a pid given to another process since is not)."""
        with self._lock:
            for child in self._children.values():
                if child.pid == launched.pid:
                    return child.poll() is None
        if launched.since is None:
            try:
                os.kill(launched.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return False  # another user's process: ours would be the daemon's account's
            return True
        return started_at(launched.pid) == launched.since

    def _written(self, job: str) -> ProcessEnd | None:
        """The status the supervisor wrote at the job's end (None: it wrote none)."""
        try:
            return ProcessEnd.model_validate_json((self.folder / job / "status.json").read_text())
        except (OSError, ValueError):
            return None

    def _status(self, job: str, code: int | None) -> ProcessEnd:
        """What the supervisor wrote; when it wrote nothing, why that is. Either way, nothing
        of the job is left behind (its cgroup is removed)."""
        cgroup = containment.recorded(self.folder / job)
        if cgroup is not None:
            containment.remove(cgroup)
        written = self._written(job)
        if written is not None:
            return written
        if (self.folder / job / ORPHANED).exists():
            why = (self.folder / job / ORPHANED).read_text()
        elif code is not None and code < 0:
            why = f"its supervisor was killed by signal {-code} before the job's status was known"
        else:
            why = "its process was gone, with no exit status (the machine restarted?)"
        return ProcessEnd(reason=why)

    def _left(self, job: str) -> bool:
        """Whether any process of the job still runs (its cgroup's, or found by the scan)."""
        cgroup = containment.recorded(self.folder / job)
        if cgroup is not None:
            return bool(containment.members(cgroup))
        return bool(containment.scan(containment.key(self.folder / job), self._uid(job)))

    def _orphaned(self, job: str, code: int | None) -> None:
        """Noted once, for the job's reason when its processes are gone."""
        note = self.folder / job / ORPHANED
        if note.exists():
            return
        how = f"was killed by signal {-code}" if code is not None and code < 0 else "died"
        with contextlib.suppress(OSError):
            note.write_text(
                f"its supervisor {how} while the job ran, so its exit status is not known; its "
                "processes were watched by the daemon until they ended or were stopped"
            )
        log.warning("job %s: its supervisor %s; its processes are watched from here", job, how)

    def _signal_job(self, job: str, signum: int) -> None:
        """Every process of the job (not its supervisor's)."""
        cgroup = containment.recorded(self.folder / job)
        if cgroup is not None:
            if signum == signal.SIGKILL:
                containment.kill(cgroup)
            for pid in containment.members(cgroup):
                _signal(pid, signum)
        else:
            containment.signal_all(containment.key(self.folder / job), self._uid(job), signum)
        group = self._job_group(job)
        if group is not None:
            _signal(-group, signum)

    def _uid(self, job: str) -> int:
        """The account the job runs as: its owner's, when a root daemon switched to it."""
        try:
            user = json.loads((self.folder / job / "spec.json").read_text()).get("user")
            return os.geteuid() if user is None else pwd.getpwnam(user).pw_uid
        except (OSError, ValueError, KeyError):
            return os.geteuid()

    def _job_group(self, job: str) -> int | None:
        try:
            return int((self.folder / job / "job.pid").read_text())
        except (OSError, ValueError):
            return None


def _no_account(owner: str) -> str | None:
    """Why a root daemon cannot run ``owner``'s jobs (None: it can, as that account)."""
    try:
        pwd.getpwnam(owner)
    except KeyError:
        return (
            f"this daemon runs as root and runs each job as its session's owner, but {owner} "
            f"has no account on this host: {OWN_DAEMON}"
        )
    return None


def _signal(target: int, signum: int) -> None:
    """``os.kill`` a pid (or, negative, a process group) that may be gone."""
    try:
        if target < 0:
            os.killpg(-target, signum)
        else:
            os.kill(target, signum)
    except (ProcessLookupError, PermissionError):
        pass
