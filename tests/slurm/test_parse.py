"""Parsers of Slurm's answers, on outputs recorded from Slurm 22.05.8 and hand-made later shapes."""

from __future__ import annotations

import copy
import gzip
import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from coorm_bridge.adapters.slurm import answers, parse
from coorm_bridge.core.batch import Job, JobState, Node, NodeState, Reservation
from coorm_bridge.core.model import MAX_DURATION

DATA = Path(__file__).parent.parent / "data" / "slurm"
NOW = 1795248800


def utc(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int:
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp())


def squeue_sample() -> dict[str, Any]:
    return json.loads((DATA / "squeue.json").read_text())


def sinfo_sample() -> dict[str, Any]:
    return json.loads((DATA / "sinfo.json").read_text())


def number(value: Any) -> dict[str, Any]:
    """A v0.0.38 number in the v0.0.39+ shape."""
    if value is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": value}


def to_v40(job: dict[str, Any]) -> dict[str, Any]:
    """A v0.0.38 job as Slurm 23.11+ prints it (the fields that changed shape)."""
    job = copy.deepcopy(job)
    for key in ("job_id", "node_count", "time_limit", "start_time", "end_time", "array_job_id"):
        job[key] = number(job[key])
    job["job_state"] = [job["job_state"]]
    return job


# --- squeue --------------------------------------------------------------------------------------


EXPECTED_SAMPLE_JOBS = [
    Job(
        id="1",
        user="root",
        state=JobState.RUNNING,
        hosts=6,
        host_names=("a01", "a02", "a03", "a04", "a05", "a06"),
        walltime=600,
        start=1795248788,
    ),
    Job(id="2", user="root", state=JobState.PENDING, hosts=4, walltime=1200, start=1795249388),
    Job(
        id="3",
        user="root",
        state=JobState.RUNNING,
        hosts=1,
        host_names=("a07",),
        walltime=300,
        start=1795248788,
    ),
]


def test_squeue_sample_gives_running_and_predicted_jobs() -> None:
    raw = (DATA / "squeue.json").read_bytes()
    assert parse.parse_squeue(raw, now=NOW) == EXPECTED_SAMPLE_JOBS
    assert parse.parse_squeue(raw.decode(), "alpha", now=NOW) == EXPECTED_SAMPLE_JOBS
    assert parse.parse_squeue(raw, "beta", now=NOW) == []


def test_squeue_later_openapi_shape_gives_the_same_jobs() -> None:
    document = squeue_sample()
    document["jobs"] = [to_v40(job) for job in document["jobs"]]
    document["meta"]["plugin"]["type"] = "openapi/slurmctld"
    assert parse.parse_squeue(json.dumps(document), now=NOW) == EXPECTED_SAMPLE_JOBS


@pytest.mark.parametrize(
    ("name", "running", "pending", "predicted"),
    [("squeue_1000.json.gz", 96, 1000, 483), ("squeue_10000.json.gz", 96, 10000, 546)],
)
def test_squeue_big_queues(name: str, running: int, pending: int, predicted: int) -> None:
    jobs = parse.parse_squeue(gzip.decompress((DATA / name).read_bytes()), now=NOW)
    by_state = {state: [j for j in jobs if j.state is state] for state in JobState}
    assert len(by_state[JobState.RUNNING]) == running
    assert len(by_state[JobState.PENDING]) == pending
    # The backfill predicts a start for some pending jobs only (see adapters/batch/estimate.py).
    assert sum(j.start is not None for j in by_state[JobState.PENDING]) == predicted
    assert all(len(j.host_names) == j.hosts for j in by_state[JobState.RUNNING])
    assert all(j.host_names == () for j in by_state[JobState.PENDING])
    assert len({j.id for j in jobs}) == len(jobs)


def test_squeue_partition_filter_on_the_big_queue() -> None:
    raw = gzip.decompress((DATA / "squeue_1000.json.gz").read_bytes())
    counts = {p: len(parse.parse_squeue(raw, p, now=NOW)) for p in ("alpha", "beta", "gamma")}
    assert counts == {"alpha": 356, "beta": 357, "gamma": 383}
    alpha = parse.parse_squeue(raw, "alpha", now=NOW)
    assert {h[0] for j in alpha for h in j.host_names} == {"a"}
    assert sum(j.hosts for j in alpha if j.state is JobState.RUNNING) == 32


