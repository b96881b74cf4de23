"""OarAdapter over OAR's commands, run by a fake Runner that answers like OAR 2.5.9 from the
recorded gantt (tests/data/oar/) and keeps what oarsub and oardel change."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.oar import commands
from coorm_bridge.adapters.oar.adapter import OarAdapter
from coorm_bridge.adapters.oar.cli_backend import OarCliBackend
from coorm_bridge.adapters.oar.plugin import make_backend
from coorm_bridge.adapters.oar.rest_backend import OarRestBackend
from coorm_bridge.adapters.oar.settings import OarSettings
from coorm_bridge.core.batch import (
    AdapterError,
    JobSpec,
    JobState,
    LacksRights,
    NotPermitted,
    Refused,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.model import Submission
from coorm_bridge.service.config import ConfigError, parse_config
from tests.oar.samples import GANTT_NOW, command, gantt, load, ok, text

HOUR = 3600


class OarCommands(Runner):
    """OAR's commands as run by ``identity``: the recorded gantt, changed by oarsub (a container
    on the first free hosts, ``shrink`` fewer than asked) and oardel (the owner's jobs only)."""

    def __init__(self, identity: str = "root") -> None:
        self.identity = identity
        self.gantt = gantt()
        self.full: dict[str, Any] = load("oarstat_J_f.json")
        self.calls: list[tuple[str, ...]] = []
        self.next_id = 30
        self.shrink = 0
        self.refuse: Completed | None = None  # what oarsub answers instead, when set
        self.answer_gantt: str | None = None  # what oarstat --gantt prints instead, when set

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        assert (env or {}).get("TZ") == "UTC"
        self.calls.append(tuple(argv))
        user, args = (
            (argv[2], list(argv[4:])) if argv[0] == "runuser" else (self.identity, list(argv))
        )
        assert not (argv[0] == "runuser" and user == self.identity), "runuser to oneself"
        if args[0] == "oarstat" and "--gantt" in args:
            return ok(self.answer_gantt or json.dumps(self.gantt))
        if args[0] == "oarstat" and "-f" in args:
            job_id = args[-1]
            return ok(json.dumps({job_id: self.full[job_id]}) if job_id in self.full else "")
        if args[0] == "oarnodes":
            return ok(text("oarnodes_J.json"))
        if args[0] == "oarsub":
            return self.oarsub(user, args[1:])
        if args[0] == "oardel":
            return self.oardel(user, args[1])
        if args[0] == "oarwalltime":
            return ok(f"Accepted: walltime change request updated for job {args[1]}\n")
        raise AssertionError(f"unexpected command {argv}")

    def commands(self, name: str) -> list[tuple[str, ...]]:
        return [c for c in self.calls if name in c[:5]]

    def oarsub(self, user: str, args: list[str]) -> Completed:
        if self.refuse is not None:
            return self.refuse
        options: dict[str, list[str]] = {}
        while args and args[0].startswith("-"):
            options.setdefault(args[0], []).append(args[1])
            args = args[2:]
        job_id = str(self.next_id)
        self.next_id += 1
        if "-r" not in options:  # an inner job
            return ok(f"[ADMISSION RULE] Modify resource description\nOAR_JOB_ID={job_id}\n")
        start = commands.parse_date(options["-r"][0])
        found = re.fullmatch(r"/host=(\d+),walltime=(\d+):(\d\d):(\d\d)", options["-l"][0])
        assert found is not None
        count, h, m, s = (int(g) for g in found.groups())
        end = start + 3600 * h + 60 * m + s
        expression = options["-p"][0]
        named = re.findall(r"'([^']+)'", expression.partition(" IN ")[2])
        cluster = re.match(r"cluster='(\w+)'", expression)
        assert cluster is not None
        busy = {
            a
            for job in self.gantt["jobs"].values()
            if job["start_time"] < end and start < job["stop_time"]
            for a in job["network_address"]
        }
        hosts = (
            named
            or [
                f"{cluster.group(1)}-{i}"
                for i in range(1, 9)
                if f"{cluster.group(1)}-{i}" not in busy
            ][:count]
        )
        hosts = hosts[: len(hosts) - self.shrink]
        self.gantt["jobs"][job_id] = {
            "job_id": int(job_id), "job_name": options["-n"][0], "user": user,
            "state": "Waiting", "queue_name": "default", "types": options["-t"] * len(hosts),
            "start_time": start, "stop_time": end, "walltime": end - start,
            "network_address": hosts, "resource_id": list(range(len(hosts))),
        }  # fmt: skip
        return ok(
            f"[ADMISSION RULE] Modify resource description\nOAR_JOB_ID={job_id}\n"
            "Reservation mode: waiting validation...\nReservation valid --> OK\n"
        )

    def oardel(self, user: str, job_id: str) -> Completed:
        job = self.gantt["jobs"].get(job_id)
        if job is None or job["user"] != user:
            return Completed(1, f"Deleting the job = {job_id} ...ERROR.\n",
                             f"Cannot frag {job_id} ; You are not the right user.\n")  # fmt: skip
        del self.gantt["jobs"][job_id]
        return ok(f"Deleting the job = {job_id} ...REGISTERED.\n")


class At(OarAdapter):
    """The adapter at the time of the recording."""

    def now(self) -> int:
        return GANTT_NOW


SETTINGS = OarSettings.model_validate(
    {"kind": "oar", "cluster": [{"name": "alpha"}, {"name": "beta", "speed": 2.0}]}
)


def adapter(runner: OarCommands, submit_as: str = "owner") -> At:
    backend = OarCliBackend(
        runner, identity=runner.identity, submit_as=submit_as, clock=lambda: GANTT_NOW
    )
    return At(SETTINGS, backend)


def placeholder(name: str, hosts: list[str], start: int, owner: str) -> dict[str, Any]:
    """A gantt entry of a bridge placeholder."""
    return {
        "job_id": 0, "job_name": name, "user": owner, "state": "Waiting",
        "queue_name": "default", "types": ["container", "noop"], "start_time": start,
        "stop_time": start + HOUR, "walltime": HOUR, "network_address": hosts,
    }  # fmt: skip


def add(runner: OarCommands, job_id: int, entry: dict[str, Any]) -> None:
    runner.gantt["jobs"][str(job_id)] = {**entry, "job_id": job_id}


LATER = GANTT_NOW + 2 * HOUR
SPEC = ReservationSpec(name="coorm-3", start=LATER, end=LATER + HOUR, hosts=2,
                       users=("coorm_carol",))  # fmt: skip


# --- reading -------------------------------------------------------------------------------------


def test_one_gantt_read_gives_both_clusters() -> None:
    runner = OarCommands()
    oar = adapter(runner)
    assert oar.polled_together(["alpha", "beta"]) == [("alpha", "beta")]
    shot = oar.snapshot()
    assert runner.calls == [
        commands.gantt(GANTT_NOW - 1, GANTT_NOW + 30 * 86400),  # one command for both
    ]
    assert shot.time == GANTT_NOW
    alpha, beta = shot.clusters["alpha"], shot.clusters["beta"]
    assert [j.id for j in alpha.jobs] == ["16", "17", "24", "25"]
    assert [j.id for j in beta.jobs] == ["15", "19", "20", "22"]
    assert [r.name for r in beta.reservations] == ["container_now", "container_later"]
    assert len(alpha.nodes) == len(beta.nodes) == 8
    assert oar.snapshot(["beta"]).clusters.keys() == {"beta"}


def test_a_gantt_that_cannot_be_read_fails_every_cluster() -> None:
    runner = OarCommands()
    runner.gantt = {"jobs": [], "resources": "?"}  # type: ignore[dict-item]
    for cluster in ("alpha", "beta"):
        with pytest.raises(AdapterError, match=rf"^{cluster}: oarstat --gantt"):
            adapter(runner).snapshot([cluster])
    runner.answer_gantt = "oarstat: DBI connect failed"  # not even JSON: no answer
    with pytest.raises(Unavailable, match=r"^alpha: oarstat: unreadable JSON"):
        adapter(runner).snapshot()


def test_clusters_from_oarnodes() -> None:
    runner = OarCommands()
    infos = {info.name: info for info in adapter(runner).clusters()}
    assert (infos["beta"].hosts, infos["beta"].cores_per_host, infos["beta"].speed) == (8, 2, 2.0)
    assert infos["alpha"].submission == Submission(kind="oar", cluster="alpha")
    oar = adapter(runner)
    oar.clusters()
    oar.clusters()
    assert len(runner.commands("oarnodes")) == 4  # once per cluster, per adapter


def test_a_placeholder_by_name_is_the_newest_of_that_name() -> None:
    runner = OarCommands()
    add(runner, 30, placeholder("coorm-9", ["beta-7"], LATER, "coorm_alice"))
    add(runner, 31, placeholder("coorm-9", ["beta-8"], LATER + 600, "coorm_alice"))
    made = adapter(runner).reservation("beta", "coorm-9")
    assert made is not None
    assert (made.host_names, made.start) == (("beta-8",), LATER + 600)
    assert adapter(runner).reservation("alpha", "coorm-9") is None  # not on alpha's hosts
    assert adapter(runner).reservation("beta", "nothing") is None


# --- placeholders --------------------------------------------------------------------------------


def test_a_placeholder_is_made_as_its_owner_and_read_back() -> None:
    runner = OarCommands()
    made = adapter(runner).create_reservation("alpha", SPEC)
    assert (made.cluster, made.name, made.start, made.end) == ("alpha", "coorm-3", LATER,
                                                               LATER + HOUR)  # fmt: skip
    assert len(made.host_names) == 2
    (oarsub,) = runner.commands("oarsub")
    assert oarsub[:5] == ("runuser", "-u", "coorm_carol", "--", "oarsub")
    assert runner.calls[-1][:3] == ("oarstat", "-J", "--gantt")  # read back after


def test_a_smaller_placeholder_than_asked_is_deleted_and_refused() -> None:
    runner = OarCommands()
    runner.shrink = 1
    with pytest.raises(Refused, match="1 hosts instead of 2"):
        adapter(runner).create_reservation("alpha", SPEC)
    assert runner.commands("oardel") == [("runuser", "-u", "coorm_carol", "--", "oardel", "30")]
    assert "30" not in runner.gantt["jobs"]


def test_a_reservation_oar_refuses_is_refused_with_its_suggestion() -> None:
    runner = OarCommands()
    runner.refuse = command("oarsub_reservation_refused.json")
    with pytest.raises(Refused) as refused:
        adapter(runner).create_reservation("beta", SPEC)
    assert refused.value.retry_after == commands.parse_date("2026-11-24 09:49:44")
    assert not runner.commands("oardel")


@pytest.mark.parametrize(
    ("sample", "submit_as", "error"),
    [("oarsub_root_refused.json", "coormsvc", LacksRights),
     ("oarsub_reservation_limit_refused.json", "coormsvc", LacksRights),
     ("oarsub_root_refused.json", "owner", NotPermitted),
     ("oarsub_reservation_limit_refused.json", "owner", Refused)],
)  # fmt: skip
def test_admission_rules_are_the_bridges_lack_of_rights_only_for_its_own_account(
    sample: str, submit_as: str, error: type[AdapterError]
) -> None:
    """Submitted as one account for everyone, OAR's admission rules are the bridge's rights
    (an admin must act); submitted as the session's owner, they are that owner's: root's
    session ends (OAR never runs jobs as root), a capped user's waits."""
    runner = OarCommands()
    runner.refuse = command(sample)
    with pytest.raises(error) as raised:
        adapter(runner, submit_as).create_reservation("beta", SPEC)
    assert type(raised.value) is error
    assert "[ADMISSION RULE]" in str(raised.value)


def test_names_are_checked_before_any_command() -> None:
    runner = OarCommands()
    bad = ReservationSpec.model_construct(**{**dict(SPEC), "host_names": ("alpha-1", "x' OR '1")})
    with pytest.raises(AdapterError, match="invalid host name"):
        adapter(runner).create_reservation("alpha", bad)
    assert runner.calls == []


def test_deleting_a_placeholder_deletes_every_job_of_its_name_as_its_owner() -> None:
    runner = OarCommands()
    add(runner, 30, placeholder("coorm-9", ["beta-7"], LATER, "coorm_alice"))
    add(runner, 31, placeholder("coorm-9", ["beta-8"], LATER, "coorm_bob"))
    adapter(runner).delete_reservation("beta", "coorm-9")
    assert runner.commands("oardel") == [
        ("runuser", "-u", "coorm_alice", "--", "oardel", "30"),
        ("runuser", "-u", "coorm_bob", "--", "oardel", "31"),
    ]
    adapter(runner).delete_reservation("beta", "coorm-9")  # gone: idempotent
    adapter(runner).delete_reservation("beta", "never-made")
    assert len(runner.commands("oardel")) == 2


def test_a_begun_placeholder_keeps_its_start_and_may_end_later() -> None:
    runner = OarCommands()  # container_now: began at 1795502929 for 3596 s on beta-3..6
    now = adapter(runner).reservation("beta", "container_now")
    assert now is not None
    spec = ReservationSpec(name="container_now", start=now.start, end=now.end + 600,
                           host_names=now.host_names, users=("coorm_alice",))  # fmt: skip
    with pytest.raises(Refused, match="has begun"):
        adapter(runner).update_reservation("beta", spec.model_copy(update={"start": GANTT_NOW}))
    # asked of oarwalltime as the owner; OAR applies it at its next pass, so the end read back
    # right after is the old one: not held yet
    with pytest.raises(Refused, match="instead of"):
        adapter(runner).update_reservation("beta", spec)
    assert runner.commands("oarwalltime") == [
        ("runuser", "-u", "coorm_alice", "--", "oarwalltime", "18", "+0:10:00"),
    ]


# --- jobs ----------------------------------------------------------------------------------------


def job(user: str, reservation: str | None = "container_now") -> JobSpec:
    return JobSpec(name="app-1", user=user, argv=("hostname",), hosts=1, walltime=600,
                   reservation=reservation)  # fmt: skip


def test_a_job_goes_into_its_placeholder_found_by_name_as_its_user() -> None:
    runner = OarCommands()
    assert adapter(runner).submit("beta", job("coorm_bob")) == "30"
    (oarsub,) = runner.commands("oarsub")
    assert oarsub[:7] == ("runuser", "-u", "coorm_bob", "--", "oarsub", "-t", "inner=18")
    runner = OarCommands(identity="coorm_bob")
    adapter(runner).submit("beta", job("coorm_bob", "container_later"))
    assert runner.commands("oarsub")[0][:3] == ("oarsub", "-t", "inner=21")


def test_a_job_without_its_placeholder_is_not_submitted() -> None:
    runner = OarCommands()
    for missing in (job("coorm_bob", "never-made"), job("coorm_bob", None)):
        with pytest.raises(AdapterError) as raised:
            adapter(runner).submit("beta", missing)
        assert not isinstance(raised.value, Refused | Unavailable)
    runner.refuse = command("oarsub_inner_invalid_container.json")  # gone in between
    with pytest.raises(AdapterError, match="invalid container id"):
        adapter(runner).submit("beta", job("coorm_bob"))
    assert len(runner.commands("oarsub")) == 1


def full(job_id: str, **changes: Any) -> dict[str, Any]:
    return {**load("oarstat_J_f.json")["16"], "Job_Id": int(job_id), **changes}


@pytest.mark.parametrize(
    ("record", "state"),
    [
        (full("40", state="Running"), JobState.RUNNING),
        (full("40", state="Waiting"), JobState.PENDING),
        (full("40", state="Hold"), JobState.PENDING),
        (full("40", state="Launching"), JobState.RUNNING),
        (full("40", state="Terminated", exit_code=0), JobState.COMPLETED),
        (full("40", state="Terminated", exit_code=None), JobState.COMPLETED),
        (full("40", state="Terminated", exit_code=256), JobState.FAILED),  # exit 1
        (full("40", state="Error"), JobState.FAILED),
        (full("40", state="toError"), JobState.FAILED),
    ],
)
def test_job_states(record: dict[str, Any], state: JobState) -> None:
    runner = OarCommands()
    runner.full["40"] = record
    assert adapter(runner).job_state("alpha", "40") is state
    assert runner.calls == [("oarstat", "-J", "-f", "-j", "40")]


def test_the_recorded_job_on_a_suspected_node_failed() -> None:
    runner = OarCommands()
    runner.full.update(load("oarstat_J_f_job_on_suspected_node.json"))
    assert adapter(runner).job_state("alpha", "27") is JobState.FAILED


def test_a_job_oar_does_not_know_is_unknown_and_cancelled_already() -> None:
    """``oarstat -J -f -j`` of an id OAR does not have prints nothing and exits 0
    (oarstat's print_job_data: no data, no JSON)."""
    runner = OarCommands()
    assert adapter(runner).job_state("alpha", "424242") is JobState.UNKNOWN
    adapter(runner).cancel("alpha", "424242")
    assert not runner.commands("oardel")


def test_cancel_deletes_a_live_job_as_its_owner_and_leaves_a_finished_one() -> None:
    runner = OarCommands()
    adapter(runner).cancel("beta", "20")  # coorm_bob's, running
    assert runner.commands("oardel") == [("runuser", "-u", "coorm_bob", "--", "oardel", "20")]
    runner.full["16"] = full("16", state="Terminated", exit_code=0)
    adapter(runner).cancel("alpha", "16")
    assert len(runner.commands("oardel")) == 1


def test_oarstat_failing_is_unavailable() -> None:
    class Failing(OarCommands):
        def run(self, argv: Sequence[str], **kwargs: Any) -> Completed:
            return Completed(1, "", "DBI connect failed\n")

    with pytest.raises(Unavailable, match="DBI connect failed"):
        adapter(Failing()).job_state("alpha", "16")


# --- settings ------------------------------------------------------------------------------------

HEAD = '[adapter]\nkind = "oar"\n'


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ('backend = "rest"\n[[adapter.cluster]]\nname = "a"\n', "needs an [adapter.rest] table"),
        ('[[adapter.cluster]]\nname = "a"\nvalue = "x"\n[[adapter.cluster]]\nname = "x"\n',
         "select the same resources (cluster = x)"),
        ('[[adapter.cluster]]\nname = "a"\n[adapter.rest]\nurl = "http://o/oarapi"\n'
         'auth = "basic"\npassword_file = "/etc/pw"\n', "needs user and password_file"),
        ('[[adapter.cluster]]\nname = "a"\n[adapter.rest]\nurl = "http://o/oarapi"\n'
         'auth = "basic"\nuser = "coorm"\n', "needs user and password_file"),
        ('[[adapter.cluster]]\nname = "a b"\n', "name"),
        ('property = "cluster\'"\n[[adapter.cluster]]\nname = "a"\n', "property"),
    ],
)  # fmt: skip
def test_settings_a_site_gets_wrong_are_refused(toml: str, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        parse_config(HEAD + toml, source="site.toml")


def test_an_unreadable_password_file_is_a_local_problem(tmp_path: Path) -> None:
    settings = OarSettings.model_validate({
        "kind": "oar", "cluster": [{"name": "a"}],
        "rest": {"url": "http://o/oarapi", "auth": "basic", "user": "coorm",
                 "password_file": str(tmp_path / "missing")},
    })  # fmt: skip
    (problem,) = settings.local_problems()
    assert problem.startswith("rest.password_file: cannot read")


def test_the_back_end_the_settings_name() -> None:
    rest = OarSettings.model_validate(
        {"kind": "oar", "backend": "rest", "cluster": [{"name": "a"}],
         "rest": {"url": "http://o/oarapi"}}
    )  # fmt: skip
    assert isinstance(make_backend(rest), OarRestBackend)
    cli = OarSettings.model_validate(
        {"kind": "oar", "cluster": [{"name": "a"}],
         "ssh": {"host": "front", "user": "coorm"}, "submit_as": "coorm"}
    )  # fmt: skip
    backend = make_backend(cli)
    assert isinstance(backend, OarCliBackend)
    assert (backend.identity, backend.submit_as) == ("coorm", "coorm")
    with pytest.raises(ValidationError, match="rest"):
        OarSettings.model_validate({"kind": "oar", "backend": "rest", "cluster": [{"name": "a"}]})
