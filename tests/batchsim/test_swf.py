"""The SWF reader and the replay of traces as jobs, on the two archive traces kept in tests/data."""

import gzip
import shutil

import pytest

from coorm_bridge.batchsim import (
    ReplayJob,
    SwfStatus,
    parse_swf,
    read_swf,
    replay_jobs,
    synthetic_jobs,
    trace_path,
)

DATA = trace_path("nasa").parent
NASA = DATA / "NASA-iPSC-1993-3.1-cln.swf.gz"
LUBLIN = DATA / "lublin_256.swf.gz"


def record(number, submit=0, run=10, alloc=4, req_procs=-1, req_time=-1, status=1, user=7):
    """One SWF line; the fields the reader does not use are -1 or a decimal to check floats."""
    fields = [number, submit, -1, run, alloc, "12.5", "3.25", req_procs, req_time, -1, status]
    fields += [user, 1, -1, -1, -1, -1, -1]
    return " ".join(str(field) for field in fields)


def independent_node_seconds(path):
    """Node-seconds a replay must keep, computed from the raw file without the reader's code."""
    total = records = 0
    with gzip.open(path, "rt") as text:
        for line in text:
            parts = line.split()
            if not parts or parts[0].startswith(";"):
                continue
            records += 1
            submit, run, status = int(parts[1]), int(parts[3]), int(parts[10])
            procs = int(parts[4]) if int(parts[4]) != -1 else int(parts[7])
            if status in (2, 3, 4) or submit < 0 or run <= 0 or procs <= 0:
                continue
            total += run * procs
    return records, total


@pytest.fixture(scope="module")
def nasa():
    return read_swf(NASA)


def test_nasa_trace_header_and_records(nasa):
    trace = nasa
    assert len(trace.jobs) == 18239
    assert trace.max_nodes == 128
    assert trace.max_procs == 128
    assert trace.unix_start_time == 749458803
    assert trace.header["Computer"] == "Intel iPSC/860"
    # Repeated Note lines are all kept, wrapped ones joined back into one value each.
    notes = trace.header["Note"].split("\n")
    assert len(notes) == 4
    assert notes[0].endswith("the given submit times are actually start times")
    assert trace.header["Information"].split() == [
        "http://www.nas.nasa.gov/",
        "http://www.cs.huji.ac.il/labs/parallel/workload/",
    ]
    first = trace.jobs[0]
    assert (first.job_number, first.submit_time, first.run_time, first.allocated_procs) == (
        1,
        0,
        1451,
        128,
    )


@pytest.mark.parametrize(
    ("path", "records", "kept"), [(NASA, 18239, 18066), (LUBLIN, 10000, 10000)]
)
def test_replay_keeps_exactly_the_node_seconds_of_the_raw_file(path, records, kept):
    replay = replay_jobs(read_swf(path))
    raw_records, raw_node_seconds = independent_node_seconds(path)
    assert raw_records == records
    assert sum(job.runtime * job.hosts for job in replay) == raw_node_seconds
    assert len(replay) == replay.report.kept == kept
    assert replay.report.records == records
    assert replay.report.dropped == records - kept
    if path == NASA:  # 173 records with a zero run time, nothing else to skip
        assert replay.report.no_runtime == 173
        assert "no runtime 173" in str(replay.report)


def test_lublin_header():
    trace = read_swf(LUBLIN)
    assert trace.max_nodes == 256
    assert trace.max_procs is None
    assert trace.unix_start_time is None
    assert {job.status for job in trace.jobs} == {SwfStatus.COMPLETED}


def test_gzip_is_detected_by_content_not_by_name(tmp_path, nasa):
    plain = tmp_path / "trace.swf.gz"  # plain text under a gzip name
    with gzip.open(NASA, "rb") as source, plain.open("wb") as target:
        shutil.copyfileobj(source, target)
    compressed = tmp_path / "trace.swf"  # gzip under a plain name
    shutil.copyfile(NASA, compressed)
    reference = nasa
    assert plain.read_bytes()[:1] == b";"
    assert read_swf(plain) == reference
    assert read_swf(str(compressed)) == reference


