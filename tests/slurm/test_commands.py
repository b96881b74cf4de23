"""Command builders: exact argument vectors, validated names, UTC times, safe job scripts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.adapters.slurm import commands, parse
from coorm_bridge.adapters.slurm.commands import Target
from coorm_bridge.core.batch import JobSpec, ReservationSpec
from coorm_bridge.core.model import NAME_PATTERN, USER_NAME_PATTERN
from tests.profiles import fewer

#: Usable user names (USER_NAME_PATTERN), built rather than drawn from the pattern's lookaheads.
USER_NAMES = st.builds(
    "".join,
    st.tuples(
        st.sampled_from("aZ9_"),
        st.text("aZ09_.@-", max_size=20),
        st.sampled_from(["", "$"]),
    ),
).filter(USER_NAME_PATTERN.fullmatch)

START = int(datetime(2026, 11, 21, 9, 13, 7, tzinfo=UTC).timestamp())
END = START + 1800
SPEC = ReservationSpec(name="coorm-p1", start=START, end=END, hosts=2, users=("alice", "bob"))
ON_HOSTS = ReservationSpec(
    name="coorm-p2", start=START, end=END, host_names=("a01", "a02"), users=("alice",)
)


def test_env_and_targets() -> None:
    assert commands.ENV == {"TZ": "UTC"}
    assert Target().clusters() == ()
    assert Target(cluster="c1", partition="alpha").clusters() == ("-M", "c1")
    assert Target(cluster="c1", partition="alpha").partitions() == ("-p", "alpha")
    for bad in ("", "a b", "a,b", "a=b", "-M", "a;b", "$(x)", "x" * 64):
        with pytest.raises(ValueError, match="cluster name"):
            Target(cluster=bad)
        with pytest.raises(ValueError, match="partition name"):
            Target(partition=bad)


def test_reading_commands() -> None:
    both = Target(cluster="c1", partition="alpha")
    assert commands.squeue_json(Target()) == ("squeue", "--json")
    assert commands.squeue_json(both) == ("squeue", "--json", "-M", "c1", "-p", "alpha")
    assert commands.sinfo_json(Target(partition="beta")) == ("sinfo", "--json", "-p", "beta")
    assert commands.show_reservations(Target()) == ("scontrol", "-o", "show", "reservation")
    assert commands.show_reservations(both) == (
        "scontrol", "-M", "c1", "-o", "show", "reservation",
    )  # fmt: skip
    assert commands.job_state(both, "42") == (
        "squeue", "-M", "c1", "-h", "-t", "all", "-j", "42", "-o", "%T",
    )  # fmt: skip
    assert commands.scancel(Target(), "42_3") == ("scancel", "42_3")
    assert commands.scancel(both, "42") == ("scancel", "-M", "c1", "42")


@pytest.mark.parametrize("job_id", ["", "-1", "1_", "_1", "1 2", "1,2", "12;rm", "1\n", "a1", "١٢"])
def test_job_ids_are_checked(job_id: str) -> None:
    with pytest.raises(ValueError, match="invalid job id"):
        commands.scancel(Target(), job_id)
    with pytest.raises(ValueError, match="invalid job id"):
        commands.job_state(Target(), job_id)


def test_reservation_commands() -> None:
    assert commands.create_reservation(Target(partition="alpha"), SPEC) == (
        "scontrol", "create", "reservation", "reservationname=coorm-p1",
        "starttime=2026-11-21T09:13:07", "endtime=2026-11-21T09:43:07", "nodecnt=2",
        "users=alice,bob", "partitionname=alpha",
    )  # fmt: skip
    assert commands.create_reservation(Target(cluster="c1"), ON_HOSTS) == (
        "scontrol", "-M", "c1", "create", "reservation", "reservationname=coorm-p2",
        "starttime=2026-11-21T09:13:07", "endtime=2026-11-21T09:43:07", "nodes=a01,a02",
        "users=alice",
    )  # fmt: skip
    assert commands.update_reservation(Target(partition="alpha"), SPEC) == (
        "scontrol", "update", "reservationname=coorm-p1", "starttime=2026-11-21T09:13:07",
        "endtime=2026-11-21T09:43:07", "nodecnt=2", "users=alice,bob",
    )  # fmt: skip
    assert commands.delete_reservation(Target(cluster="c1"), "coorm-p1") == (
        "scontrol", "-M", "c1", "delete", "reservationname=coorm-p1",
    )  # fmt: skip


def test_reservation_specs_are_checked_again() -> None:
    """Specs built without validation (model_construct) are still refused."""
    for bad in (
        {"name": "a b"},
        {"users": ("alice", "x=y")},
        {"users": ()},
        {"host_names": ("a01", "a02 nodes=ALL")},
        {"hosts": 0},
        {"hosts": True},
        {"end": START},
        {"start": -1},
    ):
        spec = ReservationSpec.model_construct(**{**dict(SPEC), **bad})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"invalid|at least|after|time"):
            commands.create_reservation(Target(), spec)
    with pytest.raises(ValueError, match="reservation name"):
        commands.delete_reservation(Target(), "x y")


def test_times_are_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/St_Johns")
    time.tzset()
    try:
        assert commands.format_time(START) == "2026-11-21T09:13:07"
        assert commands.format_time(0) == "1970-01-01T00:00:00"
        assert "starttime=2026-11-21T09:13:07" in commands.create_reservation(Target(), SPEC)
    finally:
        monkeypatch.undo()
        time.tzset()


def as_shown(argv: tuple[str, ...]) -> str:
    """The line ``scontrol -o show reservation`` prints for what ``argv`` created."""
    tokens = dict(arg.split("=", 1) for arg in argv if "=" in arg)
    nodes = tokens.get("nodes", ",".join(f"z{i}" for i in range(int(tokens.get("nodecnt", 0)))))
    return (
        f"ReservationName={tokens['reservationname']} StartTime={tokens['starttime']} "
        f"EndTime={tokens['endtime']} Duration=00:30:00 Nodes={nodes} "
        f"NodeCnt={len(nodes.split(','))} CoreCnt=4 Features=(null) "
        f"PartitionName={tokens.get('partitionname', '(null)')} Flags= TRES=cpu=4 "
        f"Users={tokens['users']} Groups=(null) State=INACTIVE"
    )


@given(
    start=st.integers(0, 2**35),
    length=st.integers(1, 10**8),
    hosts=st.integers(1, 500),
    users=st.lists(USER_NAMES, min_size=1, max_size=4),
)
def test_times_round_trip_with_the_parser(start: int, length: int, hosts: int,
                                          users: list[str]) -> None:  # fmt: skip
    spec = ReservationSpec(name="rt", start=start, end=start + length, hosts=hosts,
                           users=tuple(users))  # fmt: skip
    (shown,) = parse.parse_reservations(as_shown(commands.create_reservation(Target(), spec)))
    assert (shown.start, shown.end, shown.hosts, shown.users) == (
        spec.start, spec.end, spec.hosts, spec.users,
    )  # fmt: skip


TIME = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}$")
SAFE_ARG = re.compile(r"^[A-Za-z0-9_.,=:-]+$")
#: Users may add '@' and a final '$' (as in ``alice@example.org``, ``HOST$``), nothing else.
SAFE_USERS = re.compile(r"^users=[A-Za-z0-9_.,@$-]+$")


def assert_safe(argv: tuple[str, ...]) -> None:
    """No argument carries a space, a shell metacharacter, or a second ``=`` or stray ``,``."""
    for arg in argv:
        assert SAFE_ARG.fullmatch(arg) or SAFE_USERS.fullmatch(arg), arg
        if "=" not in arg:
            assert "," not in arg
            continue
        key, value = arg.split("=", 1)
        assert key in {"reservationname", "starttime", "endtime", "nodecnt", "nodes", "users",
                       "partitionname"}, arg  # fmt: skip
        assert "=" not in value
        if key in ("starttime", "endtime"):
            assert TIME.fullmatch(value)
        elif key == "nodecnt":
            assert value.isdigit()
        elif key == "users":
            users = value.split(",")
            assert all(USER_NAME_PATTERN.fullmatch(u) and not u.startswith("-") for u in users)
            assert all("$" not in u[:-1] and not u.isdigit() for u in users), arg
        else:
            parts = value.split(",") if key == "nodes" else [value]
            assert all(NAME_PATTERN.fullmatch(part) for part in parts), arg


ANY_TEXT = (
    st.text(max_size=12)
    | st.from_regex(NAME_PATTERN, fullmatch=True)
    | USER_NAMES
    | st.text("ab1-_.@$=, ;`'\"\\", min_size=1, max_size=8)
)


@given(
    name=ANY_TEXT,
    users=st.lists(ANY_TEXT, min_size=1, max_size=3),
    host_names=st.lists(ANY_TEXT, max_size=3),
    partition=ANY_TEXT,
    cluster=ANY_TEXT,
    job_id=ANY_TEXT,
)
def test_no_argument_smuggles_anything(
    name: str, users: list[str], host_names: list[str], partition: str, cluster: str, job_id: str
) -> None:
    spec = ReservationSpec.model_construct(
        name=name, start=START, end=END, hosts=len(host_names) or 1,
        host_names=tuple(host_names), users=tuple(users),
    )  # fmt: skip
    try:
        target = Target(cluster=cluster, partition=partition)
    except ValueError:
        assert not (NAME_PATTERN.fullmatch(cluster) and NAME_PATTERN.fullmatch(partition))
        target = Target()
    for build in (commands.create_reservation, commands.update_reservation):
        try:
            argv = build(target, spec)
        except ValueError:
            names = [name, *host_names]
            assert not (
                all(NAME_PATTERN.fullmatch(n) for n in names)
                and all(USER_NAME_PATTERN.fullmatch(u) for u in users)
            )
        else:
            assert_safe(argv)
    for build_name in (commands.delete_reservation,):
        try:
            assert_safe(build_name(target, name))
        except ValueError:
            assert not NAME_PATTERN.fullmatch(name)
    try:
        assert_safe(commands.scancel(target, job_id) + commands.job_state(target, job_id)[:-2])
    except ValueError:
        assert not re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id)


# --- sbatch --------------------------------------------------------------------------------------

JOB = JobSpec(
    name="app-1",
    user="alice",
    argv=("/bin/echo", "hello world", "$HOME"),
    hosts=2,
    walltime=3601,
    reservation="coorm-p1",
    workdir="/tmp/run dir",
    environment={"OMP_NUM_THREADS": "4", "LIST": "a,b"},
)


def test_sbatch_argv() -> None:
    assert commands.sbatch(Target(cluster="c1", partition="alpha"), JOB) == (
        "sbatch", "--parsable", "--job-name=app-1", "--nodes=2", "--time=61",
        "--reservation=coorm-p1", "--chdir=/tmp/run dir", "-M", "c1", "-p", "alpha",
        "--wrap=export LIST=a,b\nexport OMP_NUM_THREADS=4\n/bin/echo 'hello world' '$HOME'",
    )  # fmt: skip
    plain = JobSpec(name="j", user="u", argv=("true",), hosts=1, walltime=60)
    assert commands.sbatch(Target(), plain) == (
        "sbatch", "--parsable", "--job-name=j", "--nodes=1", "--time=1", "--wrap=true",
    )  # fmt: skip


def test_sbatch_on_named_hosts_with_output_files() -> None:
    job = JobSpec(name="ocean", user="u", argv=("true",), hosts=2, walltime=120)
    argv = commands.sbatch(
        Target(partition="alpha"),
        job,
        nodelist=("alpha01", "alpha02"),
        output="/runs/s1/alpha.out",
        error="/runs/s1/alpha.err",
    )
    assert argv[:-1] == (
        "sbatch", "--parsable", "--job-name=ocean", "--nodes=2", "--time=2",
        "--nodelist=alpha01,alpha02", "--output=/runs/s1/alpha.out",
        "--error=/runs/s1/alpha.err", "-p", "alpha",
    )  # fmt: skip
    for hosts in (("alpha01",), ("alpha01", "alpha01"), ("alpha01", "a b")):
        with pytest.raises(ValueError, match="host"):
            commands.sbatch(Target(), job, nodelist=hosts)
    for bad in ("", "/runs/a\nb"):
        with pytest.raises(ValueError, match="output"):
            commands.sbatch(Target(), job, output=bad)


def test_show_job() -> None:
    assert commands.show_job(Target(cluster="c1"), "42") == (
        "scontrol", "-M", "c1", "-o", "show", "job", "42",
    )  # fmt: skip
    with pytest.raises(ValueError, match="job id"):
        commands.show_job(Target(), "42;rm")
    assert commands.show_node(Target(), "alpha01") == (
        "scontrol", "-o", "show", "node", "alpha01",
    )  # fmt: skip
    with pytest.raises(ValueError, match="host name"):
        commands.show_node(Target(), "-a")


@pytest.mark.parametrize(("walltime", "minutes"), [(1, 1), (59, 1), (60, 1), (61, 2), (7200, 120)])
def test_sbatch_time_is_whole_minutes_rounded_up(walltime: int, minutes: int) -> None:
    job = JobSpec(name="j", user="u", argv=("true",), hosts=1, walltime=walltime)
    assert f"--time={minutes}" in commands.sbatch(Target(), job)


def test_sbatch_refuses_bad_input() -> None:
    for bad in ("a.b", "1X", "A-B", "A B"):
        job = JobSpec.model_construct(**{**dict(JOB), "environment": {bad: "x"}})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="environment variable name"):
            commands.sbatch(Target(), job)
    for field, value in (
        ("name", "a b"),
        ("reservation", "r;x"),
        ("workdir", "/tmp/a\nb"),
        ("workdir", ""),
        ("hosts", 0),
        ("walltime", 0),
        ("argv", ()),
        ("argv", ("a\x00b",)),
    ):
        job = JobSpec.model_construct(**{**dict(JOB), field: value})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"invalid|host|walltime|argument"):
            commands.sbatch(Target(), job)


def run_wrapped(job: JobSpec) -> subprocess.CompletedProcess[str]:
    """The --wrap script run by /bin/sh, as sbatch's script would be."""
    (script,) = [a.removeprefix("--wrap=") for a in commands.sbatch(Target(), job)
                 if a.startswith("--wrap=")]  # fmt: skip
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=False)


ECHO = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('V')]))"
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


@settings(max_examples=fewer(40))  # each example runs the wrapped command: a subprocess
@given(args=st.lists(TEXT, max_size=4), value=TEXT)
def test_wrapped_argv_and_environment_arrive_intact(args: list[str], value: str) -> None:
    job = JobSpec(name="j", user="u", argv=(sys.executable, "-c", ECHO, *args), hosts=1,
                  walltime=60, environment={"V": value})  # fmt: skip
    done = run_wrapped(job)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [args, value]


def test_a_first_word_with_equals_is_a_command_not_an_assignment() -> None:
    job = JobSpec(name="j", user="u", argv=("X=1", "true"), hosts=1, walltime=60)
    assert run_wrapped(job).returncode == 127  # "X=1: not found", not "X=1 true"


def test_a_begun_reservation_is_updated_without_its_start():
    spec = ReservationSpec(name="coorm-x", start=100, end=700, hosts=2, users=("alice",))
    argv = commands.update_reservation(commands.Target(), spec, begun=True)
    assert not any(word.startswith("starttime=") for word in argv)
    assert "endtime=1970-01-01T00:11:40" in argv
    assert any(
        w.startswith("starttime=") for w in commands.update_reservation(commands.Target(), spec)
    )
