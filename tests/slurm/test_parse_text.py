"""Text parsers of the snapshot (``squeue -h -o``, ``sinfo -h -N -o``) on outputs recorded from
Slurm 22.05.8 (tests/data/slurm/text/), checked against the JSON the same Slurm printed at the
same moment and read by the JSON parsers (the semantics to keep)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from coorm_bridge.adapters.slurm import commands, parse
from coorm_bridge.adapters.slurm.parse_text import (
    SINFO_FORMAT,
    SQUEUE_FORMAT,
    jobs_in,
    nodes_in,
    parse_sinfo_text,
    parse_squeue_text,
    walltime_text,
)
from coorm_bridge.core.batch import Job, JobState, NodeState
from coorm_bridge.core.model import MAX_DURATION

TEXT = Path(__file__).parent.parent / "data" / "slurm" / "text"
#: When the partition samples were recorded (alpha and beta, 8 nodes each; see the module doc).
NOW = int((TEXT / "recorded_at").read_text())
UNLIMITED = parse.UNLIMITED_WALLTIME


def text(name: str) -> str:
    return (TEXT / name).read_text()


def squeue_jobs(partition: str | None = None) -> dict[str, Job]:
    lines = parse_squeue_text(text("squeue_partitions.txt"), now=NOW)
    return {job.id: job for job in jobs_in(lines, partition)}


def json_jobs(partition: str | None = None) -> dict[str, Job]:
    raw = gzip.decompress((TEXT / "squeue_partitions.json.gz").read_bytes())
    return {job.id: job for job in parse.parse_squeue(raw, partition, now=NOW)}


# --- squeue --------------------------------------------------------------------------------------


def test_the_formats_are_what_the_commands_ask_for() -> None:
    squeue = commands.squeue_text(commands.Target(cluster="beta"))
    assert squeue[:3] == ("squeue", "-M", "beta")
    assert {"-a", "-h", "-r"} <= set(squeue)
    assert squeue[-2:] == ("-o", SQUEUE_FORMAT)
    assert "-p" not in squeue  # one answer for every partition
    sinfo = commands.sinfo_text(commands.Target())
    assert sinfo == ("sinfo", "-a", "-h", "-N", "-o", SINFO_FORMAT)


@pytest.mark.parametrize("partition", [None, "alpha", "beta"])
def test_squeue_text_agrees_with_squeue_json_but_for_arrays(partition: str | None) -> None:
    """Job arrays aside (below), the text path sees the jobs the JSON path sees, the same."""
    by_text, by_json = squeue_jobs(partition), json_jobs(partition)
    assert len(by_text) > 5
    plain = {i for i in by_text if "_" not in i}
    assert plain == {i for i, job in by_json.items() if i != "6" and i not in {"10", "11", "12"}}
    for job_id in plain:
        assert by_text[job_id] == by_json[job_id], job_id


def test_squeue_text_fields_and_odd_values() -> None:
    jobs = squeue_jobs()
    # Running, a start of its own, a hostlist of three.
    assert jobs["1"].state is JobState.RUNNING
    assert jobs["1"].host_names == ("alpha01", "alpha02", "alpha03")
    assert (jobs["1"].walltime, jobs["1"].user) == (30 * 60, "root")
    assert jobs["2"].walltime == 86400  # 1-00:00:00
    assert jobs["15"].walltime == (5 * 24 + 12) * 3600 + 30 * 60  # 5-12:30:00
    assert jobs["7"].walltime == 9000  # 2:30:00
    # --time=UNLIMITED, or no --time in a partition with MaxTime=INFINITE
    assert jobs["3"].walltime == jobs["4"].walltime == UNLIMITED
    # Pending: a prediction (job 4 a year out, behind the unlimited job 3), or N/A.
    assert jobs["4"].start == jobs["3"].start + 365 * 86400
    assert jobs["5"].start is None
    assert jobs["9"].start is None
    assert all(j.host_names == () for j in jobs.values() if j.state is JobState.PENDING)
    # (null) is no reservation; a job inside one names it.
    assert jobs["9"].reservation == "r1"
    assert jobs["1"].reservation is None
    assert jobs["5"].hosts == 8


def test_a_pending_job_of_several_partitions_is_in_each() -> None:
    assert "5" in squeue_jobs("alpha")
    assert "5" in squeue_jobs("beta")
    assert set(squeue_jobs("alpha")).isdisjoint(set(squeue_jobs("beta")) - {"5"})
    assert squeue_jobs("alph") == {}


def test_array_tasks_are_jobs_and_only_the_next_pending_one_has_the_predicted_start() -> None:
    jobs = squeue_jobs("alpha")
    running = [f"6_{i}" for i in range(3)]
    pending = [f"6_{i}" for i in range(3, 10)]
    assert all(jobs[i].state is JobState.RUNNING for i in running)
    assert [jobs[i].host_names for i in running] == [("alpha06",), ("alpha07",), ("alpha08",)]
    assert all(jobs[i].state is JobState.PENDING and jobs[i].hosts == 1 for i in pending)
    # The JSON shows the pending tasks as one record, planned once (for its next task).
    record = json_jobs()["6"]
    assert jobs["6_3"].start == record.start is not None
    assert all(jobs[i].start is None for i in pending[1:])
    assert {jobs[i].walltime for i in running + pending} == {45 * 60}


def test_squeue_keeps_queue_order() -> None:
    """squeue sorts by priority (the order the adapter plans unplanned jobs in): the held job
    (priority 0) comes last."""
    assert list(squeue_jobs())[-1] == "14"


def test_a_ten_thousand_job_queue() -> None:
    """Recorded by benchmarks/slurm_snapshot.py --e2e: 8 jobs running on the 16 nodes, 8,092
    pending ones submitted one by one, 19 arrays of 100 pending tasks, 525 jobs in both
    partitions; the backfill had predicted 3,013 starts, 1,089 of them array tasks' copies of
    their record's."""
    raw = gzip.decompress((TEXT / "squeue_10000.txt.gz").read_bytes()).decode()
    lines = parse_squeue_text(raw, now=NOW)
    jobs = jobs_in(lines)
    assert len({j.id for j in jobs}) == len(jobs) == 10_000
    running = [j for j in jobs if j.state is JobState.RUNNING]
    assert len(running) == 8
    assert sorted(h for j in running for h in j.host_names) == sorted(
        [f"alpha0{i}" for i in range(1, 9)] + [f"beta0{i}" for i in range(1, 9)]
    )
    pending = [j for j in jobs if j.state is JobState.PENDING]
    assert sum(j.start is not None for j in pending) == 3013 - 1089
    assert sum("_" in j.id for j in pending) == 1900
    assert sum(j.walltime == UNLIMITED for j in pending) == 1176 - 2  # two of them run
    both = len(jobs_in(lines, "alpha")) + len(jobs_in(lines, "beta")) - len(jobs)
    assert both == 525


