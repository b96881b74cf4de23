"""The handle on a running local OAR (tests/oar/oar-local.sh) that the ``oar`` fixture of
tests/oar/conftest.py yields, and its helpers: OAR commands run as the test users, the REST API,
the gantt, ``reset()`` between tests."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import pytest

SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])

# Job states (OAR 2.5): a job in one of these still holds or waits for resources.
ACTIVE_STATES = frozenset(
    {
        "Waiting",
        "Hold",
        "toLaunch",
        "toError",
        "toAckReservation",
        "Launching",
        "Running",
        "Suspended",
        "Resuming",
        "Finishing",
    }
)
FINAL_STATES = frozenset({"Terminated", "Error"})
JOB_ID = re.compile(r"^OAR_JOB_ID=(\d+)$", re.MULTILINE)


def open_mpi_session_dir(user: str) -> None:
    """Make Open MPI's per-user session directory before two ``mpirun`` of ``user`` start on
    this one machine at once (every emulated node is it): Open MPI 4.1 fails a concurrent mkdir
    of it ("mkdir /tmp/ompi.<host>.<uid>: File exists"). On a real site each part of a coupled
    run is on its own hosts."""
    session = Path("/tmp", f"ompi.{socket.gethostname()}.{pwd.getpwnam(user).pw_uid}")
    with contextlib.suppress(FileExistsError):
        session.mkdir(mode=0o700)
        shutil.chown(session, user, user)


def oar_date(moment: datetime) -> str:
    """A date-time as oarsub -r and oarstat --gantt take it (local time, to the second)."""
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def read_env(path: Path) -> dict[str, str]:
    """The variables that an env.sh (export NAME=VALUE lines) sets."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


