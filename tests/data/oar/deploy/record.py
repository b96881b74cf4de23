"""Records what OAR's commands answer to the OAR deployer, as the unit tests replay them.

Run as root beside a local OAR of tests/oar/oar-local.sh (its env.sh as the first argument);
each answer is written to ``<name>.json`` here: the argument vector, the exit status, stdout and
stderr. The commands run as the env file's first test user (``runuser``), the container is made
with the adapter's own builder, the jobs are the deployer's argument vectors; every job made is
deleted at the end. Timings (submission to running) are printed.

    python3 tests/data/oar/deploy/record.py /tmp/coorm-oar/env.sh
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))  # the repository, for the layout below

from coorm_bridge.adapters.base import ReservationSpec  # noqa: E402
from coorm_bridge.adapters.oar import commands  # noqa: E402
from coorm_bridge.adapters.oar.binding import OarBinding  # noqa: E402
from coorm_bridge.core.batch import JobSpec  # noqa: E402

PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
ALPHA = OarBinding(name="alpha", property="cluster", value="alpha", host_property="host")
made: list[tuple[str, str]] = []  # (user, job id)


def env_file(path: str) -> dict[str, str]:
    found = {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            found[key] = shlex.split(value)[0] if value else ""
    return found


def run(argv: tuple[str, ...] | list[str], user: str | None, cwd: Path) -> dict[str, object]:
    full = list(argv) if user is None else ["runuser", "-u", user, "--", *argv]
    done = subprocess.run(
        full,
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env={**os.environ, **commands.ENV, "PATH": PATH, "PWD": str(cwd)},
        timeout=120,
    )
    return {
        "argv": list(argv),
        "returncode": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
    }


def keep(name: str, answer: dict[str, object]) -> dict[str, object]:
    (HERE / f"{name}.json").write_text(json.dumps(answer, indent=1) + "\n")
    print(f"{name}: exit {answer['returncode']}", file=sys.stderr)
    return answer


def job_of(answer: dict[str, object], user: str) -> str:
    job = commands.created_job_id(str(answer["stdout"]))
    made.append((user, job))
    return job


def state(job: str, cwd: Path) -> dict[str, object]:
    answer = run(commands.show_job(job), None, cwd)
    data = json.loads(str(answer["stdout"]) or "{}")
    return dict(data.get(job) or {})


def wait(job: str, states: set[str], cwd: Path, timeout: float = 180) -> float:
    """Seconds until the job is in one of ``states``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if state(job, cwd).get("state") in states:
            return time.monotonic() - began
        time.sleep(0.2)
    raise SystemExit(f"job {job} not in {states} after {timeout} s: {state(job, cwd)}")


def inner(
    name: str,
    container: str,
    user: str,
    argv: tuple[str, ...],
    hosts: tuple[str, ...],
    work: Path,
    walltime: int = 300,
) -> tuple[str, ...]:
    spec = JobSpec(
        name=name,
        user=user,
        argv=argv,
        hosts=len(hosts),
        walltime=walltime,
        reservation="coorm-rec-alpha",
        workdir=str(work),
        environment={"COORM_CLUSTER": "alpha", "COORM_RUN_DIR": str(work)},
    )
    return commands.submit_inner(
        ALPHA,
        spec,
        container,
        None,
        hosts=hosts,
        output=str(work / f"{name}.out"),
        error=str(work / f"{name}.err"),
    )