def with_jobs(*changes: dict[str, Any]) -> str:
    """The sample's first (running) job, changed as given, once per change."""
    document = squeue_sample()
    base = document["jobs"][0]
    document["jobs"] = [{**base, "job_id": 100 + i, **change} for i, change in enumerate(changes)]
    return json.dumps(document)


def test_squeue_multi_partition_jobs_belong_to_each_partition() -> None:
    raw = with_jobs({"partition": "alpha,beta"}, {"partition": "gamma"})
    assert [j.id for j in parse.parse_squeue(raw, "beta", now=NOW)] == ["100"]
    assert [j.id for j in parse.parse_squeue(raw, "alpha", now=NOW)] == ["100"]
    assert [j.id for j in parse.parse_squeue(raw, "gamma", now=NOW)] == ["101"]
    assert parse.parse_squeue(raw, "alph", now=NOW) == []


def test_squeue_fields_and_edge_values() -> None:
    pending = {"job_state": "PENDING", "nodes": "", "start_time": 0}
    raw = with_jobs(
        {"resv_name": "coorm-7", "user_name": "alice"},
        {**pending, "time_limit": None},  # --time=UNLIMITED, as 22.05 prints it
        {**pending, "time_limit": 0, "node_count": 0},
        {"job_state": "COMPLETED"},
        {"job_state": "CANCELLED"},
        {"job_state": "COMPLETING"},
        {"job_state": "SUSPENDED"},
        {"start_time": 0},  # running without a start: from now
        {"job_state": "REQUEUE_HOLD", **pending, "start_time": 1795250000},
    )
    jobs = {j.id: j for j in parse.parse_squeue(raw, now=NOW)}
    assert sorted(jobs) == ["100", "101", "102", "105", "106", "107", "108"]  # finished: dropped
    assert jobs["100"].reservation == "coorm-7"
    assert jobs["100"].user == "alice"
    assert jobs["101"].walltime == parse.UNLIMITED_WALLTIME
    assert jobs["101"].start is None
    assert jobs["102"].walltime == parse.UNLIMITED_WALLTIME
    assert jobs["102"].hosts == 1
    assert jobs["105"].state is JobState.RUNNING
    assert jobs["106"].state is JobState.RUNNING
    assert jobs["107"].start == NOW
    assert jobs["108"].state is JobState.PENDING
    assert jobs["108"].start == 1795250000