@dataclass
class Submission:
    """What oarsub answered."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def job_id(self) -> int | None:
        found = JOB_ID.search(self.stdout)
        return int(found.group(1)) if found else None


@dataclass
class OarInstance:
    """A running throw-away OAR, as described by its env.sh."""

    base: Path  # BASE: database, configuration, logs, PID files, work directories
    env: dict[str, str]  # the variables of $BASE/env.sh
    api_url: str  # e.g. http://127.0.0.1:16668/oarapi
    users: list[str]  # unlimited advance reservations
    limited_users: list[str]  # admission rule 12: at most 2 waiting advance reservations
    clusters: list[str]
    nodes: dict[str, list[str]]  # cluster -> ["alpha-1", ..., "alpha-8"]
    cores: int  # resources (cores) per node
    log: Path  # OAR's log (LOG_LEVEL 3)
    pgport: int
    started_here: bool = True  # False with COORM_OAR_ENV: not ours to stop
    _lock: IO[str] | None = field(default=None, repr=False)

    @classmethod
    def from_env(
        cls, env_file: Path, *, started_here: bool = True, lock: IO[str] | None = None
    ) -> OarInstance:
        """The instance that an env.sh written by oar-local.sh up describes."""
        env = read_env(env_file)
        clusters = env["COORM_OAR_CLUSTERS"].split()
        return cls(
            base=Path(env["COORM_OAR_BASE"]),
            env=env,
            api_url=env["COORM_OAR_API_URL"],
            users=env["COORM_OAR_USERS"].split(),
            limited_users=env["COORM_OAR_LIMITED_USERS"].split(),
            clusters=clusters,
            nodes={c: env[f"COORM_OAR_NODES_{c}"].split() for c in clusters},
            cores=int(env["COORM_OAR_CORES"]),
            log=Path(env["COORM_OAR_LOG"]),
            pgport=int(env["COORM_OAR_PGPORT"]),
            started_here=started_here,
            _lock=lock,
        )

    def workdir(self, user: str) -> Path:
        """The user's directory under BASE: oarsub runs there and job outputs land there."""
        return self.base / "work" / user

    def run(
        self,
        *argv: str,
        user: str | None = None,
        check: bool = False,
        timeout: float = 60,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run an OAR command, as root or as ``user`` (runuser -u USER -- argv: no shell)."""
        command = list(argv) if user is None else ["runuser", "-u", user, "--", *argv]
        if cwd is None:
            cwd = self.workdir(user) if user is not None else self.base
        proc = subprocess.run(
            command,
            # oarsub takes the job's launching directory from $PWD, not from its working directory
            env={**os.environ, "PATH": SBIN_PATH, "PWD": str(cwd)},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=cwd,
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"{shlex.join(command)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}",
                pytrace=False,
            )
        return proc

    def oarsub(self, *args: str, user: str) -> Submission:
        """oarsub ARGS as ``user``; the caller checks the answer (refusals are answers too)."""
        proc = self.run("oarsub", *args, user=user)
        return Submission(["oarsub", *args], proc.returncode, proc.stdout, proc.stderr)

    def submit(self, *args: str, user: str) -> int:
        """oarsub ARGS as ``user``, which must be accepted: the job id."""
        sub = self.oarsub(*args, user=user)
        if sub.returncode != 0 or sub.job_id is None:
            pytest.fail(
                f"{shlex.join(sub.argv)} as {user}: exit {sub.returncode}\n"
                f"{sub.stdout}{sub.stderr}",
                pytrace=False,
            )
        assert sub.job_id is not None
        return sub.job_id

    def json(self, *argv: str, user: str | None = None) -> Any:
        """Run an OAR command that takes -J and parse its output."""
        out = self.run(*argv, "-J", user=user, check=True).stdout
        return json.loads(out) if out.strip() else {}

    def job(self, job_id: int) -> dict[str, Any]:
        """oarstat -f -J -j ID: the job's full description (with scheduledStart)."""
        jobs = self.json("oarstat", "-f", "-j", str(job_id))
        return dict(jobs[str(job_id)])

    def wait_job(
        self, job_id: int, states: set[str] | frozenset[str], timeout: float = 60
    ) -> dict[str, Any]:
        """Poll until the job is in one of ``states``."""
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            time.sleep(0.2)
        pytest.fail(f"job {job_id} not in {sorted(states)} after {timeout} s: {job}", pytrace=False)

    def wait_prediction(self, job_id: int, timeout: float = 30) -> int:
        """Poll until the meta-scheduler has given the waiting job a start: that start."""
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job.get("scheduledStart"):
                return int(job["scheduledStart"])
            time.sleep(0.1)
        pytest.fail(f"job {job_id} has no predicted start after {timeout} s: {job}", pytrace=False)

    def gantt(self, start: datetime, end: datetime) -> dict[str, Any]:
        """oarstat -J --gantt "START, END": jobs (running, predicted, reserved) and resources."""
        return dict(self.json("oarstat", "--gantt", f"{oar_date(start)}, {oar_date(end)}"))

    def resources(self) -> dict[str, dict[str, Any]]:
        """oarnodes -J: resource id (a string) -> its properties and state."""
        return dict(self.json("oarnodes"))

    def api(
        self,
        path: str,
        *,
        user: str | None = None,
        method: str = "GET",
        body: dict[str, Any] | None = None,
    ) -> tuple[int, Any]:
        """A REST API call (X-Remote-Ident: user): the HTTP status and the decoded JSON."""
        headers = {"Accept": "application/json"}
        if user is not None:
            headers["X-Remote-Ident"] = user
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            f"{self.api_url}/{path.lstrip('/')}", data=data, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw) if raw.strip() else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def set_state(self, host: str, state: str, timeout: float = 30) -> None:
        """oarnodesetting -s STATE -h HOST (Alive, Absent or Dead), then wait until Almighty has
        applied it (oarnodesetting only asks for it: the change is asynchronous)."""
        self.set_states({host: state}, timeout)

    def set_states(self, states: dict[str, str], timeout: float = 30) -> None:
        """Ask each host's new state first, then wait for them all: Almighty applies them in
        the same passes, so several cost about as much as one."""
        for host, state in states.items():
            self.run("oarnodesetting", "-s", state, "-h", host, check=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now: dict[str, set[str]] = {}
            for r in self.resources().values():  # each of a host's resources (its cores)
                now.setdefault(r["network_address"], set()).add(r["state"])
            if all(now.get(host) == {state} for host, state in states.items()):
                return
            time.sleep(0.1)
        pytest.fail(f"{states} not applied {timeout} s after oarnodesetting", pytrace=False)

    def active_jobs(self) -> dict[str, dict[str, Any]]:
        """oarstat -J: every job not terminated yet (all users)."""
        return {k: v for k, v in self.json("oarstat").items() if v["state"] in ACTIVE_STATES}

    def reset(self, timeout: float = 60) -> None:
        """Delete every job left (oardel as its owner), wait until none is active, and set
        every resource Alive again: each test starts from an idle platform."""
        deadline = time.monotonic() + timeout
        jobs = self.active_jobs()
        by_owner: dict[str, list[str]] = {}
        for job_id, job in jobs.items():
            by_owner.setdefault(job["owner"], []).append(job_id)
        for owner, ids in by_owner.items():
            self.run("oardel", *ids, user=owner)
        while jobs and time.monotonic() < deadline:
            time.sleep(0.2)
            jobs = self.active_jobs()
        if jobs:
            pytest.fail(
                f"jobs still active {timeout} s after oardel: "
                + ", ".join(f"{k} ({v['owner']}, {v['state']})" for k, v in jobs.items()),
                pytrace=False,
            )
        down = {r["network_address"] for r in self.resources().values() if r["state"] != "Alive"}
        if down:
            self.set_states(dict.fromkeys(sorted(down), "Alive"))
