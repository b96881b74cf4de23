"""OAR's argument vectors and what its answers say: exact commands, names checked before anything
is built, dates in UTC (commands) or in the REST server's zone, refusals sorted as recorded from
OAR 2.5.9 (tests/data/oar/)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.adapters.batch.runner import Completed
from coorm_bridge.adapters.oar import commands
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.adapters.oar.cli_backend import OarCliBackend
from coorm_bridge.core.batch import JobSpec, ReservationSpec
from tests.oar.samples import ALPHA, Recorded, http, said
from tests.profiles import fewer

START = int(datetime(2026, 11, 21, 9, 13, 7, tzinfo=UTC).timestamp())
SPEC = ReservationSpec(name="coorm-p1", start=START, end=START + 1800, hosts=2, users=("alice",))
ON_HOSTS = ReservationSpec(
    name="coorm-p2",
    start=START,
    end=START + 5400,
    host_names=("alpha-3", "alpha-1"),
    users=("alice",),
)
JOB = JobSpec(
    name="app-1",
    user="bob",
    argv=("/bin/echo", "hello world", "$HOME"),
    hosts=2,
    walltime=3601,
    reservation="coorm-p1",
    workdir="/home/bob/run dir",
    environment={"OMP_NUM_THREADS": "4", "LIST": "a b,c"},
)


def utc(*fields: int) -> int:
    return int(datetime(*fields, tzinfo=UTC).timestamp())  # type: ignore[misc]


# --- argument vectors ----------------------------------------------------------------------------


def test_a_placeholder_is_a_container_reservation_of_whole_hosts() -> None:
    assert commands.create_reservation(ALPHA, SPEC, None) == (
        "oarsub", "-r", "2026-11-21 09:13:07", "-t", "container", "-t", "noop",
        "-n", "coorm-p1", "-d", "/tmp", "-p", "cluster='alpha'", "-l", "/host=2,walltime=0:30:00",
        f"coorm-placeholder start={START}",  # its start as asked, read back once it has begun
    )  # fmt: skip


def test_named_hosts_are_selected_by_the_host_property() -> None:
    binding = OarBinding("big", property="site", value="nancy", host_property="node")
    assert commands.create_reservation(binding, ON_HOSTS, None)[-5:-1] == (
        "-p", "site='nancy' AND node IN ('alpha-1','alpha-3')",
        "-l", "/node=2,walltime=1:30:00",
    )  # fmt: skip


def test_runuser_only_for_another_user() -> None:
    assert commands.as_user(None) == ()
    assert commands.create_reservation(ALPHA, SPEC, "alice")[:5] == (
        "runuser", "-u", "alice", "--", "oarsub",
    )  # fmt: skip
    assert commands.delete_job("14", None) == ("oardel", "14")
    assert commands.delete_job("14", "bob") == ("runuser", "-u", "bob", "--", "oardel", "14")


def placeholder_argv(identity: str, submit_as: str, users: tuple[str, ...]) -> tuple[str, ...]:
    """What the command back-end runs to hold a placeholder for ``users``."""
    runner = Recorded({"oarsub": Completed(0, "OAR_JOB_ID=31\n", "")})
    backend = OarCliBackend(runner, identity=identity, submit_as=submit_as)
    spec = SPEC.model_copy(update={"users": users})
    assert backend.submit_reservation(ALPHA, spec) == "31"
    (argv,) = runner.calls
    return argv


def test_the_back_end_runs_commands_as_the_owner_only_when_it_is_not_already() -> None:
    assert placeholder_argv("alice", "owner", ("alice", "bob"))[0] == "oarsub"
    as_alice = placeholder_argv("root", "owner", ("alice", "bob"))
    assert as_alice[:5] == ("runuser", "-u", "alice", "--", "oarsub")
    assert placeholder_argv("root", "coorm", ("alice",))[:4] == ("runuser", "-u", "coorm", "--")
    assert placeholder_argv("coorm", "coorm", ("alice",))[0] == "oarsub"


def test_an_inner_job_goes_into_its_container_as_its_user() -> None:
    argv = commands.submit_inner(ALPHA, JOB, "18", "bob")
    assert argv[:-1] == (
        "runuser", "-u", "bob", "--", "oarsub", "-t", "inner=18", "-n", "app-1",
        "-d", "/home/bob/run dir", "-p", "cluster='alpha'", "-l", "/host=2,walltime=1:00:01",
    )  # fmt: skip
    assert argv[-1] == "env OMP_NUM_THREADS=4 'LIST=a b,c' /bin/echo 'hello world' '$HOME'"
    plain = JobSpec(name="j", user="bob", argv=("true",), hosts=1, walltime=60)
    assert commands.submit_inner(ALPHA, plain, "18", None) == (
        "oarsub", "-t", "inner=18", "-n", "j", "-d", "/tmp", "-p", "cluster='alpha'",
        "-l", "/host=1,walltime=0:01:00", "true",
    )  # fmt: skip


ECHO = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('V')]))"
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


def run_as_oar_does(command: str) -> subprocess.CompletedProcess[str]:
    """The job's command run the way oarexec runs it on the first host: ``bash -c COMMAND``."""
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)


