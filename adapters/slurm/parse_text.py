"""Parsers for the text answers a snapshot reads: ``squeue -h -o`` and ``sinfo -h -N -o``.

Why text: with 10,016 jobs, ``squeue --json`` of Slurm 22.05 takes about 2 s and 31.5 MB (and
ignores ``-p``, so every partition pays for the whole controller), where ``squeue -h -o`` with
the few fields below takes 0.11 s. The formats are fixed here, next to their readers, and the
command builders (:mod:`.commands`) take them from here.

The semantics are those of the JSON parsers of :mod:`.parse` (same job and node states, same
walltime for unlimited jobs, same start rules), except for job arrays: squeue runs with ``-r``,
so every task is a job of its own, named ``JOB_TASK`` (``%i``) as ``squeue -j`` and ``scancel``
take it, pending tasks included (the JSON shows the tasks still pending as one record).

One answer serves every cluster (partition) of a controller, so each line is kept with the
partitions it concerns, and a line that cannot be read fails only the partitions it names (a
line too garbled to name them fails all of them), as the JSON path fails only the partition
whose job it cannot read. squeue and sinfo print a ``CLUSTER: name`` line with ``-M`` unless
``-h`` is given; such lines are skipped. Times are read as UTC (commands run with
:data:`.commands.ENV`).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple

from coorm_bridge.adapters.slurm.parse import (
    expand_hosts,
    job_state_of,
    node_state_of,
    safe_name,
    walltime_of,
)
from coorm_bridge.core.batch import Job, JobState, Node
from coorm_bridge.core.model import NAME_PATTERN

#: Between fields: no Slurm name, state, time or host list holds it.
SEPARATOR: Final = "|"

#: squeue's fields: job id (``123`` or ``123_4``), job record (``%A``: the same for the tasks of
#: an array still pending as one record), state, node count, start (actual, predicted or N/A),
#: time limit, partitions (a pending job may list several), allocated nodes, user and, last, the
#: reservation: the one name any user may choose, so a stray ``|`` stays inside it.
SQUEUE_FORMAT: Final = SEPARATOR.join(("%i", "%A", "%T", "%D", "%S", "%l", "%P", "%N", "%u", "%v"))
_PARTITIONS: Final = 6
_SQUEUE_FIELDS: Final = SQUEUE_FORMAT.count(SEPARATOR) + 1

#: sinfo's fields, one line per node and partition (``-N``): node, partition (``%R``: without
#: the ``*`` that ``%P`` adds to the default one) and state with its suffix (``idle*``...).
SINFO_FORMAT: Final = SEPARATOR.join(("%N", "%R", "%T"))
_SINFO_FIELDS: Final = SINFO_FORMAT.count(SEPARATOR) + 1

#: What squeue prints for no value (``%S`` of an unplanned job, ``%v`` of no reservation).
_NONE: Final = frozenset({"", "N/A", "(null)", "None", "NONE", "Unknown"})
#: Time limits that mean "none": the walltime is :data:`.parse.UNLIMITED_WALLTIME`.
_NO_LIMIT: Final = frozenset({"", "UNLIMITED", "INFINITE", "NOT_SET", "N/A", "NONE"})
_HEADER: Final = "CLUSTER:"


class Line(NamedTuple):
    """What one line says: ``item`` (a job or a node; None for a finished job) or the ``error``
    that kept it from being read, and the partitions it concerns (None: unknown, so all)."""

    partitions: frozenset[str] | None
    item: Job | Node | None
    error: ValueError | None = None


def _lines(text: str) -> Iterator[str]:
    for line in text.splitlines():
        if line and not line.startswith(_HEADER):
            yield line


def _in(lines: Iterable[Line], partition: str | None) -> Iterator[Job | Node]:
    """The items of ``partition`` (all with None); raises the first error among its lines."""
    for line in lines:
        if partition is None or line.partitions is None or partition in line.partitions:
            if line.error is not None:
                raise line.error
            if line.item is not None:
                yield line.item


# --- squeue --------------------------------------------------------------------------------------


def walltime_text(text: str) -> int:
    """Seconds of a ``%l`` time limit (``UNLIMITED``, ``30:00``, ``2:30:00``, ``1-00:00:00``),
    as :func:`.parse.walltime_of` counts them (none or 0: unlimited; capped)."""
    text = text.strip()
    if text.upper() in _NO_LIMIT:
        return walltime_of(None)
    days, dash, clock = text.rpartition("-")
    parts = clock.split(":")
    if len(parts) > 3 or not all(p.isdigit() for p in parts) or (dash and not days.isdigit()):
        raise ValueError(f"not a time limit: {text!r}")
    # squeue prints M:SS below an hour, H:MM:SS below a day, D-HH:MM:SS above; a lone number is
    # minutes, as in sbatch's --time.
    numbers = [int(p) for p in parts]
    if len(numbers) == 1:
        numbers = [numbers[0], 0]
    if len(numbers) == 2:
        numbers = [0, *numbers]
    hours, minutes, seconds = numbers
    total = ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds
    return walltime_of(-(-total // 60))


class _Memo(NamedTuple):
    """What one answer's lines share: thousands of jobs have the same few time limits and
    starts (arrays, backfill), so each text is read once; the array records already planned."""

    times: dict[str, int | None]
    limits: dict[str, int]
    planned: set[str]


def _parse_time(text: str, cache: dict[str, int | None]) -> int | None:
    """A ``%S`` time (``2026-11-24T03:30:24``, UTC) in Unix seconds, None for N/A."""
    try:
        return cache[text]
    except KeyError:
        pass
    if text in _NONE:
        value = None
    else:
        try:
            moment = datetime.datetime.fromisoformat(text)
        except ValueError as error:
            raise ValueError(f"not a squeue time: {text!r}") from error
        value = int(moment.replace(tzinfo=datetime.UTC).timestamp())
        value = value if value > 0 else None
    cache[text] = value
    return value


def _job(fields: list[str], now: int, memo: _Memo) -> Job | None:
    job_id, record, state_text, count_text, start_text, limit, _, nodes, user, resv = fields
    state = job_state_of(state_text)
    if state.finished:
        return None
    if not count_text.isdigit():
        raise ValueError(f"node count {count_text!r} is not a number")
    count = int(count_text)
    start = _parse_time(start_text, memo.times)
    if state is not JobState.PENDING:
        start = (start or now) if state is JobState.RUNNING else None
    elif record in memo.planned:
        start = None  # the backfill's start is the array's next task's, not every task's
    elif start is not None:
        memo.planned.add(record)
    walltime = memo.limits.get(limit)
    if walltime is None:
        walltime = memo.limits[limit] = walltime_text(limit)
    return Job(
        id=job_id,
        user=user,
        state=state,
        hosts=count if count > 0 else 1,
        host_names=expand_hosts(nodes, f"job {job_id}"),
        walltime=walltime,
        start=start,
        reservation=None if resv in _NONE else safe_name(resv),
    )


def parse_squeue_text(text: str, *, now: int) -> list[Line]:
    """Every line of ``squeue -h -r -o SQUEUE_FORMAT``, in squeue's order (see :func:`jobs_in`).

    ``hosts`` is ``%D`` (at least 1); ``start`` is ``%S`` for running jobs (``now`` without one)
    and, for pending ones, the predicted start when there is one (N/A otherwise: many pending
    jobs have none). The tasks of an array still pending as one record all show that record's
    start, which the backfill planned for the next task only: the later ones get none (the
    adapter estimates them). Finished jobs are dropped (None).
    """
    lines: list[Line] = []
    memo = _Memo({}, {}, set())
    for raw in _lines(text):
        fields = raw.split(SEPARATOR, _SQUEUE_FIELDS - 1)
        if len(fields) != _SQUEUE_FIELDS:
            error = ValueError(f"squeue: not {_SQUEUE_FIELDS} fields: {raw!r}")
            lines.append(Line(None, None, error))
            continue
        partitions = frozenset(fields[_PARTITIONS].split(","))
        try:
            lines.append(Line(partitions, _job(fields, now, memo)))
        except ValueError as error:
            failure = ValueError(f"squeue: job {fields[0]}: {error}")
            lines.append(Line(partitions, None, failure))
    return lines


def jobs_in(lines: Iterable[Line], partition: str | None = None) -> list[Job]:
    """The unfinished jobs that may run in ``partition`` (all with None); ValueError when one of
    them could not be read."""
    return [item for item in _in(lines, partition) if isinstance(item, Job)]


# --- sinfo ---------------------------------------------------------------------------------------


def parse_sinfo_text(text: str) -> list[Line]:
    """Every line of ``sinfo -h -N -o SINFO_FORMAT`` (see :func:`nodes_in`)."""
    lines: list[Line] = []
    for raw in _lines(text):
        fields = raw.split(SEPARATOR)
        if len(fields) != _SINFO_FIELDS:
            lines.append(Line(None, None, ValueError(f"sinfo: not 3 fields: {raw!r}")))
            continue
        name, partition, state = fields
        partitions = frozenset({partition})
        if not NAME_PATTERN.fullmatch(name):
            error = ValueError(f"sinfo: node name {name!r} is not a valid name")
            lines.append(Line(partitions, None, error))
            continue
        lines.append(Line(partitions, Node(name=name, state=node_state_of(state))))
    return lines


def nodes_in(lines: Iterable[Line], partition: str | None = None) -> list[Node]:
    """The nodes of ``partition`` (all with None), once each, in sinfo's order; ValueError when
    one of them could not be read."""
    nodes: dict[str, Node] = {}
    for item in _in(lines, partition):
        if isinstance(item, Node):
            nodes.setdefault(item.name, item)
    return list(nodes.values())