def test_the_cluster_line_of_dash_m_is_skipped() -> None:
    """22.05 prints ``CLUSTER: beta`` with -M unless -h is given (recorded both ways)."""
    plain = jobs_in(parse_squeue_text(text("squeue_M_beta.txt"), now=NOW))
    header = text("squeue_M_beta_with_headers.txt").splitlines()[0]
    assert header == "CLUSTER: beta"
    with_header = jobs_in(parse_squeue_text(f"{header}\n{text('squeue_M_beta.txt')}", now=NOW))
    assert with_header == plain
    assert [(j.id, j.state, j.hosts) for j in plain] == [
        ("2000000", JobState.RUNNING, 2),
        ("2000001", JobState.PENDING, 4),
    ]
    nodes = nodes_in(parse_sinfo_text(text("sinfo_M_beta_with_headers.txt").replace(
        "NODELIST|PARTITION|STATE\n", "")))  # fmt: skip
    assert nodes == nodes_in(parse_sinfo_text(text("sinfo_M_beta.txt")))
    assert [n.name for n in nodes] == ["beta01", "beta02", "beta03", "beta04"]


def line(
    job_id: str = "7",
    state: str = "PENDING",
    count: str = "2",
    start: str = "N/A",
    limit: str = "30:00",
    partition: str = "beta",
    nodes: str = "",
    reservation: str = "(null)",
) -> str:
    return "|".join((job_id, job_id, state, count, start, limit, partition, nodes, "bob",
                     reservation))  # fmt: skip


def test_finished_states_are_dropped_and_others_mapped() -> None:
    text = "\n".join([
        line("1", "COMPLETED"), line("2", "CANCELLED"), line("3", "COMPLETING", nodes="b1"),
        line("4", "REQUEUE_HOLD"), line("5", "RUNNING", start="N/A", nodes="b[1-2]"),
        line("6", "CONFIGURING", nodes="b3"), line("7", "PENDING", count="0"),
    ])  # fmt: skip
    jobs = {j.id: j for j in jobs_in(parse_squeue_text(text, now=NOW))}
    assert sorted(jobs) == ["3", "4", "5", "6", "7"]
    assert jobs["3"].state is jobs["6"].state is JobState.RUNNING
    assert jobs["4"].state is JobState.PENDING
    assert jobs["5"].start == NOW  # running without a start: from now
    assert jobs["7"].hosts == 1


