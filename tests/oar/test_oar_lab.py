"""Smoke tests of the local OAR (tests/oar/conftest.py, tests/oar/oar-local.sh): what the OAR
adapter's integration tests will rely on, asserted against the real OAR 2.5.9.

Each test prints what the commands answered (``pytest -s`` or ``-rA`` shows it). Options are
written as one string split on spaces (``_a("-n x -l /host=1")``): an argument vector, no shell.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.oar.lab import FINAL_STATES, SBIN_PATH, OarInstance, Submission, oar_date

pytestmark = pytest.mark.oar

SCRIPT = Path(__file__).resolve().with_name("oar-local.sh")
REFUSED = re.compile(
    r"^Reservation not valid --> KO \(This reservation could run at "
    r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\)$",
    re.MULTILINE,
)
# The keys of one job in `oarstat -J --gantt` (OAR 2.5.9). OAR merges two queries: the
# meta-scheduler's last plan (gantt_jobs_predictions_visu: running and waiting jobs, start =
# prediction, stop = start + walltime) and, for jobs not in that plan, the jobs that ran in the
# window (actual start and stop). A job without types has no "types" key in the first and
# "types": [] in the second (Perl autovivification in oarstat).
GANTT_JOB_KEYS = {
    "command",
    "job_id",
    "job_name",
    "job_type",
    "launching_directory",
    "network_address",
    "project",
    "properties",
    "queue_name",
    "resource_id",
    "start_time",
    "state",
    "stop_time",
    "submission_time",
    "types",
    "user",
    "walltime",
}
HOSTS_OF_THE_JOB = 'sort -u "$OAR_NODEFILE" | paste -sd" "'


def _a(options: str) -> list[str]:
    """Options without spaces inside, as an argument vector."""
    return options.split()


def _show(title: str, text: str) -> None:
    print(f"--- {title}\n{text.rstrip()}")


def _shown(sub: Submission, user: str) -> Submission:
    _show(
        f"{' '.join(sub.argv)} (as {user}) -> exit {sub.returncode}",
        f"[stdout]\n{sub.stdout}[stderr]\n{sub.stderr}",
    )
    return sub


def _hosts(job: dict[str, Any]) -> set[str]:
    return set(job["assigned_network_address"])


def _output(oar: OarInstance, user: str, name: str, job_id: int) -> str:
    return (oar.workdir(user) / f"OAR.{name}.{job_id}.stdout").read_text()


def _host_key(host: str) -> tuple[str, int]:
    cluster, _, number = host.rpartition("-")
    return cluster, int(number)


# ------------------------------------------------------------------ the instance
def test_resources_alive_per_cluster_and_host(oar: OarInstance) -> None:
    oar.reset()
    resources = oar.resources()
    assert len(resources) == len(oar.clusters) * len(oar.nodes[oar.clusters[0]]) * oar.cores
    hosts: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for key, resource in resources.items():
        assert resource["resource_id"] == int(key)
        assert resource["state"] == "Alive"
        assert resource["network_address"] == resource["host"]
        hosts[resource["cluster"]][resource["host"]].append(resource)
    assert sorted(hosts) == sorted(oar.clusters)
    cores, cpus = set(), set()
    for cluster in oar.clusters:
        assert sorted(hosts[cluster], key=_host_key) == oar.nodes[cluster]
        assert oar.nodes[cluster] == [f"{cluster}-{n}" for n in range(1, 9)]
        for host, mine in hosts[cluster].items():
            assert len(mine) == oar.cores, host
            assert len({r["cpu"] for r in mine}) == 1, host  # one cpu per node
            cpus.add(mine[0]["cpu"])
            cores.update(r["core"] for r in mine)
    assert len(cores) == len(resources)  # core numbers are unique across the platform
    assert len(cpus) == sum(len(n) for n in oar.nodes.values())


def test_a_second_instance_is_refused(oar: OarInstance) -> None:
    """/etc/oar/oar.conf is machine-wide: `up` refuses (exit 5) while an instance runs."""
    # A short BASE, as the script asks (a test's tmp_path is too long under xdist), never made.
    second = Path(tempfile.gettempdir()) / f"coorm-oar-second-{os.getpid()}"
    proc = subprocess.run(
        ["bash", str(SCRIPT), "up"],
        env={**os.environ, "PATH": SBIN_PATH, "BASE": str(second), "PGPORT": "45432"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    _show(f"second up -> exit {proc.returncode}", proc.stderr)
    assert proc.returncode == 5
    assert f"an OAR instance is up under BASE={oar.base}" in proc.stderr
    assert not second.exists()
    assert oar.resources()  # the first one still answers


# ------------------------------------------------------------------ a batch job
def test_batch_job_runs_on_emulated_nodes(oar: OarInstance) -> None:
    oar.reset()
    user = oar.users[0]
    script = f'echo "hosts: $({HOSTS_OF_THE_JOB})"; echo "user: $(id -un)"'
    submitted = datetime.now()
    options = _a("-n lab_batch -p cluster='beta' -l /host=2,walltime=0:05:00")
    sub = _shown(oar.oarsub(*options, script, user=user), user)
    assert sub.returncode == 0
    assert sub.stdout.splitlines()[-1] == f"OAR_JOB_ID={sub.job_id}"
    assert sub.job_id is not None
    job = oar.wait_job(sub.job_id, FINAL_STATES, timeout=60)
    output = _output(oar, user, "lab_batch", sub.job_id)
    _show(f"job {sub.job_id} {job['state']} exit_code={job['exit_code']}", output)
    assert job["state"] == "Terminated"
    assert job["exit_code"] == 0
    hosts = sorted(_hosts(job), key=_host_key)
    assert len(hosts) == 2
    assert set(hosts) <= set(oar.nodes["beta"])
    assert output.splitlines() == [f"hosts: {' '.join(hosts)}", f"user: {user}"]

    # The gantt covers the past too: a window over the job shows it, terminated (from the last
    # plan until the next pass of the meta-scheduler, then from the jobs that ran).
    # (The window's end is in whole seconds and excludes a job that began in its last one.)
    until = datetime.now() + timedelta(seconds=2)
    past = oar.gantt(submitted - timedelta(seconds=1), until)["jobs"]
    assert past[str(sub.job_id)]["state"] == "Terminated"
    assert past[str(sub.job_id)].get("types", []) == []
    assert set(past[str(sub.job_id)]["network_address"]) == set(hosts)


# ------------------------------------------------------------------ advance reservations
def test_reservation_accepted_and_conflicting_one_refused(oar: OarInstance) -> None:
    oar.reset()
    alice, bob = oar.users[0], oar.users[1]
    start = datetime.now().replace(microsecond=0) + timedelta(hours=1)
    options = _a("-t container -t noop -n lab_resa -p cluster='alpha' -l /host=6,walltime=1:00:00")
    ok = _shown(oar.oarsub("-r", oar_date(start), *options, user=alice), alice)
    assert ok.returncode == 0
    assert ok.stdout.splitlines()[-2:] == [
        "Reservation mode: waiting validation...",
        "Reservation valid --> OK",
    ]
    assert ok.job_id is not None
    resa = oar.job(ok.job_id)
    assert resa["reservation"] == "Scheduled"
    assert resa["state"] == "Waiting"
    assert resa["scheduledStart"] == int(start.timestamp())

    conflict = start + timedelta(minutes=10)
    options = _a("-t noop -n lab_conflict -p cluster='alpha' -l /host=4,walltime=0:30:00")
    ko = _shown(oar.oarsub("-r", oar_date(conflict), *options, user=bob), bob)
    assert ko.returncode == 10
    found = REFUSED.search(ko.stdout)
    assert found is not None, ko.stdout
    could_run = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S")
    # after the first reservation's end (OAR adds its 60 s SCHEDULER_JOB_SECURITY_TIME)
    assert start + timedelta(hours=1) < could_run <= start + timedelta(hours=1, minutes=2)
    # the refused reservation got a job id, and that job ends in Error at once
    assert ko.job_id is not None
    assert oar.wait_job(ko.job_id, FINAL_STATES, timeout=30)["state"] == "Error"


# ------------------------------------------------------------------ containers, inner jobs
def _running_container(oar: OarInstance, owner: str, hosts: int) -> tuple[int, set[str]]:
    options = _a(f"-t container -t noop -n lab_container -p cluster='beta' -l /host={hosts}")
    job_id = oar.submit("-r", oar_date(datetime.now()), *options, user=owner)
    container = oar.wait_job(job_id, {"Running"}, timeout=30)
    return job_id, _hosts(container)


def _inner(oar: OarInstance, container: int, user: str, hosts: int, name: str) -> Submission:
    options = _a(f"-t inner={container} -n {name} -l /host={hosts},walltime=0:05:00")
    return _shown(oar.oarsub(*options, HOSTS_OF_THE_JOB, user=user), user)


def test_inner_job_of_the_container_owner_runs_inside(oar: OarInstance) -> None:
    oar.reset()
    owner = oar.users[0]
    container, container_hosts = _running_container(oar, owner, 4)
    sub = _inner(oar, container, owner, 2, "lab_inner")
    assert sub.returncode == 0
    assert sub.job_id is not None
    job = oar.wait_job(sub.job_id, FINAL_STATES, timeout=60)
    assert job["state"] == "Terminated"
    assert job["types"] == [f"inner={container}"]
    assert len(_hosts(job)) == 2
    assert _hosts(job) <= container_hosts
    output = _output(oar, owner, "lab_inner", sub.job_id)
    assert output.split() == sorted(_hosts(job), key=_host_key)
    assert oar.job(container)["state"] == "Running"  # the container outlives its inner jobs


def test_inner_job_of_another_user_runs_inside_the_container(oar: OarInstance) -> None:
    """OAR 2.5.9 (default admission rules) lets ANY user submit an inner job into a container
    owned by someone else: accepted with the usual output, it runs on the container's nodes."""
    oar.reset()
    owner, other = oar.users[0], oar.users[1]
    container, container_hosts = _running_container(oar, owner, 4)
    sub = _inner(oar, container, other, 1, "lab_inner_other")
    assert sub.returncode == 0
    assert sub.stdout.splitlines() == [
        "[ADMISSION RULE] Modify resource description with type constraints",
        f"OAR_JOB_ID={sub.job_id}",
    ]
    assert sub.stderr == ""
    assert sub.job_id is not None
    job = oar.wait_job(sub.job_id, FINAL_STATES, timeout=60)
    assert job["owner"] == other
    assert job["state"] == "Terminated"
    assert _hosts(job) <= container_hosts
    assert _output(oar, other, "lab_inner_other", sub.job_id).split() == sorted(_hosts(job))


