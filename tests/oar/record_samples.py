"""Record OAR's answers from a running local OAR (tests/oar/oar-local.sh) into tests/data/oar/.

    .venv/bin/python tests/oar/record_samples.py "$(bash tests/oar/oar-local.sh env)" \
        tests/data/oar [sql]

Root only. It deletes every job of the instance first (``reset()``), builds one situation (jobs
running, waiting with a prediction, advance reservations, containers and inner jobs, refusals)
and writes what the commands answered; then it takes three nodes out (Absent, Dead, and
Suspected through a failing ssh) and writes the node views; it leaves the instance as it found
it: no job left, every node Alive, ~oar/.ssh/config restored. tests/data/oar/README.md lists
the files. Options are written as one string split on spaces: argument vectors, no shell.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from coorm_bridge.adapters.oar import gantt_sql
from tests.oar.lab import OarInstance, Submission, oar_date


class Recorder:
    def __init__(self, oar: OarInstance, out: Path) -> None:
        self.oar, self.out = oar, out

    def write(self, name: str, data: Any) -> None:
        path = self.out / name
        if isinstance(data, str):
            path.write_text(data)
        else:
            path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        print(f"wrote {path}")

    def oarsub(
        self, name: str | None, user: str, options: str, *command: str, at: datetime | None = None
    ) -> Submission:
        """oarsub [-r AT] OPTIONS [COMMAND] as USER ("root": as root); NAME: the sample to write."""
        args = [*(["-r", oar_date(at)] if at else []), *options.split(), *command]
        if user == "root":
            proc = self.oar.run("oarsub", *args)
            sub = Submission(["oarsub", *args], proc.returncode, proc.stdout, proc.stderr)
        else:
            sub = self.oar.oarsub(*args, user=user)
        if name is not None:
            self.write(name, self.answer(user, sub.argv, sub.returncode, sub.stdout, sub.stderr))
        return sub

    def job(self, user: str, options: str, *command: str, at: datetime | None = None) -> int:
        sub = self.oarsub(None, user, options, *command, at=at)
        assert sub.job_id is not None, sub
        return sub.job_id

    @staticmethod
    def answer(user: str, argv: list[str], code: int, stdout: str, stderr: str) -> dict[str, Any]:
        return {"user": user, "argv": argv, "exit_code": code, "stdout": stdout, "stderr": stderr}

    def curl(self, name: str, user: str | None, body: dict[str, Any]) -> None:
        """POST /jobs.json with curl -i (status line and headers kept)."""
        argv = ["curl", "-s", "-i", f"{self.oar.api_url}/jobs.json"]
        if user is not None:
            argv += ["-H", f"X-Remote-Ident: {user}"]
        argv += ["-H", "Content-Type: application/json", "-X", "POST", "-d", json.dumps(body)]
        proc = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
        self.write(name, proc.stdout.replace("\r\n", "\n"))


def record_jobs(rec: Recorder) -> None:
    oar = rec.oar
    alice, bob, carol = oar.users[0], oar.users[1], oar.limited_users[0]
    now = datetime.now().replace(microsecond=0)
    later = now + timedelta(hours=2)

    # a batch job with a command, running on beta
    rec.oarsub(
        "oarsub_batch.json",
        alice,
        "-n batch_sleep -p cluster='beta' -l /host=2,walltime=1:00:00",
        "sleep 3600",
    )
    # alpha full (noop), and a job waiting behind it with a predicted start
    fill = rec.job(alice, "-t noop -n fill_alpha -p cluster='alpha' -l /host=8,walltime=1:00:00")
    oar.wait_job(fill, {"Running"})
    queued = rec.job(bob, "-t noop -n queued_alpha -p cluster='alpha' -l /host=4,walltime=0:30:00")
    oar.wait_prediction(queued)
    # a container reservation running now, with inner jobs of its owner and of another user
    container = rec.oarsub(
        "oarsub_container_reservation_now.json",
        alice,
        "-t container -t noop -n container_now -p cluster='beta' -l /host=4,walltime=1:00:00",
        at=datetime.now(),
    ).job_id
    assert container is not None
    oar.wait_job(container, {"Running"})
    for name, user, hosts in (
        ("oarsub_inner_same_user.json", alice, 2),
        ("oarsub_inner_other_user.json", bob, 1),
    ):
        sub = rec.oarsub(
            name,
            user,
            f"-t inner={container} -n inner_{user} -l /host={hosts},walltime=0:30:00",
            "sleep 1800",
        )
        assert sub.job_id is not None
        oar.wait_job(sub.job_id, {"Running"})
    # a container reservation in 2 hours, an inner job waiting for it, a refused reservation
    future = rec.oarsub(
        "oarsub_reservation_accepted.json",
        alice,
        "-t container -t noop -n container_later -p cluster='beta' -l /host=3,walltime=1:00:00",
        at=later,
    ).job_id
    assert future is not None
    inner_later = rec.job(
        bob, f"-t inner={future} -n inner_later -l /host=2,walltime=0:20:00", "sleep 600"
    )
    oar.wait_prediction(inner_later)
    rec.oarsub(
        "oarsub_reservation_refused.json",
        bob,
        "-t noop -n resa_conflict -p cluster='beta' -l /host=8,walltime=0:30:00",
        at=later + timedelta(minutes=15),
    )
    # refusals by the admission rules
    rec.oarsub("oarsub_root_refused.json", "root", "-l /host=1,walltime=0:10:00", "true")
    rec.oarsub(
        "oarsub_inner_invalid_container.json",
        alice,
        "-t inner=424242 -l /host=1,walltime=0:10:00",
        "true",
    )
    for i, name in enumerate(
        (
            "oarsub_reservation_accepted_limited_user.json",
            None,
            "oarsub_reservation_limit_refused.json",
        )
    ):
        options = f"-t noop -n carol_{i + 1} -l /host=1,walltime=0:10:00"
        rec.oarsub(name, carol, options, at=now + timedelta(hours=4 + i))
    # oardel: a job that does not exist, and another user's job
    for name, job_id in (("oardel_unknown_job.json", "424242"), ("oardel_not_owner.json", fill)):
        proc = oar.run("oardel", str(job_id), user=bob)
        argv = ["oardel", str(job_id)]
        rec.write(name, rec.answer(bob, argv, proc.returncode, proc.stdout, proc.stderr))
    record_already_killed(rec, bob)

    # the views
    start = datetime.now()
    rec.write("oarstat_J_gantt.json", oar.gantt(start, start + timedelta(hours=6)))
    rec.write("oarstat_J_f.json", oar.json("oarstat", "-f"))
    rec.write(f"oarstat_J_u_{alice}.json", oar.json("oarstat", "-u", alice))
    rec.write("oarstat_J_all_users.json", oar.json("oarstat"))

    # REST
    rec.write("rest_jobs_details.json", oar.api("jobs/details.json", user=alice)[1])
    batch = {"resource": "/host=1,walltime=00:10:00", "command": "true"}
    rec.curl("rest_post_root_500.txt", "root", batch)
    rec.curl("rest_post_without_ident_401.txt", None, batch)
    rec.curl("rest_post_hyphenated_user_401.txt", "coorm-nobody", batch)
    resa = {"resource": "/host=1,walltime=00:10:00", "type": "noop", "name": "carol_rest"}
    resa["reservation"] = oar_date(now + timedelta(hours=8))
    rec.curl("rest_post_reservation_limit_500.txt", carol, resa)
    conflict = {"resource": "/host=8,walltime=00:30:00", "type": "noop", "name": "rest_conflict"}
    conflict["property"] = "cluster='beta'"
    conflict["reservation"] = oar_date(later + timedelta(minutes=15))
    rec.curl("rest_post_reservation_refused_400.txt", bob, conflict)


def record_sql(rec: Recorder) -> None:
    """One server read three ways at one moment (``sql_*``): ``oarstat -J --gantt``, the REST
    API's ``/select_all`` with the bridge's Gantt query (adapters/oar/gantt_sql.py), and
    ``/jobs/details`` over the same window; ``sql_window.json`` says which."""
    oar = rec.oar
    alice, bob = oar.users[0], oar.users[1]
    fill = rec.job(alice, "-t noop -n fill_alpha -p cluster='alpha' -l /host=8,walltime=1:00:00")
    oar.wait_job(fill, {"Running"})
    queued = rec.job(bob, "-t noop -n queued_alpha -p cluster='alpha' -l /host=4,walltime=0:30:00")
    oar.wait_prediction(queued)
    container = rec.job(
        alice,
        "-t container -t noop -n container_now -p cluster='beta' -l /host=4,walltime=1:00:00",
        at=datetime.now(),
    )
    oar.wait_job(container, {"Running"})
    inner = rec.job(alice, f"-t inner={container} -n inner_now -l /host=2,walltime=0:30:00",
                    "sleep 1800")  # fmt: skip
    oar.wait_job(inner, {"Running"})
    later = rec.job(
        alice,
        "-t container -t noop -n container_later -p cluster='beta' -l /host=3,walltime=1:00:00",
        at=datetime.now() + timedelta(hours=2),
    )
    waiting = rec.job(bob, f"-t inner={later} -n inner_later -l /host=2,walltime=0:20:00",
                      "sleep 600")  # fmt: skip
    oar.wait_prediction(waiting)
    begin = int(time.time()) - 1
    end = begin + 6 * 3600
    start = datetime.fromtimestamp(begin)
    rec.write("sql_window.json", {"begin": begin, "end": end})
    rec.write("sql_oarstat_J_gantt.json", oar.gantt(start, datetime.fromtimestamp(end)))
    rec.write("sql_resources_details.json", oar.api("resources/details.json?limit=500")[1])
    query = urllib.parse.quote(gantt_sql.query(begin, end))
    path = f"select_all.json?limit={gantt_sql.PAGE}&query={query}"
    rec.write("sql_select_all.json", oar.api(path, user="oar")[1])
    window = f"jobs/details.json?limit=500&from={begin}&to={end}"
    rec.write("sql_jobs_details.json", oar.api(window, user="oar")[1])


def record_nodes(rec: Recorder) -> None:
    oar = rec.oar
    absent, dead, suspected = oar.nodes["alpha"][-1], oar.nodes["alpha"][-2], oar.nodes["alpha"][-3]
    oar.set_state(absent, "Absent")
    oar.set_state(dead, "Dead")
    # Suspected: OAR sets it itself when it cannot reach a node. The node's name goes to an
    # address where nothing listens, for the time of one job (the instance's ssh config).
    home = subprocess.check_output(["getent", "passwd", "oar"], text=True).split(":")[5]
    config = Path(home) / ".ssh" / "config"
    saved = config.read_text()
    try:
        config.write_text(f"Host {suspected}\n  HostName 127.0.0.2\n\n{saved}")
        options = f"-n on_suspected -p host='{suspected}' -l /host=1,walltime=0:05:00"
        job_id = rec.job(oar.users[0], options, "hostname")
        oar.wait_job(job_id, {"Error"})
    finally:
        config.write_text(saved)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = {r["network_address"]: r["state"] for r in oar.resources().values()}
        if states[suspected] == "Suspected":
            break
        time.sleep(0.2)
    rec.write("oarnodes_J_absent_dead_suspected.json", oar.resources())
    start = datetime.now()
    rec.write("oarstat_J_gantt_nodes_down.json", oar.gantt(start, start + timedelta(hours=1)))
    rec.write(
        "oarstat_J_f_job_on_suspected_node.json", oar.json("oarstat", "-f", "-j", str(job_id))
    )
    rec.write("oarnodes_e_suspected_node.txt", oar.run("oarnodes", "-e", suspected).stdout)


def record_already_killed(rec: Recorder, user: str) -> None:
    """oardel of a job OAR is killing already (a move's old container, deleted again)."""
    oar = rec.oar
    job_id = oar.submit("-l", "/host=1,walltime=0:10:00", "sleep 600", user=user)
    oar.run("oardel", str(job_id), user=user, check=True)
    proc = oar.run("oardel", str(job_id), user=user)
    argv = ["oardel", str(job_id)]
    rec.write(
        "oardel_already_killed.json",
        rec.answer(user, argv, proc.returncode, proc.stdout, proc.stderr),
    )


def main() -> None:
    env_file, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    oar = OarInstance.from_env(env_file, started_here=False)
    rec = Recorder(oar, out)
    oar.reset()
    began = datetime.now()
    if sys.argv[3:] == ["sql"]:  # only the sql_* samples
        try:
            record_sql(rec)
        finally:
            oar.reset()
        return
    try:
        record_jobs(rec)
        oar.reset()
        # the jobs above, all deleted: the past as the gantt shows it
        rec.write("oarstat_J_gantt_past.json", oar.gantt(began, datetime.now()))
        record_nodes(rec)
    finally:
        oar.reset()
    version = oar.run("oarstat", "-V").stdout.strip()
    when = datetime.now().astimezone().isoformat(timespec="seconds")
    rec.write("recorded_at", f"{when} {version} ({oar.env['COORM_OAR_VERSION']})\n")


if __name__ == "__main__":
    main()