@settings(max_examples=fewer(40))  # each example runs the job as OAR would: subprocesses
@given(args=st.lists(TEXT, max_size=4), value=TEXT)
def test_the_argument_vector_and_environment_reach_the_job_intact(
    args: list[str], value: str
) -> None:
    job = JobSpec(name="j", user="u", argv=(sys.executable, "-c", ECHO, *args), hosts=1,
                  walltime=60, environment={"V": value})  # fmt: skip
    command = commands.submit_inner(ALPHA, job, "18", None)[-1]
    done = run_as_oar_does(command)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [args, value]


def run_script(script: str) -> subprocess.CompletedProcess[str]:
    """A job's script (REST) run as a file, as oarexec runs the API's copy of it."""
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)


@settings(max_examples=fewer(40))  # each example runs the job as OAR would: subprocesses
@given(args=st.lists(TEXT, max_size=4), value=TEXT)
def test_the_job_script_runs_the_argument_vector_with_its_environment(
    args: list[str], value: str
) -> None:
    job = JobSpec(name="j", user="u", argv=(sys.executable, "-c", ECHO, *args), hosts=1,
                  walltime=60, environment={"V": value})  # fmt: skip
    script = commands.job_script(job)
    assert script.startswith("#!/bin/sh\n")
    done = run_script(script)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [args, value]


def test_a_first_word_with_equals_is_a_command_not_an_assignment() -> None:
    for environment in ({}, {"V": "1"}):
        job = JobSpec(name="j", user="u", argv=("X=1", "true"), hosts=1, walltime=60,
                      environment=environment)  # fmt: skip
        assert run_script(commands.job_script(job)).returncode == 127
        if environment:  # env would take it for one more variable: refused, never run wrong
            with pytest.raises(ValueError, match="env"):
                commands.submit_inner(ALPHA, job, "18", None)
            continue
        done = run_as_oar_does(commands.submit_inner(ALPHA, job, "18", None)[-1])
        assert done.returncode == 127, done  # "X=1: command not found", not X=1 set for true


@pytest.mark.parametrize("name", ["a.b", "a-b", "1X"])
def test_an_environment_variable_the_shell_cannot_set_is_refused(name: str) -> None:
    job = JobSpec(name="j", user="u", argv=("true",), hosts=1, walltime=60,
                  environment={name: "x"})  # fmt: skip
    with pytest.raises(ValueError, match="environment variable name"):
        commands.submit_inner(ALPHA, job, "18", None)
    with pytest.raises(ValueError, match="environment variable name"):
        commands.job_script(job)


@pytest.mark.parametrize(
    "folder", ["run", "/home/bob/run dir", "/tmp/$HOME", "/a/../etc", "/a;b", "/a`id`", "/a\nb"]
)
def test_a_working_folder_the_apis_shell_would_read_is_refused(folder: str) -> None:
    with pytest.raises(ValueError, match="invalid working folder"):
        commands.check_folder(folder)
    assert commands.check_folder("/home/bob@example.org/run-1.2_x+y") == (
        "/home/bob@example.org/run-1.2_x+y"
    )


def test_gantt_dates_are_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/St_Johns")
    time.tzset()
    try:
        assert commands.gantt(START, START + 86400) == (
            "oarstat", "-J", "--gantt", "2026-11-21 09:13:07, 2026-11-22 09:13:07",
        )  # fmt: skip
        assert commands.create_reservation(ALPHA, SPEC, None)[2] == "2026-11-21 09:13:07"
        assert commands.ENV == {"TZ": "UTC"}  # and OAR's commands are run in UTC
    finally:
        monkeypatch.undo()
        time.tzset()


def test_reading_commands() -> None:
    assert commands.nodes() == ("oarnodes", "-J")
    assert commands.current_jobs() == ("oarstat", "-J")
    assert commands.show_job("2") == ("oarstat", "-J", "-f", "-j", "2")


def test_walltime_changes() -> None:
    assert commands.change_walltime("18", 600, None) == ("oarwalltime", "18", "+0:10:00")
    assert commands.change_walltime("18", -90, "alice") == (
        "runuser", "-u", "alice", "--", "oarwalltime", "18", "-0:01:30",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(1, "0:00:01"), (59, "0:00:59"), (60, "0:01:00"), (3599, "0:59:59"), (3600, "1:00:00"),
     (90061, "25:01:01"), (10 * 86400, "240:00:00")],
)  # fmt: skip
def test_walltime_is_hours_minutes_seconds(seconds: int, shown: str) -> None:
    assert commands.walltime(seconds) == shown