def test_inner_job_larger_than_its_container_waits_without_slot(oar: OarInstance) -> None:
    oar.reset()
    container, _ = _running_container(oar, oar.users[0], 2)
    sub = _inner(oar, container, oar.users[0], 3, "lab_inner_big")
    assert sub.returncode == 0  # accepted ...
    assert sub.job_id is not None
    deadline = datetime.now() + timedelta(seconds=30)
    job = oar.job(sub.job_id)
    while "no_matching_slot" not in job["message"] and datetime.now() < deadline:
        job = oar.job(sub.job_id)
    _show(f"job {sub.job_id}", f"{job['state']}: {job['message']}")
    assert job["state"] == "Waiting"  # ... but never placed
    assert job["message"] == "No enough matching resources (no_matching_slot)"
    assert not job.get("scheduledStart")


# ------------------------------------------------------------------ refusals
def test_admission_rule_refusals(oar: OarInstance) -> None:
    oar.reset()
    root = oar.run("oarsub", *_a("-l /host=1,walltime=0:05:00 true"))
    _show(f"oarsub as root -> exit {root.returncode}", root.stdout + root.stderr)
    assert root.returncode == 254
    assert root.stdout == ""
    assert root.stderr == "[ADMISSION RULE] root and oar users are not allowed to submit jobs.\n\n"

    bad = _inner(oar, 999999, oar.users[0], 1, "lab_bad_container")
    assert bad.returncode == 254
    assert bad.stdout == ""
    assert bad.stderr == (
        "[ADMISSION RULE] Error: inner job is requesting an invalid container id.\n\n"
    )

    limited = oar.limited_users[0]
    later = datetime.now().replace(microsecond=0) + timedelta(hours=3)
    options = _a("-t noop -n lab_limit -l /host=1,walltime=0:10:00")
    answers = [
        _shown(
            oar.oarsub("-r", oar_date(later + timedelta(hours=i)), *options, user=limited), limited
        )
        for i in range(3)
    ]
    assert [a.returncode for a in answers] == [0, 0, 254]
    assert "is granted the privilege" not in answers[0].stdout
    assert answers[2].stdout == ""
    assert answers[2].stderr == (
        "[ADMISSION RULE] Error: you cannot have more than 2 waiting advance reservations.\n\n"
    )
    # the users of unlimited_reservation.users are told so on every reservation
    alice = oar.users[0]
    unlimited = _shown(oar.oarsub("-r", oar_date(later), *options, user=alice), alice)
    assert unlimited.returncode == 0
    assert unlimited.stdout.startswith(
        f"[ADMISSION RULE] {alice} is granted the privilege to do unlimited reservations\n"
    )


