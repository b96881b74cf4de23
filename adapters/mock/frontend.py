"""The mock platform's front end: jobs run as processes of the daemon's account on this host.

The simulated batch system has no commands a launcher could submit with, so the bridge takes the
jobs (:mod:`coorm_bridge.service.jobs`) and this module runs them, each under a supervisor
process (:mod:`.supervisor`) that outlives the daemon, in a folder of its own under the state
folder (``jobs/<job>/``: ``spec.json``, ``supervisor.pid``, ``job.pid``, ``status.json``,
``supervisor.log``).

Processes run as the daemon's account, whoever owns the session: the mock is for a user's own
machine, tests and demos. So by default (``run_jobs`` unset) only the daemon's own user gets jobs
run; as root, only when the daemon is private (its default socket, mode 600, no TCP: root alone
can ask, so root's jobs running as root grant nothing new), never when others can reach it (a
shared socket, TCP: whoever holds a token mapped to root would run code as root). ``[adapter]
run_jobs = true`` runs everyone's, even as root (a site that wants it says so), ``false``
nobody's.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from coorm_bridge.adapters.frontend import FrontEnd, Launched, ProcessEnd, ProcessSpec
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
    ) -> None:
        self.folder = folder
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
        if self.run_jobs:
            return None
        me = account()
        if owner != me:
            return (
                f"the mock platform runs jobs as the daemon's account, {me}, so this daemon "
                f"runs {me}'s only, not {owner}'s: {OWN_DAEMON}; or its admin sets [adapter] "
                f"run_jobs = true (everyone's jobs then run as {me})"
            )
        if os.geteuid() == 0 and not self.private:
            return (
                "this daemon runs as root and others can reach it (a configured socket, TCP), "
                f"so it runs no jobs (they would run as root): {OWN_DAEMON}; or set [adapter] "
                "run_jobs = true in its configuration, if everyone's jobs may run as root"
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
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            where.mkdir(mode=0o700)  # never twice: a job's folder is made once
            text = json.dumps({**spec.model_dump(mode="json"), "grace": self.grace})
            (where / "spec.json").write_text(text)
            with (where / "supervisor.log").open("wb") as log:
                child = subprocess.Popen(  # noqa: S603 - an argument vector, no shell
                    [sys.executable, "-P", "-m", SUPERVISOR, str(where)],
                    cwd=where,  # never a source tree that would shadow the installed package
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
        return self._status(job, child.returncode if child is not None else None)

    def stop(self, job: str, launched: Launched, *, force: bool = False) -> None:
        if not self._alive(launched):
            return
        if not force:
            _signal(launched.pid, signal.SIGTERM)
            return
        group = self._job_group(job)
        if group is not None:
            _signal(-group, signal.SIGKILL)
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

    def _status(self, job: str, code: int | None) -> ProcessEnd:
        """What the supervisor wrote; when it wrote nothing, why that is."""
        try:
            return ProcessEnd.model_validate_json((self.folder / job / "status.json").read_text())
        except (OSError, ValueError):
            pass
        if code is not None and code < 0:
            why = f"its supervisor was killed by signal {-code} before the job's status was known"
        else:
            why = "its process was gone, with no exit status (the machine restarted?)"
        return ProcessEnd(reason=why)

    def _job_group(self, job: str) -> int | None:
        try:
            return int((self.folder / job / "job.pid").read_text())
        except (OSError, ValueError):
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
