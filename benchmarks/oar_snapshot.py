"""OAR snapshots of a 2,000-job queue, end to end on a real OAR 2.5.9, and what placeholders cost.

Needs root and OAR 2.5.9 from Debian (``tests/oar/oar-local.sh install``). It starts a
throw-away OAR with ``tests/oar/oar-local.sh up`` (clusters alpha and beta of 8 two-core hosts),
or uses a running one with ``--env /path/to/env.sh`` (its jobs are then deleted). It fills it
with ``--jobs`` jobs as job arrays of the test users (``oarsub --array``: one command for many
jobs): one-core jobs running on every core, the rest waiting, of mixed sizes and walltimes.
Then, once OAR's scheduler has planned what it plans (Debian's defaults: 30 waiting jobs per
user and pass), it prints:

- ``oar_snapshot jobs=N clusters=2 backend=cli seconds=S placed=P``: the median of ``--runs``
  ``OarAdapter.snapshot()`` through the commands (one ``oarstat -J --gantt``), parsing included,
  and how many jobs it placed (running, or waiting with OAR's prediction: the Gantt holds no
  others, and Debian's OAR plans 30 waiting jobs per user and pass);
- the same for ``backend=rest`` (``/resources/details`` and the Gantt's two read-only queries
  through ``/select_all``), and ``backend=rest-details`` (``/jobs/details`` over the Gantt's
  window, where a site refuses ``/select_all``);
- ``oar_placeholder create=S move_first=S move_gap=S delete=S``, first, on the idle platform: a
  placeholder created, moved where OAR can hold both (new one first), moved onto its own hosts
  (old one first: the seconds without a reservation), deleted.

The OAR it started is stopped with ``down`` at the end, even on failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from coorm_bridge.adapters.oar.adapter import OarAdapter
from coorm_bridge.adapters.oar.plugin import make_oar_adapter
from coorm_bridge.adapters.oar.settings import OarSettings
from coorm_bridge.core.batch import JobState, ReservationSpec

SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "oar" / "oar-local.sh"
PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
BASH = shutil.which("bash") or "/bin/bash"
RUNUSER = shutil.which("runuser", path=PATH) or "/usr/sbin/runuser"
#: Where the test users' commands run (oarsub takes a job's launching directory from it).
WORKDIR = "/tmp"  # noqa: S108 - nothing is written there


def say(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def read_env(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line.removeprefix("export ").split("=", 1)
            env[key] = value.strip('"')
    return env


@contextmanager
def lab(env_file: str | None) -> Iterator[dict[str, str]]:
    if env_file is not None:
        yield read_env(Path(env_file))
        return
    started = subprocess.run(  # noqa: S603 - our own script, an argument vector
        [BASH, str(SCRIPT), "up"],
        check=False,
        text=True,
        capture_output=True,
        env={**os.environ, "PATH": PATH},
    )
    if started.returncode != 0:
        raise SystemExit(f"oar-local.sh up failed ({started.returncode}):\n{started.stderr}")
    try:
        where = subprocess.run(  # noqa: S603 - our own script
            [BASH, str(SCRIPT), "env"], check=True, text=True, capture_output=True
        ).stdout.strip()
        yield read_env(Path(where))
    finally:
        subprocess.run(  # noqa: S603 - our own script
            [BASH, str(SCRIPT), "down"], check=False, capture_output=True
        )


def as_user(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - OAR's commands, argument vectors
        [RUNUSER, "-u", user, "--", *argv],
        check=False,
        text=True,
        capture_output=True,
        cwd=WORKDIR,
        env={**os.environ, "PWD": WORKDIR},
    )


def live_jobs(user: str) -> list[str]:
    """The ids of ``user``'s jobs OAR still lists (``oarstat`` lists unfinished jobs only)."""
    listed = as_user(user, "oarstat", "-u", user, "--format", "2")
    return [line.split()[0] for line in listed.stdout.splitlines()
            if line and line.split()[0].isdigit()]  # fmt: skip


def clear(users: Sequence[str], timeout: float = 300) -> None:
    """Delete every job of ``users`` and wait until OAR lists none (``oardel`` only registers a
    deletion: the jobs go at Almighty's next passes)."""
    deadline = time.monotonic() + timeout
    for user in users:
        ids = live_jobs(user)
        for first in range(0, len(ids), 500):
            as_user(user, "oardel", *ids[first : first + 500])
    left = {user: live_jobs(user) for user in users}
    while any(left.values()):
        if time.monotonic() > deadline:
            say(f"jobs still listed after {timeout:g} s: {sum(map(len, left.values()))}")
            return
        time.sleep(1)
        left = {user: live_jobs(user) for user in users}