def test_a_time_limit_past_ten_years_holds_the_hosts_ten_years() -> None:
    # Slurm takes limits up to NO_VAL minutes (8000 years); the model's durations stop at ten.
    raw = with_jobs({"time_limit": 0xFFFFFFFD}, {"time_limit": MAX_DURATION // 60 + 1})
    assert [j.walltime for j in parse.parse_squeue(raw, now=NOW)] == [MAX_DURATION] * 2


def test_squeue_later_shape_edge_values() -> None:
    document = squeue_sample()
    job = to_v40(document["jobs"][1])  # pending
    infinite = {"set": False, "infinite": True, "number": 0}
    document["jobs"] = [
        {**job, "job_id": number(7), "time_limit": infinite, "start_time": number(0)},
        {**job, "job_id": number(8), "job_state": ["PENDING", "REQUEUED"]},
        {**to_v40(document["jobs"][0]), "job_id": number(9), "job_state": ["COMPLETED"]},
        {**to_v40(document["jobs"][0]), "job_id": number(10),
         "job_state": ["COMPLETED", "COMPLETING"]},
    ]  # fmt: skip
    jobs = {j.id: j for j in parse.parse_squeue(json.dumps(document), now=NOW)}
    assert sorted(jobs) == ["10", "7", "8"]
    assert jobs["7"].walltime == parse.UNLIMITED_WALLTIME
    assert jobs["7"].start is None
    assert jobs["8"].state is JobState.PENDING
    assert jobs["8"].start == 1795249388
    assert jobs["10"].state is JobState.RUNNING


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not json", "unreadable"),
        ('{"errors": [], "meta": {}}', "no 'jobs'"),
        ('{"errors": [{"error": "Unable to contact"}], "jobs": []}', "Unable to contact"),
        ('{"jobs": [1]}', "unreadable"),
        (with_jobs({"nodes": "a[01-"}), "bad host list"),
        (with_jobs({"nodes": "a01;rm"}), "not a valid name"),
        (with_jobs({"node_count": "many"}), "not a number"),
    ],
)
def test_squeue_refuses_nonsense(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse.parse_squeue(raw, now=NOW)


@pytest.mark.parametrize(
    ("value", "state"),
    [
        ("PENDING", JobState.PENDING),
        ("RUNNING", JobState.RUNNING),
        ("CONFIGURING", JobState.RUNNING),
        ("COMPLETING", JobState.RUNNING),
        ("SUSPENDED", JobState.RUNNING),
        ("STOPPED", JobState.RUNNING),
        ("REQUEUED", JobState.PENDING),
        ("RESV_DEL_HOLD", JobState.PENDING),
        ("COMPLETED", JobState.COMPLETED),
        ("CANCELLED", JobState.CANCELLED),
        ("FAILED", JobState.FAILED),
        ("TIMEOUT", JobState.FAILED),
        ("NODE_FAIL", JobState.FAILED),
        ("OUT_OF_MEMORY", JobState.FAILED),
        ("PREEMPTED", JobState.FAILED),
        ("WHATEVER", JobState.UNKNOWN),
        ("", JobState.UNKNOWN),
        ("running\n", JobState.RUNNING),
        ("CLUSTER: coorm\nPENDING\n", JobState.PENDING),
        (["COMPLETED", "COMPLETING"], JobState.RUNNING),
        (["PENDING", "REQUEUED"], JobState.PENDING),
        (["FAILED"], JobState.FAILED),
        ([], JobState.UNKNOWN),
        (None, JobState.UNKNOWN),
    ],
)
def test_job_state_mapping(value: Any, state: JobState) -> None:
    assert parse.job_state_of(value) is state


# --- sinfo ---------------------------------------------------------------------------------------


def test_sinfo_sample_nodes_and_partitions() -> None:
    raw = (DATA / "sinfo.json").read_bytes()
    nodes = parse.parse_sinfo(raw)
    assert len(nodes) == 24
    assert all(n.state is NodeState.UP for n in nodes)  # allocated and idle are up
    beta = parse.parse_sinfo(raw.decode(), "beta")
    assert beta == [Node(name=f"b0{i}") for i in range(1, 9)]
    assert parse.parse_sinfo(raw, "nosuch") == []


@pytest.mark.parametrize(
    ("state", "flags", "expected"),
    [
        ("idle", [], NodeState.UP),
        ("allocated", [], NodeState.UP),
        ("mixed", ["COMPLETING"], NodeState.UP),
        ("idle", ["MAINTENANCE"], NodeState.UP),
        ("idle", ["RESERVED"], NodeState.UP),
        ("idle", ["POWERED_DOWN"], NodeState.UP),
        ("idle", ["DRAIN"], NodeState.DRAINED),  # drained
        ("allocated", ["DRAIN"], NodeState.DRAINED),  # draining
        ("mixed", ["DRAIN", "COMPLETING"], NodeState.DRAINED),
        ("down", ["DRAIN"], NodeState.DRAINED),  # sinfo shows "drain" too
        ("down", [], NodeState.DOWN),
        ("down", ["NOT_RESPONDING"], NodeState.DOWN),
        ("idle", ["NOT_RESPONDING"], NodeState.DOWN),
        ("unknown", [], NodeState.DOWN),
        ("future", [], NodeState.DOWN),
        ("error", [], NodeState.DOWN),
        ("idle", ["FAIL"], NodeState.DRAINED),
        (["IDLE", "DRAIN"], [], NodeState.DRAINED),
        (["DOWN", "NOT_RESPONDING"], [], NodeState.DOWN),
        (["MIXED", "PLANNED"], [], NodeState.UP),
        ("DOWN+DRAIN", [], NodeState.DRAINED),
        ("IDLE+MAINT", [], NodeState.UP),
        ("idle*", [], NodeState.DOWN),
        ("idle~", [], NodeState.UP),
        ("drng", [], NodeState.DRAINED),
    ],
)
def test_node_state_mapping(state: Any, flags: list[str], expected: NodeState) -> None:
    assert parse.node_state_of(state, flags) is expected


def test_sinfo_22_05_states() -> None:
    document = sinfo_sample()
    nodes = document["nodes"]
    nodes[0].update(state="idle", state_flags=["DRAIN"])
    nodes[1].update(state="down", state_flags=["NOT_RESPONDING"])
    nodes[2].update(state="allocated", state_flags=["DRAIN"])
    states = {n.name: n.state for n in parse.parse_sinfo(json.dumps(document), "alpha")}
    assert states["a01"] is NodeState.DRAINED
    assert states["a02"] is NodeState.DOWN
    assert states["a03"] is NodeState.DRAINED
    assert states["a04"] is NodeState.UP


def sinfo_record(partition: str, names: list[str], state: list[str]) -> dict[str, Any]:
    """One record of ``sinfo --json`` as Slurm 23.11+ prints it (the fields read)."""
    return {
        "port": 6818,
        "cluster": "coorm",
        "partition": {"name": partition, "nodes": {"configured": "x", "total": 8}},
        "node": {"state": state},
        "nodes": {"allocated": 0, "idle": len(names), "other": 0, "total": len(names),
                  "hostnames": [], "addresses": [], "nodes": names},
        "cpus": {"per_node": {"max": {"set": False, "infinite": True, "number": 0}}},
    }  # fmt: skip


def test_sinfo_later_shape() -> None:
    document = {
        "sinfo": [
            sinfo_record("alpha", ["a01", "a02"], ["IDLE"]),
            sinfo_record("alpha", ["a03"], ["IDLE", "DRAIN"]),
            sinfo_record("alpha", ["a04"], ["DOWN", "NOT_RESPONDING"]),
            sinfo_record("beta", ["b01"], ["MIXED"]),
            sinfo_record("both", ["a01", "b01"], ["IDLE"]),
        ],
        "errors": [],
        "warnings": [],
        "meta": {},
    }
    raw = json.dumps(document)
    assert parse.parse_sinfo(raw, "alpha") == [
        Node(name="a01"),
        Node(name="a02"),
        Node(name="a03", state=NodeState.DRAINED),
        Node(name="a04", state=NodeState.DOWN),
    ]
    assert [n.name for n in parse.parse_sinfo(raw)] == ["a01", "a02", "a03", "a04", "b01"]
    assert [n.name for n in parse.parse_sinfo(raw, "both")] == ["a01", "b01"]


@pytest.mark.parametrize(
    "raw",
    ["", "[]", '{"meta": {}}', '{"nodes": [{"name": "bad name", "state": "idle"}]}',
     '{"errors": [{"description": "boom"}], "nodes": []}'],
)  # fmt: skip
def test_sinfo_refuses_nonsense(raw: str) -> None:
    with pytest.raises(ValueError, match="sinfo"):
        parse.parse_sinfo(raw)


# --- scontrol show reservation -------------------------------------------------------------------

#: Recorded from the running Slurm 22.05.8 (``scontrol -o show reservation``).
LIVE = """\
ReservationName=hlp-r1 StartTime=2026-11-21T10:15:04 EndTime=2026-11-21T11:15:04 Duration=01:00:00 Nodes=b[01-02] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=beta Flags= TRES=cpu=4 Users=root,nobody Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=hlp-r2 StartTime=2026-11-21T10:15:04 EndTime=2026-11-21T11:15:04 Duration=01:00:00 Nodes=c[01,03] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES TRES=cpu=4 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=hlp-r3 StartTime=2026-11-21T10:15:04 EndTime=2026-11-21T11:15:04 Duration=01:00:00 Nodes=a08,b08 NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=(null) Flags=SPEC_NODES TRES=cpu=4 Users=-nobody Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
"""  # noqa: E501

#: The same first reservation without -o (scontrol's multi-line layout).
LIVE_LONG = """\
ReservationName=hlp-r1 StartTime=2026-11-21T10:15:04 EndTime=2026-11-21T11:15:04 Duration=01:00:00
   Nodes=b[01-02] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=beta Flags=
   TRES=cpu=4
   Users=root,nobody Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a
   MaxStartDelay=(null)

"""  # noqa: E501

START, END = utc(2026, 11, 21, 10, 15, 4), utc(2026, 11, 21, 11, 15, 4)
R1 = Reservation(name="hlp-r1", start=START, end=END, hosts=2, host_names=("b01", "b02"),
                 users=("root", "nobody"))  # fmt: skip
R2 = Reservation(name="hlp-r2", start=START, end=END, hosts=2, host_names=("c01", "c03"),
                 users=("root",))  # fmt: skip
R3 = Reservation(name="hlp-r3", start=START, end=END, hosts=2, host_names=("a08", "b08"))


def test_reservations_sample() -> None:
    text = (DATA / "scontrol_show_reservation.txt").read_text()
    assert parse.parse_reservations(text) == [
        Reservation(
            name="coorm-test-alpha",
            start=utc(2026, 11, 21, 9, 13, 7),
            end=utc(2026, 11, 21, 9, 43, 7),
            hosts=2,
            host_names=("a01", "a02"),
            users=("root",),
        ),
        Reservation(
            name="big",
            start=utc(2026, 11, 21, 10, 13, 30),
            end=utc(2026, 11, 21, 10, 43, 30),
            hosts=8,
            host_names=tuple(f"a0{i}" for i in range(1, 9)),
            users=("root",),
        ),
    ]
    assert parse.parse_reservations(text, "beta", nodes={"b01"}) == []


def test_reservations_live_lines_and_layouts() -> None:
    assert parse.parse_reservations(LIVE) == [R1, R2, R3]  # excluded users ("-nobody"): none
    assert parse.parse_reservations(LIVE_LONG) == [R1]
    assert parse.parse_reservations("No reservations in the system\n") == []
    assert parse.parse_reservations("") == []


def test_reservations_partition_filter() -> None:
    def names(partition: str, nodes: set[str] | None) -> list[str]:
        return [r.name for r in parse.parse_reservations(LIVE, partition, nodes=nodes)]

    gamma = {f"c0{i}" for i in range(1, 9)}
    beta = {f"b0{i}" for i in range(1, 9)}
    assert names("gamma", gamma) == ["hlp-r2"]  # by nodes, no PartitionName
    assert names("beta", beta) == ["hlp-r1", "hlp-r3"]  # by PartitionName, and by b08
    assert names("beta", None) == ["hlp-r1"]
    assert names("alpha", {"a01"}) == []


def test_reservation_times_are_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert parse.parse_reservations(LIVE)[0].start == START
        assert parse.parse_time("1970-01-01T00:00:00") == 0
    finally:
        monkeypatch.undo()
        time.tzset()


def test_reservations_odd_records() -> None:
    licenses_only = LIVE.splitlines()[0].replace("Nodes=b[01-02] NodeCnt=2", "Nodes= NodeCnt=0")
    assert parse.parse_reservations(licenses_only) == []
    no_count = LIVE.splitlines()[0].replace(" NodeCnt=2", "")
    assert parse.parse_reservations(no_count) == [R1]
    odd_name = LIVE.splitlines()[0].replace("hlp-r1", "lab@night")
    assert parse.parse_reservations(odd_name)[0].name == "xlab_night"
    with pytest.raises(ValueError, match="not a scontrol time"):
        parse.parse_reservations(LIVE.splitlines()[0].replace("T10:15:04", " 10:15"))


# --- errors and one-line answers -----------------------------------------------------------------


def test_every_recorded_error_is_classified() -> None:
    expected = ["overlap", "busy", "invalid_time", "invalid_user", "busy", "busy", "in_use",
                "no_such_reservation"]  # fmt: skip
    messages = []
    for line in (DATA / "errors.txt").read_text().splitlines():
        if line.startswith("#") or "exit 0" in line or line.startswith("On success"):
            continue
        found = re.search(r":\s{2,}(\S.*)$", line)
        messages.append(found.group(1) if found else line.strip())
    assert [answers.classify_error(m) for m in messages] == expected


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("squeue: error: Unable to contact slurm controller (connect failure)", "unreachable"),
        ("scontrol: error: 'coorm' can't be reached now, or it is an invalid entry", "unreachable"),
        ("slurm_load_jobs error: Socket timed out on send/recv operation", "unreachable"),
        ("slurm_load_jobs error: Invalid job id specified", "no_such_job"),
        ("Reservation nope not found", "no_such_reservation"),
        ("sbatch: error: Batch job submission failed: Requested reservation is invalid",
         "no_such_reservation"),
        ("Start time cannot be after end time.  No reservation created.", "invalid_time"),
        ("Error creating the reservation: Required node not available (down, drained or reserved)",
         "busy"),
        ("Error creating the reservation: Duplicate reservation name", "other"),
        ("", "other"),
    ],
)  # fmt: skip
def test_classify_error(message: str, kind: str) -> None:
    assert answers.classify_error(message) == kind


