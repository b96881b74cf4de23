"""Standard Workload Format (Parallel Workloads Archive, version 2.2) traces as replayable jobs.

The mock platform replays real logs so that the bridge is measured against realistic background
load. :func:`read_swf` keeps every record of the file as it is (:class:`SwfTrace`);
:func:`replay_jobs` decides what a replay can use and says in a :class:`ReplayReport` what it
skipped and why, so that a benchmark never silently loses part of its load.
:func:`synthetic_jobs` gives seeded load when no trace fits.
"""

from __future__ import annotations

import gzip
import math
import random
import re
from collections import Counter
from collections.abc import Iterable
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from coorm_bridge.core.model import MAX_DURATION, MAX_TIME, Frozen, Name, Time

_GZIP_MAGIC = b"\x1f\x8b"
#: ``; Key: value``; a key indented further is the continuation of the previous value instead.
_HEADER = re.compile(r"^;\s{0,2}([A-Za-z][A-Za-z0-9_]*)\s*:\s*(.*?)\s*$")


class SwfStatus(IntEnum):
    """Field 11 (-1 when unknown, e.g. in models).

    A checkpointed or swapped job has one summary line (0, 1 or 5) for the whole job plus one
    line per partial execution (2, 3 or 4) with the same job number.
    """

    FAILED = 0
    COMPLETED = 1
    PARTIAL_CONTINUED = 2
    PARTIAL_LAST_COMPLETED = 3
    PARTIAL_LAST_FAILED = 4
    CANCELLED = 5


PARTIAL_STATUSES = frozenset(
    {SwfStatus.PARTIAL_CONTINUED, SwfStatus.PARTIAL_LAST_COMPLETED, SwfStatus.PARTIAL_LAST_FAILED}
)


class SwfJob(Frozen):
    """One record of the file, values as written (-1 means unknown)."""

    job_number: int
    submit_time: int
    wait_time: int
    run_time: int
    allocated_procs: int
    avg_cpu_time: float
    used_memory: float
    requested_procs: int
    requested_time: int
    requested_memory: float
    status: int
    user_id: int
    group_id: int
    executable: int
    queue: int
    partition: int
    preceding_job: int
    think_time: int

    @property
    def procs(self) -> int:
        """Allocated processors, or the requested ones when the log did not record allocation."""
        return self.allocated_procs if self.allocated_procs != -1 else self.requested_procs


#: The 18 fields of a record, in file order; the float ones may carry decimals in some archives.
FIELDS: tuple[str, ...] = tuple(SwfJob.model_fields)
_FLOAT_FIELDS = frozenset(k for k, v in SwfJob.model_fields.items() if v.annotation is float)


class SwfTrace(Frozen):
    """A whole file: header fields (repeated keys joined by newlines) and every record."""

    header: dict[str, str] = Field(default_factory=dict)
    jobs: tuple[SwfJob, ...] = ()

    def _header_int(self, key: str) -> int | None:
        value = self.header.get(key, "").split()
        return int(value[0]) if value and value[0].lstrip("-").isdigit() else None

    @property
    def max_nodes(self) -> int | None:
        return self._header_int("MaxNodes")

    @property
    def max_procs(self) -> int | None:
        return self._header_int("MaxProcs")

    @property
    def unix_start_time(self) -> int | None:
        """The Unix time that submit time 0 stands for, when the log says."""
        return self._header_int("UnixStartTime")