def test_status_codes_and_partial_executions():
    text = "\n".join(
        [
            "; MaxNodes: 16",
            record(1, status=1),
            record(2, status=0),  # failed, but it held hosts: kept
            record(3, status=5, run=30),  # cancelled while running: kept
            record(4, status=5, run=0),  # cancelled before it ran
            record(5, status=5, alloc=0),  # cancelled, no processor ever given
            record(6, submit=5, run=100, status=1),  # summary of a checkpointed job...
            record(6, submit=5, run=60, status=2),  # ...its partial executions
            record(6, submit=5, run=40, status=3),
            record(7, submit=6, run=50, status=0),
            record(7, submit=6, run=50, status=4),
            record(8, status=-1),  # models leave the status unknown
            record(9, submit=-1),
            record(10, run=-1),
            record(11, alloc=-1, req_procs=-1),
            record(12, run=20, status=3),  # a partial line whose summary is missing
        ]
    )
    replay = replay_jobs(parse_swf(text))
    assert [job.id for job in replay] == ["1", "2", "3", "6", "7", "8"]
    assert replay[3].runtime == 100
    report = replay.report
    assert (report.records, report.kept, report.partial) == (15, 6, 3)
    assert report.partial_without_summary == 1
    assert (report.cancelled_never_ran, report.unknown_submit) == (2, 1)
    assert (report.no_runtime, report.no_processors, report.too_large) == (1, 1, 0)


def test_processors_hosts_walltime_and_user():
    text = "\n".join(
        [
            record(1, alloc=-1, req_procs=6, req_time=50),  # fallback to requested processors
            record(2, alloc=9, req_procs=2, req_time=5, run=10),  # request below the run time
            record(3, alloc=8, user=-1),  # no request known, no user known
        ]
    )
    replay = replay_jobs(parse_swf(text), procs_per_host=4)
    assert [(job.hosts, job.runtime, job.walltime) for job in replay] == [
        (2, 10, 50),
        (3, 10, 10),
        (2, 10, 10),
    ]
    assert [job.user for job in replay] == ["7", "7", "unknown"]


def test_time_scale_and_offset():
    text = "\n".join([record(1, submit=100, run=30, req_time=61), record(2, submit=301, run=1)])
    replay = replay_jobs(parse_swf(text), time_scale=0.5, offset=1_000_000)
    assert [(job.submit, job.runtime, job.walltime) for job in replay] == [
        (1_000_050, 15, 30),
        (1_000_150, 1, 1),  # never below one second
    ]
    slow = replay_jobs(parse_swf(text), time_scale=3.0)
    assert [(job.submit, job.runtime) for job in slow] == [(300, 90), (903, 3)]
    with pytest.raises(ValueError, match="time_scale"):
        replay_jobs(parse_swf(text), time_scale=0.0)


def test_too_large_jobs_dropped_or_clamped():
    text = "\n".join([record(1, alloc=4), record(2, alloc=20), record(3, alloc=8)])
    dropped = replay_jobs(parse_swf(text), max_hosts=8)
    assert [job.id for job in dropped] == ["1", "3"]
    assert (dropped.report.too_large, dropped.report.clamped) == (1, 0)
    clamped = replay_jobs(parse_swf(text), max_hosts=8, too_large="clamp")
    assert [job.hosts for job in clamped] == [4, 8, 8]
    assert (clamped.report.too_large, clamped.report.clamped, clamped.report.dropped) == (0, 1, 0)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("1 2 3", r"line 3: expected 18 fields, got 3"),
        (record(2).replace(" 10 ", " ten ", 1), r"line 3: field 4 \(run_time\) is not an integer"),
        (record(2).replace(" 10 ", " 10.5 ", 1), r"line 3: field 4 \(run_time\)"),
        (record(2).replace("12.5", "nan"), r"line 3: field 6 \(avg_cpu_time\) is not finite"),
    ],
)
def test_bad_lines_name_their_line_number(bad, message):
    with pytest.raises(ValueError, match=message):
        parse_swf("; Version: 2.2\n" + record(1) + "\n" + bad, source="bad.swf")


def test_bad_line_in_a_file_names_the_file(tmp_path):
    path = tmp_path / "broken.swf"
    path.write_text("\n".join(["; Note: x", "", record(1), "oops"]) + "\n")
    with pytest.raises(ValueError, match=r"broken\.swf, line 4: expected 18 fields, got 1"):
        read_swf(path)


def test_decimal_cpu_and_memory_fields_are_accepted():
    job = parse_swf(record(1)).jobs[0]
    assert (job.avg_cpu_time, job.used_memory) == (12.5, 3.25)


def test_synthetic_jobs_are_seeded():
    first = synthetic_jobs(42, 200, 64, 30.0, 600.0)
    assert first == synthetic_jobs(42, 200, 64, 30.0, 600.0)
    assert first != synthetic_jobs(43, 200, 64, 30.0, 600.0)
    assert len(first) == 200
    assert all(isinstance(job, ReplayJob) for job in first)
    submits = [job.submit for job in first]
    assert submits == sorted(submits)
    assert all(1 <= job.hosts <= 64 for job in first)
    assert all(job.runtime <= job.walltime <= 3 * job.runtime + 1 for job in first)
    sizes = [job.hosts for job in first]
    # Log-uniform: small jobs dominate but large ones occur.
    assert sum(size <= 8 for size in sizes) > sum(size > 8 for size in sizes)
    assert max(sizes) > 32
    assert len({job.id for job in first}) == 200