def test_one_line_answers() -> None:
    assert answers.parse_created_name("Reservation created: big\n") == "big"
    assert answers.parse_created_name("") is None
    assert answers.parse_job_id("1234\n") == "1234"
    assert answers.parse_job_id("45;coorm\n") == "45"
    assert answers.parse_job_id("sbatch: warning: x\n46\n") == "46"
    with pytest.raises(ValueError, match="no job id"):
        answers.parse_job_id("Submitted batch job 12")


JOB_LINE = (
    "JobId=17 JobName=ocean UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 "
    "Account=(null) QOS=(null) JobState={state} Reason=None Dependency=(null) Requeue=1 "
    "Restarts=0 BatchFlag=1 Reboot=0 ExitCode={exit} RunTime=00:00:01 TimeLimit=00:02:00 "
    "TimeMin=N/A SubmitTime=2026-11-21T09:13:05 EligibleTime=2026-11-21T09:13:05 "
    "StartTime={start} EndTime=2026-11-21T09:13:08 Partition=alpha "
    "NodeList=alpha[01-02] Command=(null) WorkDir=/tmp/run dir"
)


@pytest.mark.parametrize(
    ("state", "exit", "expected"),
    [
        ("COMPLETED", "0:0", (JobState.COMPLETED, 0)),
        ("FAILED", "3:0", (JobState.FAILED, 3)),
        ("CANCELLED", "0:15", (JobState.CANCELLED, 143)),
        ("RUNNING", "0:0", (JobState.RUNNING, None)),
    ],
)
def test_parse_job(state: str, exit: str, expected: tuple[JobState, int | None]) -> None:
    line = JOB_LINE.format(state=state, exit=exit, start="2026-11-21T09:13:07")
    record = answers.parse_job(f"CLUSTER: c1\n{line}\n")
    assert (record.state, record.exit_code) == expected
    assert record.start == utc(2026, 11, 21, 9, 13, 7)


def test_parse_job_pending_and_garbage() -> None:
    line = JOB_LINE.format(state="PENDING", exit="0:0", start="Unknown")
    assert answers.parse_job(line) == (JobState.PENDING, None, None)
    with pytest.raises(ValueError, match="no job"):
        answers.parse_job("slurm_load_jobs error: Invalid job id specified")


def test_node_address() -> None:
    line = (
        "NodeName=alpha01 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 "
        "NodeAddr=localhost NodeHostName=localhost Port=7901 Version=22.05.8 OS=Linux"
    )
    assert answers.node_address(line + "\n") == "localhost"
    assert answers.node_address(line.replace("localhost", "10.0.0.7", 1)) == "10.0.0.7"
    assert answers.node_address("Node alpha99 not found") is None
    assert answers.node_address(line.replace("NodeAddr=localhost", "NodeAddr=a;b")) is None