@pytest.mark.parametrize("seconds", [0, -1])
def test_a_walltime_is_at_least_a_second(seconds: int) -> None:
    with pytest.raises(ValueError, match="walltime"):
        commands.walltime(seconds)


# --- names ---------------------------------------------------------------------------------------

#: Letters and digits: valid anywhere (names, users, property values).
SAFE = "abcXYZ019"
#: Quotes, spaces, commas, semicolons, parentheses and shell metacharacters: valid nowhere.
BAD = "'\" ,;()|&<>`$\\*?!{}[]~#=\n\t/"
BAD_TEXT = st.builds(
    "".join,
    st.tuples(st.text(SAFE, max_size=4), st.sampled_from(BAD), st.text(SAFE + BAD, max_size=4),
              st.text(SAFE, min_size=1, max_size=2)),
)  # fmt: skip


def builders(bad: str) -> dict[str, Callable[[], object]]:
    """Every way a name reaches a command or an SQL expression, with ``bad`` in it."""
    spec = ReservationSpec.model_construct(**{**dict(SPEC), "name": bad})
    on_hosts = ReservationSpec.model_construct(**{**dict(ON_HOSTS), "host_names": ("alpha-1", bad)})
    job = JobSpec.model_construct(**{**dict(JOB), "name": bad})
    bindings = {
        "property": OarBinding("c", property=bad, value="alpha"),
        "cluster value": OarBinding("c", value=bad),
        "host property": OarBinding("c", value="alpha", host_property=bad),
    }
    cases: dict[str, Callable[[], object]] = {
        "reservation name": lambda: commands.create_reservation(ALPHA, spec, None),
        "host name": lambda: commands.create_reservation(ALPHA, on_hosts, None),
        "job name": lambda: commands.submit_inner(ALPHA, job, "18", None),
        "user (reservation)": lambda: commands.create_reservation(ALPHA, SPEC, bad),
        "user (job)": lambda: commands.submit_inner(ALPHA, JOB, "18", bad),
        "user (oardel)": lambda: commands.delete_job("18", bad),
        "user (oarwalltime)": lambda: commands.change_walltime("18", 60, bad),
        "container": lambda: commands.submit_inner(ALPHA, JOB, bad, None),
        "job id (oardel)": lambda: commands.delete_job(bad, None),
        "job id (oarstat)": lambda: commands.show_job(bad),
        "job id (oarwalltime)": lambda: commands.change_walltime(bad, 60, None),
    }
    for what, b in bindings.items():
        cases[f"{what} (reservation)"] = partial(commands.create_reservation, b, ON_HOSTS, None)
        cases[f"{what} (job)"] = partial(commands.submit_inner, b, JOB, "18", None)
    return cases