def test_oardel_of_an_unknown_job(oar: OarInstance) -> None:
    proc = oar.run("oardel", "987654", user=oar.users[0])
    _show(f"oardel 987654 -> exit {proc.returncode}", proc.stdout + proc.stderr)
    assert proc.returncode == 1
    assert proc.stdout == "Deleting the job = 987654 ...ERROR.\n"
    # the same answer as for another user's job
    assert proc.stderr == "Cannot frag 987654 ; You are not the right user.\n"


# ------------------------------------------------------------------ REST API
def test_rest_api_answers_with_remote_ident(oar: OarInstance) -> None:
    oar.reset()
    alice, bob = oar.users[0], oar.users[1]
    status, version = oar.api("version.json")
    assert status == 200
    assert version["oar_version"].startswith("2.5.9")
    options = _a("-t noop -n lab_api -p cluster='alpha' -l /host=1,walltime=0:10:00")
    job_id = oar.submit(*options, user=alice)
    host = oar.wait_job(job_id, {"Running"}, timeout=30)["assigned_network_address"]
    status, details = oar.api("jobs/details.json", user=alice)
    assert status == 200
    mine = [j for j in details["items"] if j["id"] == job_id]
    assert len(mine) == 1
    assert (mine[0]["owner"], mine[0]["state"]) == (alice, "Running")
    assert [n["network_address"] for n in mine[0]["nodes"]] == host

    # submissions: X-Remote-Ident is required; refusals by an admission rule answer 500
    body = {"resource": "/host=1,walltime=00:10:00", "command": "true"}
    status, answer = oar.api("jobs.json", method="POST", body=body)
    assert status == 401
    assert answer["message"] == "A suitable authentication must be done before posting jobs"
    status, answer = oar.api("jobs.json", user="root", method="POST", body=body)
    _show(f"POST /jobs as root -> {status}", str(answer))
    assert status == 500
    assert answer["message"].startswith(
        "Oarsub command exited with status 254: "
        "[ADMISSION RULE] root and oar users are not allowed to submit jobs.\n"
    )
    # the API keeps the first \w+ of the login: "coorm-x" would be "coorm", unknown here
    status, answer = oar.api("jobs.json", user="coorm-nobody", method="POST", body=body)
    assert status == 401
    assert "Cannot get information regarding the target user" in answer["message"]
    # a reservation refused by the scheduler answers 400
    status, answer = oar.api(
        "jobs.json",
        user=bob,
        method="POST",
        body={
            "resource": "/host=8,walltime=00:30:00",
            "type": "noop",
            "property": "cluster='alpha'",
            "reservation": oar_date(datetime.now() + timedelta(minutes=1)),
        },
    )
    _show(f"POST /jobs conflicting reservation -> {status}", str(answer))
    assert status == 400
    assert answer["message"].startswith("Oarsub command exited with status 10: ")
    assert REFUSED.search(answer["message"]) is not None