def test_a_reservation_name_with_a_separator_stays_whole() -> None:
    (job,) = jobs_in(parse_squeue_text(line(reservation="odd|name"), now=NOW))
    assert job.reservation == "xodd_name"  # as the JSON path makes names valid


def test_an_unreadable_line_fails_only_the_partitions_it_names() -> None:
    text = "\n".join([line("1", partition="alpha"), line("2", nodes="b[1-", partition="beta")])
    lines = parse_squeue_text(text, now=NOW)
    assert [j.id for j in jobs_in(lines, "alpha")] == ["1"]
    with pytest.raises(ValueError, match=re.escape("squeue: job 2: job 2: bad host list")):
        jobs_in(lines, "beta")
    with pytest.raises(ValueError, match="bad host list"):
        jobs_in(lines)
    garbled = parse_squeue_text(line("1", partition="alpha") + "\nsqueue: error: x", now=NOW)
    with pytest.raises(ValueError, match="not 10 fields"):
        jobs_in(garbled, "alpha")  # whose it is cannot be told: everybody's


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ({"count": "2-4"}, "node count"),
        ({"start": "tomorrow"}, "not a squeue time"),
        ({"limit": "1:2:3:4"}, "not a time limit"),
        ({"nodes": "b01;rm"}, "not a valid name"),
        ({"state": "RUNNING", "start": "N/A", "limit": "x"}, "not a time limit"),
    ],
)
def test_squeue_text_refuses_nonsense(field: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        jobs_in(parse_squeue_text(line(**field), now=NOW))


@pytest.mark.parametrize(
    ("limit", "seconds"),
    [
        ("30:00", 1800),
        ("0:30", 60),  # whole minutes, as Slurm keeps limits
        ("2:30:00", 9000),
        ("1-00:00:00", 86400),
        ("10", 600),
        ("UNLIMITED", UNLIMITED),
        ("INFINITE", UNLIMITED),
        ("NOT_SET", UNLIMITED),
        ("0:00", UNLIMITED),  # 0 is no limit, as time_limit 0 in the JSON
        ("5000-00:00:00", MAX_DURATION),
    ],
)
def test_time_limits(limit: str, seconds: int) -> None:
    assert walltime_text(limit) == seconds


@pytest.mark.parametrize("limit", ["abc", "1:2:3:4", "x-1:00:00", "-5", "1:-2"])
def test_time_limits_refused(limit: str) -> None:
    with pytest.raises(ValueError, match="not a time limit"):
        walltime_text(limit)


# --- sinfo ---------------------------------------------------------------------------------------


def test_sinfo_text_agrees_with_sinfo_json() -> None:
    lines = parse_sinfo_text(text("sinfo_partitions.txt"))
    raw = gzip.decompress((TEXT / "sinfo_partitions.json.gz").read_bytes())
    for partition in (None, "alpha", "beta"):
        assert nodes_in(lines, partition) == parse.parse_sinfo(raw, partition)
    assert len(nodes_in(lines, "alpha")) == len(nodes_in(lines, "beta")) == 8


def test_sinfo_text_states_with_their_suffixes() -> None:
    states = {n.name: n.state for n in nodes_in(parse_sinfo_text(text("sinfo_partitions.txt")))}
    assert states["alpha07"] is NodeState.DRAINED  # failing
    assert states["alpha08"] is NodeState.DRAINED  # draining (a job still runs)
    assert states["beta05"] is NodeState.DRAINED  # drained
    assert states["beta07"] is NodeState.DOWN  # down*: its slurmd was killed
    assert states["beta03"] is NodeState.UP  # maint: its reservation is counted apart
    assert states["beta04"] is states["alpha01"] is NodeState.UP  # idle, allocated
    more = "a1|p|idle*\na2|p|idle~\na3|p|down~\na4|p|mixed\na5|p|drained*\na6|p|planned"
    assert [n.state.value for n in nodes_in(parse_sinfo_text(more))] == [
        "down", "up", "down", "up", "drained", "up"
    ]  # fmt: skip


def test_a_node_in_two_partitions_is_in_each_once() -> None:
    lines = parse_sinfo_text("a1|p|idle\na1|q|idle\na2|q|down")
    assert [n.name for n in nodes_in(lines, "p")] == ["a1"]
    assert [n.name for n in nodes_in(lines, "q")] == ["a1", "a2"]
    assert [n.name for n in nodes_in(lines)] == ["a1", "a2"]


def test_sinfo_text_refuses_nonsense() -> None:
    lines = parse_sinfo_text("a1|p|idle\na;2|q|idle\nsinfo: error")
    with pytest.raises(ValueError, match="not a valid name"):
        nodes_in(lines, "q")
    with pytest.raises(ValueError, match="not 3 fields"):
        nodes_in(lines, "p")