@pytest.mark.parametrize("what", list(builders("x")))
@given(bad=BAD_TEXT)
def test_no_name_smuggles_a_quote_or_a_shell_character(what: str, bad: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        builders(bad)[what]()


@pytest.mark.parametrize("job_id", ["", "-1", "1 2", "1,2", "12;rm", "1\n", "a1", "١٢", "1" * 19])
def test_job_ids_are_digits(job_id: str) -> None:
    with pytest.raises(ValueError, match="job id"):
        commands.check_job_id(job_id)


def test_valid_names_pass_as_they_are() -> None:
    binding = OarBinding("c", property="cluster_2", value="alpha.v2-x", host_property="host")
    spec = ReservationSpec(name="coorm.s-1_a", start=START, end=START + 60,
                           host_names=("n-1.example",), users=("alice@example.org",))  # fmt: skip
    argv = commands.create_reservation(binding, spec, "alice@example.org")
    assert argv[2] == "alice@example.org"
    assert "coorm.s-1_a" in argv
    assert "cluster_2='alpha.v2-x' AND host IN ('n-1.example')" in argv


# --- dates ---------------------------------------------------------------------------------------


def test_dates_in_utc() -> None:
    assert commands.format_date(START) == "2026-11-21 09:13:07"
    assert commands.format_date(0) == "1970-01-01 00:00:00"
    assert commands.parse_date("2026-11-21 09:13:07") == START


def test_dates_in_a_zone_with_summer_time() -> None:
    paris = "Europe/Paris"
    # 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00 UTC
    assert commands.format_date(utc(2026, 3, 29, 0, 30, 0), paris) == "2026-03-29 01:30:00"
    assert commands.format_date(utc(2026, 3, 29, 1, 30, 0), paris) == "2026-03-29 03:30:00"
    assert commands.parse_date("2026-03-29 01:30:00", paris) == utc(2026, 3, 29, 0, 30, 0)
    assert commands.parse_date("2026-03-29 03:30:00", paris) == utc(2026, 3, 29, 1, 30, 0)
    assert commands.parse_date("2026-07-01 12:00:00", paris) == utc(2026, 7, 1, 10, 0, 0)
    assert commands.parse_date("2026-11-21 07:06:23", paris) == utc(2026, 11, 21, 6, 6, 23)


@given(
    moment=st.integers(0, 2**33),
    zone=st.sampled_from(["UTC", "Europe/Paris", "America/St_Johns", "Asia/Kolkata"]),
)
def test_dates_round_trip(moment: int, zone: str) -> None:
    shown = commands.format_date(moment, zone)
    back = commands.parse_date(shown, zone)
    # the same wall-clock time; an hour earlier only in the hour a zone's clocks repeat
    assert commands.format_date(back, zone) == shown
    local = datetime.fromtimestamp(moment, ZoneInfo(zone))
    assert back == moment or (local.fold == 1 and back == moment - 3600)


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_dates_are_whole_seconds(bad: object) -> None:
    with pytest.raises(ValueError, match="invalid time"):
        commands.format_date(bad)  # type: ignore[arg-type]


# --- answers -------------------------------------------------------------------------------------


def test_the_job_id_oarsub_printed() -> None:
    assert commands.created_job_id(said("oarsub_batch.json")[1]) == "15"
    assert commands.created_job_id(said("oarsub_container_reservation_now.json")[1]) == "18"
    assert commands.created_job_id(said("oarsub_inner_same_user.json")[1]) == "19"
    assert commands.created_job_id(said("oarsub_inner_other_user.json")[1]) == "20"
    assert commands.created_job_id(said("oarsub_reservation_accepted.json")[1]) == "21"
    for nothing in ("", "Reservation valid --> OK\n", "OAR_JOB_ID=\n", "OAR_JOB_ID=1x\n"):
        with pytest.raises(ValueError, match="OAR_JOB_ID"):
            commands.created_job_id(nothing)


def test_a_refused_reservation_carries_when_it_could_run() -> None:
    status, output = said("oarsub_reservation_refused.json")
    assert status == 10
    failure = commands.refusal(status, output)
    assert failure.kind == "overlap"
    assert failure.retry_after == utc(2026, 11, 24, 9, 49, 44)
    assert "Reservation not valid" in str(failure)
    # OAR prints the time in its own zone: a server in Paris means an hour earlier in UTC
    paris = commands.refusal(status, output, "Europe/Paris")
    assert paris.retry_after == utc(2026, 11, 24, 8, 49, 44)
    without = commands.refusal(10, "Reservation not valid --> KO\n")
    assert (without.kind, without.retry_after) == ("overlap", None)


@pytest.mark.parametrize(
    ("sample", "kind", "remedy"),
    [
        ("oarsub_root_refused.json", "no_rights", "submit_as"),
        ("oarsub_reservation_limit_refused.json", "no_rights", "unlimited_reservation.users"),
        ("oarsub_inner_invalid_container.json", "no_such_reservation", "invalid container id"),
        ("oardel_unknown_job.json", "no_such_job", "not the right user"),
        ("oardel_not_owner.json", "no_such_job", "not the right user"),
        # being killed already (a move's old container deleted again): deleted, for the bridge
        ("oardel_already_killed.json", "no_such_job", "already killed"),
    ],
)
def test_recorded_refusals_are_sorted(sample: str, kind: str, remedy: str) -> None:
    status, output = said(sample)
    failure = commands.refusal(status, output)
    assert failure.kind == kind
    assert failure.retry_after is None
    assert output.strip().splitlines()[-1] in str(failure)  # OAR's own words are kept
    assert remedy in str(failure)


def test_a_site_rules_refusal_is_final_and_says_the_rules_words() -> None:
    status, output = said("oarsub_site_rule_refused.json")
    failure = commands.refusal(status, output)
    assert failure.kind == "invalid_user"  # the same request would be refused again
    assert str(failure) == (
        "OAR's admission rules refused it: "
        "[ADMISSION RULE] coorm_alice may not ask for more than 1:00:00 of walltime"
    )
    # the REST API's message: the same words, every line before them, the command after
    message = json.loads(http("rest_post_site_rule_500.txt").body)["message"]
    assert str(commands.refusal(500, message)) == str(failure)
    # another exit status is not an admission rule's
    assert commands.refusal(1, output).kind == "other"
    assert str(commands.refusal(254, "\n")).endswith("exit status 254")


def test_anything_else_is_another_failure() -> None:
    failure = commands.refusal(3, "[OAR] something nobody recorded\n")
    assert (failure.kind, str(failure)) == ("other", "[OAR] something nobody recorded")
    assert str(commands.refusal(5, "\n")) == "exit status 5"
    assert len(str(commands.refusal(1, "x" * 5000))) == 600