# ------------------------------------------------------------------ the gantt
def test_gantt_lists_running_predicted_and_reserved_jobs(oar: OarInstance) -> None:
    oar.reset()
    alice, bob = oar.users[0], oar.users[1]
    now = datetime.now().replace(microsecond=0)
    options = _a("-t noop -n lab_running -p cluster='alpha' -l /host=8,walltime=1:00:00")
    running = oar.submit(*options, user=alice)
    oar.wait_job(running, {"Running"}, timeout=30)
    # a job without types, waiting behind the first one
    options = _a("-n lab_waiting -p cluster='alpha' -l /host=4,walltime=0:30:00")
    waiting = oar.submit(*options, "sleep 60", user=bob)
    predicted = oar.wait_prediction(waiting)
    resa_start = now + timedelta(hours=2)
    options = _a("-t container -t noop -n lab_reserved -p cluster='beta' -l /host=3")
    reserved = oar.submit("-r", oar_date(resa_start), *options, user=alice)

    # from now on: the window also selects finished jobs and the intervals of dead_resources
    gantt = oar.gantt(datetime.now(), now + timedelta(hours=6))
    assert set(gantt) == {"jobs", "resources", "dead_resources"}
    assert gantt["dead_resources"] == {}
    assert len(gantt["resources"]) == sum(len(n) for n in oar.nodes.values()) * oar.cores
    jobs = gantt["jobs"]
    assert set(jobs) == {str(running), str(waiting), str(reserved)}
    for job_id, job in jobs.items():
        _show(
            f"gantt job {job_id}",
            f"{job['job_name']} {job['state']} {job['user']} types={job.get('types')} "
            f"{job['start_time']}..{job['stop_time']} {sorted(set(job['network_address']))}",
        )
        assert job["job_id"] == int(job_id)

    run = jobs[str(running)]
    assert set(run) == GANTT_JOB_KEYS
    assert (run["state"], run["user"], run["job_type"]) == ("Running", alice, "PASSIVE")
    assert set(run["network_address"]) == set(oar.nodes["alpha"])
    assert run["stop_time"] - run["start_time"] == 3600

    wait = jobs[str(waiting)]
    assert set(wait) == GANTT_JOB_KEYS - {"types"}  # no types: no "types" key at all
    assert (wait["state"], wait["user"], wait["command"]) == ("Waiting", bob, "sleep 60")
    assert wait["start_time"] == predicted
    assert wait["start_time"] > run["stop_time"]  # after the running job (+ security time)
    assert len(set(wait["network_address"])) == 4
    assert len(wait["resource_id"]) == 4 * oar.cores  # one entry per resource

    # A reservation looks like any waiting job here (no "reservation" key): its start is the
    # one asked for. Its arrays hold one entry per (resource, type) row: with two types,
    # every resource and host appears twice.
    resa = jobs[str(reserved)]
    assert set(resa) == GANTT_JOB_KEYS
    assert resa["state"] == "Waiting"
    assert resa["start_time"] == int(resa_start.timestamp())
    assert resa["walltime"] == 7200  # the default walltime (admission rule 15)
    assert sorted(set(resa["types"])) == ["container", "noop"]
    assert len(set(resa["network_address"])) == 3
    assert set(resa["network_address"]) <= set(oar.nodes["beta"])
    assert len(set(resa["resource_id"])) == 3 * oar.cores
    assert len(resa["resource_id"]) == len(resa["types"]) == 2 * 3 * oar.cores

    # the window: a job whose predicted interval starts after its end is left out
    early = oar.gantt(datetime.now(), now + timedelta(minutes=10))
    assert set(early["jobs"]) == {str(running)}