def main() -> None:
    lab = env_file(sys.argv[1])
    alice, bob = lab["COORM_OAR_USERS"].split()[:2]
    nodes = lab["COORM_OAR_NODES_alpha"].split()
    work = Path(f"/tmp/coorm-oardeploy-rec-{os.getpid()}")
    work.mkdir(mode=0o755)
    for user in (alice, bob):  # each user's jobs write their outputs in their own directory
        (work / user).mkdir(mode=0o755)
        os.chown(work / user, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
    mine = work / alice
    try:
        now = int(time.time())
        spec = ReservationSpec(
            name="coorm-rec-alpha",
            start=now,
            end=now + 900,
            host_names=tuple(nodes[:3]),
            users=(alice,),
        )
        answer = keep(
            "oarsub_container", run(commands.create_reservation(ALPHA, spec, None), alice, mine)
        )
        container = job_of(answer, alice)
        print(f"container {container} running after {wait(container, {'Running'}, mine):.1f} s")
        granted = tuple(nodes[:2])
        keep("oarstat_current", run(commands.current_jobs(), alice, mine))

        stamp = ("sh", "-c", 'sort -u "$OAR_NODEFILE"; echo "$COORM_CLUSTER"; sleep 3')
        answer = keep(
            "oarsub_inner", run(inner("ok", container, alice, stamp, granted, mine), alice, mine)
        )
        ok = job_of(answer, alice)
        print(f"inner job {ok} running after {wait(ok, {'Running'}, mine):.1f} s")
        keep("oarstat_running", run(commands.show_job(ok), alice, mine))
        wait(ok, {"Terminated", "Error"}, mine)
        keep("oarstat_terminated", run(commands.show_job(ok), alice, mine))
        keep("oardel_finished", run(commands.delete_job(ok, None), alice, mine))

        failing = ("sh", "-c", "exit 3")
        one = job_of(
            run(inner("exit3", container, alice, failing, granted, mine), alice, mine), alice
        )
        wait(one, {"Terminated", "Error"}, mine)
        keep("oarstat_exit3", run(commands.show_job(one), alice, mine))

        killed = ("sh", "-c", "kill -9 $$")
        nine = job_of(
            run(inner("kill9", container, alice, killed, granted, mine), alice, mine), alice
        )
        wait(nine, {"Terminated", "Error"}, mine)
        keep("oarstat_signal9", run(commands.show_job(nine), alice, mine))

        long = ("sleep", "600")
        gone = job_of(
            run(inner("deleted", container, alice, long, granted, mine), alice, mine), alice
        )
        wait(gone, {"Running"}, mine)
        keep("oardel_running", run(commands.delete_job(gone, None), alice, mine))
        wait(gone, {"Terminated", "Error"}, mine)
        keep("oarstat_deleted", run(commands.show_job(gone), alice, mine))

        over = job_of(
            run(inner("walltime", container, alice, long, granted, mine, 5), alice, mine), alice
        )
        print(f"walltime of 5 s: ended after {wait(over, {'Terminated', 'Error'}, mine):.1f} s")
        keep("oarstat_walltime", run(commands.show_job(over), alice, mine))

        keep(
            "oarsub_refused", run(inner("bad", "987654", alice, stamp, granted, mine), alice, mine)
        )
        keep("oarstat_unknown", run(commands.show_job("987654"), alice, mine))
        keep("oardel_unknown", run(commands.delete_job("987654", None), alice, mine))
        keep("oarnodes_host", run(commands.host_resources(ALPHA, nodes[0]), alice, mine))

        # a host outside the container: accepted, never placed
        outside = (nodes[0], nodes[5])
        far = job_of(
            run(inner("outside", container, alice, long, outside, mine), alice, mine), alice
        )
        time.sleep(10)
        keep("oarstat_outside", run(commands.show_job(far), alice, mine))

        # inner jobs longer than what is left of the container, and as long as what is left
        container_end = int(state(container, mine)["startTime"]) + 900
        left = container_end - int(time.time())
        over = job_of(
            run(inner("toolong", container, alice, long, granted, mine, left + 120), alice, mine),
            alice,
        )
        exact = job_of(
            run(inner("exact", container, alice, long, (nodes[2],), mine, left - 5), alice, mine),
            alice,
        )
        time.sleep(10)
        keep("oarstat_too_long", run(commands.show_job(over), alice, mine))
        keep("oarstat_exact_fit", run(commands.show_job(exact), alice, mine))
        run(commands.delete_job(exact, None), alice, mine)

        # another user's job into alice's container
        answer = keep(
            "oarsub_other_user",
            run(inner("other", container, bob, stamp, granted, work / bob), bob, work / bob),
        )
        if answer["returncode"] == 0:
            other = job_of(answer, bob)
            wait(other, {"Terminated", "Error"}, work)
            keep("oarstat_other_user", run(commands.show_job(other), bob, mine))

        # a move: a second container of the same name, then both in oarstat -J
        later = int(time.time()) + 1200
        moved = ReservationSpec(
            name="coorm-rec-alpha",
            start=later,
            end=later + 600,
            host_names=tuple(nodes[:3]),
            users=(alice,),
        )
        job_of(run(commands.create_reservation(ALPHA, moved, None), alice, mine), alice)
        time.sleep(3)
        keep("oarstat_moved", run(commands.current_jobs(), alice, mine))
    finally:
        for user, job in reversed(made):
            run(commands.delete_job(job, None), user, mine)
        print(f"deleted {len(made)} jobs; outputs left in {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