def _parse_record(fields: list[str], where: str) -> SwfJob:
    if len(fields) != len(FIELDS):
        raise ValueError(f"{where}: expected {len(FIELDS)} fields, got {len(fields)}")
    values: dict[str, int | float] = {}
    for index, (name, text) in enumerate(zip(FIELDS, fields, strict=True), start=1):
        try:
            value: int | float = float(text) if name in _FLOAT_FIELDS else int(text)
        except ValueError:
            kind = "a number" if name in _FLOAT_FIELDS else "an integer"
            raise ValueError(f"{where}: field {index} ({name}) is not {kind}: {text!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"{where}: field {index} ({name}) is not finite: {text!r}")
        values[name] = value
    return SwfJob.model_validate(values)


def parse_swf(lines: str | Iterable[str], *, source: str = "<swf>") -> SwfTrace:
    """Parse SWF text; a malformed record raises ValueError naming ``source`` and its line."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    header: dict[str, str] = {}
    last_key: str | None = None
    jobs: list[SwfJob] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(";"):
            match = _HEADER.match(line)
            text = line[1:].strip()
            if match:
                last_key, value = match.groups()
                header[last_key] = f"{header[last_key]}\n{value}" if last_key in header else value
            elif text and last_key is not None:
                header[last_key] = f"{header[last_key]} {text}".strip()
            else:
                last_key = None  # a bare ';' ends a wrapped value
            continue
        jobs.append(_parse_record(line.split(), f"{source}, line {number}"))
    return SwfTrace(header=header, jobs=tuple(jobs))


def read_swf(path: str | Path) -> SwfTrace:
    """Read a plain or gzip-compressed SWF file; gzip is recognised by content, not by name."""
    path = Path(path)
    with path.open("rb") as probe:
        compressed = probe.read(2) == _GZIP_MAGIC
    if compressed:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as text:
            return parse_swf(text, source=str(path))
    with path.open(encoding="utf-8", errors="replace") as text:
        return parse_swf(text, source=str(path))


class ReplayJob(Frozen):
    """A job the mock platform submits at ``submit`` and that holds ``hosts`` for ``runtime``."""

    id: str = Field(min_length=1, max_length=64)
    user: Name
    submit: Time
    hosts: Annotated[int, Field(ge=1, strict=True)]
    runtime: Annotated[int, Field(ge=1, strict=True)]
    walltime: Annotated[int, Field(ge=1, strict=True)]

    @model_validator(mode="after")
    def _walltime_bounds_runtime(self) -> Self:
        if self.walltime < self.runtime:
            raise ValueError(f"job {self.id}: walltime {self.walltime} < runtime {self.runtime}")
        return self


class ReplayReport(Frozen):
    """How many records a replay read, kept and skipped, by reason (each record counted once)."""

    records: int = 0
    kept: int = 0
    partial: int = 0  # partial-execution lines: their job's summary line stands for them
    partial_without_summary: int = 0  # partial lines of a job whose summary line is missing
    cancelled_never_ran: int = 0
    unknown_submit: int = 0
    no_runtime: int = 0  # unknown, or 0 (ran under half a second)
    no_processors: int = 0
    too_large: int = 0  # dropped with too_large="drop"
    clamped: int = 0  # kept, but shrunk to max_hosts with too_large="clamp"
    out_of_range: int = 0  # arriving after year 9999, or running longer than ten years

    @property
    def dropped(self) -> int:
        return self.records - self.kept

    def __str__(self) -> str:
        reasons = {k: v for k, v in self.model_dump().items() if v and k not in ("records", "kept")}
        detail = ", ".join(f"{key.replace('_', ' ')} {count}" for key, count in reasons.items())
        return f"kept {self.kept} of {self.records} records" + (f" ({detail})" if detail else "")


class Replay(list[ReplayJob]):
    """The jobs of a replay, with the :class:`ReplayReport` of what was skipped."""

    def __init__(self, jobs: Iterable[ReplayJob], report: ReplayReport) -> None:
        super().__init__(jobs)
        self.report = report


def _skip_reason(job: SwfJob, summarized: set[int]) -> str | None:
    if job.status in PARTIAL_STATUSES:
        return "partial" if job.job_number in summarized else "partial_without_summary"
    if job.status == SwfStatus.CANCELLED and (job.run_time <= 0 or job.procs <= 0):
        return "cancelled_never_ran"
    if job.submit_time < 0:
        return "unknown_submit"
    if job.run_time <= 0:
        return "no_runtime"
    if job.procs <= 0:
        return "no_processors"
    return None


def replay_jobs(
    trace: SwfTrace,
    *,
    procs_per_host: int = 1,
    time_scale: float = 1.0,
    offset: int = 0,
    max_hosts: int | None = None,
    too_large: Literal["drop", "clamp"] = "drop",
) -> Replay:
    """Turn a trace into jobs for a cluster of ``max_hosts`` hosts of ``procs_per_host`` each.

    Submit, run and requested times are multiplied by ``time_scale`` (rounded, runtimes at least
    1 s) and ``offset`` is added to submit times, e.g. to start the replay at a Unix time. Failed
    and cancelled jobs that ran are kept: they occupied hosts all the same.
    """
    if procs_per_host < 1:
        raise ValueError(f"procs_per_host must be >= 1, got {procs_per_host}")
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time_scale must be a positive number, got {time_scale}")
    if max_hosts is not None and max_hosts < 1:
        raise ValueError(f"max_hosts must be >= 1 or None, got {max_hosts}")
    counts: Counter[str] = Counter()
    kept: list[ReplayJob] = []
    summarized = {job.job_number for job in trace.jobs if job.status not in PARTIAL_STATUSES}
    for job in trace.jobs:
        reason = _skip_reason(job, summarized)
        hosts = -(-job.procs // procs_per_host)
        if reason is None and max_hosts is not None and hosts > max_hosts:
            if too_large == "drop":
                reason = "too_large"
            else:
                counts["clamped"] += 1
                hosts = max_hosts
        if reason is not None:
            counts[reason] += 1
            continue
        runtime = max(1, round(job.run_time * time_scale))
        requested = round(job.requested_time * time_scale)
        request_covers_run = job.requested_time >= job.run_time  # False when unknown (-1)
        submit = offset + round(job.submit_time * time_scale)
        if submit > MAX_TIME or max(runtime, requested) > MAX_DURATION:
            counts["out_of_range"] += 1  # no time the bridge could state
            continue
        kept.append(
            ReplayJob(
                id=str(job.job_number),
                user=str(job.user_id) if job.user_id >= 0 else "unknown",
                submit=submit,
                hosts=hosts,
                runtime=runtime,
                walltime=max(runtime, requested) if request_covers_run else runtime,
            )
        )
    report = ReplayReport(records=len(trace.jobs), kept=len(kept), **counts)
    return Replay(kept, report)


def synthetic_jobs(
    seed: int,
    count: int,
    max_hosts: int,
    mean_interarrival: float,
    mean_runtime: float,
    *,
    users: int = 8,
) -> list[ReplayJob]:
    """Seeded synthetic load: the same arguments always give the same list.

    Inter-arrival times and runtimes are exponential (runtimes at least 1 s); sizes are
    log-uniform in [1, max_hosts], so small jobs dominate as in real logs; users overestimate:
    walltime is the runtime times a uniform factor in [1, 3], rounded up.
    """
    if count < 0 or max_hosts < 1 or users < 1:
        raise ValueError("count must be >= 0, max_hosts and users >= 1")
    if not (mean_interarrival > 0 and mean_runtime > 0):
        raise ValueError("mean_interarrival and mean_runtime must be > 0")
    rng = random.Random(seed)  # noqa: S311 - reproducible load, not cryptography
    jobs: list[ReplayJob] = []
    clock = 0.0
    for index in range(1, count + 1):
        clock += rng.expovariate(1.0 / mean_interarrival)
        hosts = min(max_hosts, int(math.exp(rng.uniform(0.0, math.log(max_hosts + 1)))))
        runtime = max(1, round(rng.expovariate(1.0 / mean_runtime)))
        walltime = math.ceil(runtime * rng.uniform(1.0, 3.0))
        jobs.append(
            ReplayJob(
                id=f"syn-{index}",
                user=f"user{rng.randrange(users)}",
                submit=round(clock),
                hosts=max(1, hosts),
                runtime=runtime,
                walltime=max(runtime, walltime),
            )
        )
    return jobs