def fill(users: Sequence[str], clusters: Sequence[str], cores: int, jobs: int) -> None:
    """One-core jobs on every core, then arrays of waiting jobs up to ``jobs`` in all."""
    running = len(clusters) * 8 * cores
    shapes = [
        ("/host=1", "0:30:00"),
        ("/host=2", "1:00:00"),
        ("/host=4", "0:20:00"),
        ("/core=1", "2:00:00"),
        ("/host=8", "0:45:00"),
    ]
    for i, cluster in enumerate(clusters):
        user = users[i % len(users)]
        as_user(
            user,
            "oarsub",
            "-t",
            "noop",
            "--array",
            str(8 * cores),
            "-p",
            f"cluster='{cluster}'",
            "-l",
            "/core=1,walltime=1:00:00",
            "-n",
            "fill",
        )
    left, turn = jobs - running, 0
    while left > 0:
        count = min(100, left)
        resource, walltime = shapes[turn % len(shapes)]
        user = users[turn % len(users)]
        cluster = clusters[turn % len(clusters)]
        done = as_user(
            user,
            "oarsub",
            "-t",
            "noop",
            "--array",
            str(count),
            "-p",
            f"cluster='{cluster}'",
            "-l",
            f"{resource},walltime={walltime}",
            "-n",
            f"queue{turn}",
        )
        if done.returncode != 0:
            raise SystemExit(f"oarsub --array failed: {done.stdout}{done.stderr}")
        left -= count
        turn += 1


def adapter_for(env: dict[str, str], backend: str) -> OarAdapter:
    table: dict[str, object] = {
        "kind": "oar",
        "backend": backend,
        "cluster": [{"name": c} for c in env["COORM_OAR_CLUSTERS"].split()],
    }
    if backend == "rest":
        table["rest"] = {"url": env["COORM_OAR_API_URL"]}
    return make_oar_adapter(OarSettings.model_validate(table))


def timed_snapshots(adapter: OarAdapter, runs: int) -> tuple[list[float], int, int, int]:
    spent = []
    for _ in range(runs):
        began = time.perf_counter()
        shot = adapter.snapshot()
        spent.append(time.perf_counter() - began)
    jobs = [j for c in shot.clusters.values() for j in c.jobs]
    running = sum(j.state is JobState.RUNNING for j in jobs)
    return spent, len(jobs), running, len(jobs) - running


def placeholders(adapter: OarAdapter, user: str) -> None:
    now = adapter.now()
    spec = ReservationSpec(
        name="coorm-bench-beta", start=now + 7200, end=now + 9000, hosts=6, users=(user,)
    )
    began = time.perf_counter()
    adapter.create_reservation("beta", spec)
    create = time.perf_counter() - began
    began = time.perf_counter()
    adapter.update_reservation(
        "beta", spec.model_copy(update={"start": now + 10800, "end": now + 12600})
    )
    first = time.perf_counter() - began
    adapter.update_reservation(
        "beta", spec.model_copy(update={"start": now + 11400, "end": now + 13200})
    )
    gap = adapter.backend.mover.last_gap  # type: ignore[attr-defined]
    began = time.perf_counter()
    adapter.delete_reservation("beta", spec.name)
    delete = time.perf_counter() - began
    print(
        f"oar_placeholder create={create:.2f} move_first={first:.2f} "
        f"move_gap={gap if gap is None else round(gap, 2)} delete={delete:.2f}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--env", help="a running OAR's env.sh (tests/oar/oar-local.sh env)")
    parser.add_argument(
        "--settle", type=float, default=60.0, help="seconds to let OAR's scheduler plan the queue"
    )
    args = parser.parse_args(argv)
    with lab(args.env) as env:
        users = env["COORM_OAR_USERS"].split()
        clusters = env["COORM_OAR_CLUSTERS"].split()
        clear(users)
        try:
            adapter = adapter_for(env, "cli")
            try:
                placeholders(adapter, users[0])  # on an idle platform
            finally:
                adapter.close()
            began = time.monotonic()
            fill(users, clusters, int(env["COORM_OAR_CORES"]), args.jobs)
            say(
                f"{args.jobs} jobs submitted in {time.monotonic() - began:.1f} s; "
                f"letting OAR plan them for {args.settle:g} s"
            )
            time.sleep(args.settle)
            for backend in ("cli", "rest", "rest-details"):
                adapter = adapter_for(env, backend.partition("-")[0])
                if backend == "rest-details":  # as where a site refuses /select_all
                    adapter.backend.sql = False  # type: ignore[attr-defined]
                try:
                    spent, seen, running, pending = timed_snapshots(adapter, args.runs)
                    print(
                        f"oar_snapshot jobs={args.jobs} clusters={len(clusters)} "
                        f"backend={backend} seconds={statistics.median(spent):.3f} "
                        f"placed={seen}"
                    )
                    say(
                        f"{backend}: best={min(spent):.3f}; jobs placed: {seen} "
                        f"({running} running, {pending} waiting with a prediction; OAR has "
                        "planned no others yet)"
                    )
                finally:
                    adapter.close()
        finally:
            clear(users)


if __name__ == "__main__":
    main()