# ------------------------------------------------------------------ node states
def test_absent_and_dead_nodes_in_oarnodes_and_gantt(oar: OarInstance) -> None:
    oar.reset()
    absent, dead = oar.nodes["alpha"][-1], oar.nodes["alpha"][-2]
    try:
        oar.set_states({absent: "Absent", dead: "Dead"})
        resources = oar.resources()
        states = {r["network_address"]: (r["state"], r["state_num"]) for r in resources.values()}
        _show("oarnodes -J states", str({h: s for h, s in states.items() if s[0] != "Alive"}))
        assert states[absent] == ("Absent", 2)
        assert states[dead] == ("Dead", 4)
        assert {s for h, s in states.items() if h not in (absent, dead)} == {("Alive", 1)}
        now = datetime.now()
        gantt = oar.gantt(now, now + timedelta(hours=1))
        # resource id -> its intervals out of the Alive state: [since, until (0: still), state]
        down = {
            resources[key]["network_address"]: [(entry[1], entry[2]) for entry in history]
            for key, history in gantt["dead_resources"].items()
        }
        assert down == {absent: [(0, "Absent")], dead: [(0, "Dead")]}
        assert len(gantt["dead_resources"]) == 2 * oar.cores
    finally:
        oar.reset()
    assert {r["state"] for r in oar.resources().values()} == {"Alive"}
