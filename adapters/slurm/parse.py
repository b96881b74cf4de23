"""Parsers for Slurm's answers: ``squeue --json``, ``sinfo --json``, ``scontrol -o show
reservation`` and the state names of ``squeue -o %T`` (error messages and the other one-line
answers: :mod:`.answers`; the text formats the snapshot reads: :mod:`.parse_text`).

Both JSON shapes are read: OpenAPI v0.0.38 (Slurm 22.05: plain integers, string ``job_state``,
lower-case node ``state`` plus ``state_flags``) and v0.0.39+ (23.02+: numbers may be ``{"set",
"infinite", "number"}`` objects, states are lists; 23.11+ ``sinfo`` records instead of ``nodes``).
22.05 ignores ``-p`` with --json: the parsers filter to the partition themselves. scontrol's times
are read as UTC (it runs with :data:`.commands.ENV`). Malformed answers raise ValueError.

Job states (:func:`job_state_of`; in a list, the first of these kinds wins): what holds or is
about to hold hosts is RUNNING (RUNNING, CONFIGURING, COMPLETING, SUSPENDED, STOPPED, SIGNALING,
STAGE_OUT, RESIZING, POWER_UP_NODE); PENDING (PENDING, REQUEUED, REQUEUE_HOLD, REQUEUE_FED,
SPECIAL_EXIT, RESV_DEL_HOLD); COMPLETED; CANCELLED (CANCELLED, REVOKED); FAILED (FAILED,
TIMEOUT, NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, OUT_OF_MEMORY); anything else UNKNOWN.

Node states (:func:`node_state_of`): a DRAIN flag (drain, draining, drained, even with DOWN, as
sinfo shows it), FAIL or POWER_DRAIN is DRAINED; DOWN, NOT_RESPONDING, ERROR, FUTURE, UNKNOWN
and INVALID(_REG) are DOWN (Slurm starts nothing there); the rest is UP: idle, allocated, mixed,
completing, reserved and maint (their reservations are counted separately), powered down or
powering up (Slurm wakes them on demand), planned, reboot requested.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any, Final

import hostlist  # type: ignore[import-untyped]
from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from coorm_bridge.core.batch import Job, JobState, Node, NodeState, Reservation
from coorm_bridge.core.model import MAX_DURATION, NAME_PATTERN, USER_NAME_PATTERN, describe

#: The walltime of a job without limit (time_limit null, 0, INFINITE or unset): one year, the
#: bound Slurm itself gives reservations of infinite duration.
UNLIMITED_WALLTIME: Final = 365 * 86400

#: Slurm's NO_VAL (0xfffffffe) and INFINITE (0xffffffff): numbers at or above mean "no number".
_NO_VAL: Final = 0xFFFFFFFE

_RUNNING, _PENDING = JobState.RUNNING, JobState.PENDING
_JOB_STATES: Final[dict[str, JobState]] = {
    name: state
    for state, names in (
        (_RUNNING, "RUNNING CONFIGURING COMPLETING SUSPENDED STOPPED SIGNALING STAGE_OUT RESIZING"
                   " POWER_UP_NODE"),
        (_PENDING, "PENDING REQUEUED REQUEUE_HOLD REQUEUE_FED SPECIAL_EXIT RESV_DEL_HOLD"),
        (JobState.COMPLETED, "COMPLETED"),
        (JobState.CANCELLED, "CANCELLED REVOKED"),
        (JobState.FAILED, "FAILED TIMEOUT NODE_FAIL PREEMPTED BOOT_FAIL DEADLINE OUT_OF_MEMORY"),
    )
    for name in names.split()
}  # fmt: skip
_PRECEDENCE: Final = {
    JobState.RUNNING: 4, JobState.PENDING: 3, JobState.COMPLETED: 2, JobState.FAILED: 2,
    JobState.CANCELLED: 2, JobState.UNKNOWN: 0,
}  # fmt: skip

_DRAINED: Final = frozenset({"DRAIN", "DRAINED", "DRAINING", "DRNG", "FAIL", "FAILING",
                             "POWER_DRAIN"})  # fmt: skip
_DOWN: Final = frozenset({"DOWN", "NOT_RESPONDING", "ERROR", "FUTURE", "UNKNOWN", "UNK",
                          "INVALID", "INVALID_REG"})  # fmt: skip
#: sinfo's one-character suffixes (``idle*``, ``idle~``...), should a text state reach us; only
#: ``*`` (not responding) changes the verdict.
_SUFFIXES: Final = "*~#!%$@^-"

_NULL: Final = frozenset({"", "(null)", "none", "None", "N/A"})


def number(value: Any) -> int | None:
    """A JSON number of either shape: None when unset, NO_VAL when infinite or unlimited."""
    if type(value) is int:
        return value
    if isinstance(value, dict):
        infinite, unset = value.get("infinite"), not value.get("set", True)
        value = "INFINITE" if infinite else None if unset else value.get("number")
    if value is None:
        return None
    if isinstance(value, str) and value.upper() in ("UNLIMITED", "INFINITE"):
        return _NO_VAL
    if (isinstance(value, str) and value.isdigit()) or type(value) in (int, float):
        return int(value)
    raise ValueError(f"not a number: {value!r}")


def expand_hosts(text: Any, what: str) -> tuple[str, ...]:
    """A hostlist (``a[01-03],b1``) expanded, every name checked."""
    if not text or text in _NULL:
        return ()
    try:
        names: list[str] = hostlist.expand_hostlist(text)
    except (hostlist.BadHostlist, TypeError, AttributeError) as error:
        raise ValueError(f"{what}: bad host list {text!r}: {error}") from error
    for name in names:
        if not NAME_PATTERN.fullmatch(name):
            raise ValueError(f"{what}: host name {name!r} is not a valid name")
    return tuple(names)


def safe_name(value: str) -> str:
    """A Slurm name as a valid Name, bad characters as '_' (others' reservation names only need
    to match between jobs and reservations; the bridge's own names are always valid)."""
    if NAME_PATTERN.fullmatch(value):
        return value
    return ("x" + re.sub(r"[^A-Za-z0-9_.-]", "_", value))[:63]


def _why(error: ValueError) -> str:
    return describe(error) if isinstance(error, ValidationError) else str(error)


def _check_errors(errors: Any, what: str) -> None:
    if errors:
        texts = [str(e.get("description") or e.get("error") or e) if isinstance(e, dict) else str(e)
                 for e in (errors if isinstance(errors, list) else [errors])]  # fmt: skip
        raise ValueError(f"{what} reported errors: {'; '.join(texts)}")


# --- jobs ----------------------------------------------------------------------------------------


def _state_tokens(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.split("+")
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def job_state_of(value: Any) -> JobState:
    """A job state: a name (``squeue -o %T`` output, possibly after a ``CLUSTER:`` line) or a
    v0.0.39+ list of names; empty (a job squeue no longer knows) is UNKNOWN."""
    if isinstance(value, str):
        found = _JOB_STATES.get(value)
        if found is not None:
            return found
        lines = [ln for ln in map(str.strip, value.splitlines()) if ln and "CLUSTER:" not in ln]
        value = lines[0] if lines else ""
    best = JobState.UNKNOWN
    for token in _state_tokens(value):
        state = _JOB_STATES.get(token.strip().upper(), JobState.UNKNOWN)
        if _PRECEDENCE[state] > _PRECEDENCE[best]:
            best = state
    return best


class _JobRow(TypedDict, total=False):
    """The fields read from a job: the rest of squeue's 31 MB for 10,000 jobs is skipped."""

    job_id: Any
    job_state: Any
    user_name: Any
    partition: Any
    nodes: Any
    node_count: Any
    time_limit: Any
    start_time: Any
    resv_name: Any


class _Squeue(TypedDict, total=False):
    jobs: list[_JobRow]
    errors: list[Any]


_SQUEUE: Final = TypeAdapter(_Squeue)


def parse_squeue(data: bytes | str, partition: str | None = None, *, now: int) -> list[Job]:
    """The jobs of ``squeue --json`` that hold or will hold hosts (finished ones are dropped).

    ``hosts`` is node_count (at least 1); ``walltime`` is time_limit minutes x 60, or
    :data:`UNLIMITED_WALLTIME`; ``start`` is start_time for running jobs (``now`` when Slurm has
    none) and, for pending ones, the backfill's predicted start only when set and > 0 (many
    pending jobs have none). A pending job array counts as one job of its record. Job ids are the
    controller's: with -M they are per cluster.
    """
    try:
        document = _SQUEUE.validate_json(data)
    except ValueError as error:
        raise ValueError(f"squeue --json: unreadable answer: {_why(error)}") from error
    _check_errors(document.get("errors"), "squeue")
    if "jobs" not in document:
        raise ValueError("squeue --json: no 'jobs' in the answer")
    rows = document["jobs"]
    if partition is not None:  # a job submitted to several partitions has a comma list
        rows = [r for r in rows if partition in str(r.get("partition", "")).split(",")]
    return [job for row in rows if (job := _job(row, now)) is not None]


def _job(row: _JobRow, now: int) -> Job | None:
    state = job_state_of(row.get("job_state"))
    if state.finished:
        return None
    raw_id = number(row.get("job_id"))
    if raw_id is None:
        raise ValueError(f"squeue --json: a job without job_id: {row}")
    job_id = str(raw_id)
    try:
        minutes = number(row.get("time_limit"))
        count = number(row.get("node_count"))
        start = number(row.get("start_time"))
        start = start if start is not None and 0 < start < _NO_VAL else None
        if state is not _PENDING:
            start = (start or now) if state is _RUNNING else None
        resv = row.get("resv_name")
        user = row.get("user_name")
        return Job(
            id=job_id,
            user=user if isinstance(user, str) else "",
            state=state,
            hosts=count if count is not None and 0 < count < _NO_VAL else 1,
            host_names=expand_hosts(row.get("nodes"), f"job {job_id}"),
            walltime=walltime_of(minutes),
            start=start,
            reservation=safe_name(resv) if isinstance(resv, str) and resv else None,
        )
    except ValueError as error:
        raise ValueError(f"squeue --json: job {job_id}: {_why(error)}") from error


def walltime_of(minutes: int | None) -> int:
    """Seconds of a time_limit; a limit above :data:`MAX_DURATION` (Slurm allows thousands of
    years) holds the hosts as long as the bridge can count, not longer."""
    if not minutes or minutes >= _NO_VAL:
        return UNLIMITED_WALLTIME
    return min(minutes * 60, MAX_DURATION)


# --- nodes ---------------------------------------------------------------------------------------


def node_state_of(state: Any, flags: Any = ()) -> NodeState:
    """A node's state from its base state and flags, in any shape (see the module docstring)."""
    tokens = set()
    for token in _state_tokens(state):
        word = token.strip().upper()
        if word.endswith("*"):  # sinfo's "not responding" mark
            tokens.add("NOT_RESPONDING")
        tokens.add(word.rstrip(_SUFFIXES))
    tokens.update(t.strip().upper() for t in _state_tokens(flags if flags else []))
    if tokens & _DRAINED:
        return NodeState.DRAINED
    if tokens & _DOWN:
        return NodeState.DOWN
    return NodeState.UP


def _node_records(document: Any) -> Iterator[tuple[list[str], Any, Any, list[str]]]:
    """(names, state, flags, partitions) of each record, 22.05 ``nodes`` or 23.11+ ``sinfo``."""
    if not isinstance(document, dict):
        raise ValueError("sinfo --json: the answer is not an object")
    if isinstance(document.get("nodes"), list):
        for node in document["nodes"]:
            partitions, flags = node.get("partitions") or [], node.get("state_flags") or []
            yield [node.get("name")], node.get("state"), flags, partitions
    elif isinstance(document.get("sinfo"), list):
        for record in document["sinfo"]:
            names = (record.get("nodes") or {}).get("nodes") or []
            state = (record.get("node") or {}).get("state")
            name = (record.get("partition") or {}).get("name")
            yield list(names), state, [], [name] if name else []
    else:
        raise ValueError("sinfo --json: neither 'nodes' nor 'sinfo' in the answer")


def parse_sinfo(data: bytes | str, partition: str | None = None) -> list[Node]:
    """The nodes of ``sinfo --json`` (only the partition's when given), in Slurm's order."""
    try:
        document = json.loads(data)
    except ValueError as error:
        raise ValueError(f"sinfo --json: not JSON: {error}") from error
    _check_errors(document.get("errors") if isinstance(document, dict) else None, "sinfo")
    nodes: dict[str, Node] = {}
    for names, state, flags, partitions in _node_records(document):
        if partition is not None and partition not in partitions:
            continue
        node_state = node_state_of(state, flags)
        for name in names:
            if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
                raise ValueError(f"sinfo --json: node name {name!r} is not a valid name")
            nodes.setdefault(name, Node(name=name, state=node_state))
    return list(nodes.values())


# --- reservations --------------------------------------------------------------------------------

_KEY: Final = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")
_TIME_FORMAT: Final = "%Y-%m-%dT%H:%M:%S"


def parse_time(text: str) -> int:
    """scontrol's ``2026-11-21T09:13:07`` as Unix seconds, read as UTC (see :data:`.ENV`)."""
    try:
        return calendar.timegm(time.strptime(text.strip(), _TIME_FORMAT))
    except ValueError as error:
        raise ValueError(f"not a scontrol time: {text!r}") from error


def record_fields(record: str) -> dict[str, str]:
    """``Key=Value`` pairs; a value runs to the next `` Key=`` (values may hold '=' or spaces)."""
    parts = _KEY.split(record)
    return {key: value.strip() for key, value in zip(parts[1::2], parts[2::2], strict=True)}


def _records(text: str) -> Iterator[str]:
    """One string per reservation, from ``-o`` (one line each) or the multi-line layout."""
    for chunk in re.split(r"\n(?=\s*ReservationName=)|\n\s*\n", text):
        if chunk.lstrip().startswith("ReservationName="):
            yield " ".join(line.strip() for line in chunk.splitlines())


def _users(text: str) -> tuple[str, ...]:
    """Users allowed in; excluded ones (``-name``) and names no command could carry are left out."""
    if text in _NULL:
        return ()
    return tuple(u for u in text.split(",") if USER_NAME_PATTERN.fullmatch(u))


def reservation_of(  # noqa: PLR0917 - one argument per field Slurm describes
    name: str,
    node_list: Any,
    node_count: Any,
    start: int | None,
    end: int | None,
    users: str,
    *,
    in_partition: bool,
    nodes: set[str],
    source: str,
) -> Reservation | None:
    """One reservation as Slurm describes it (scontrol, slurmrestd or pyslurm), or None when it
    holds no whole node or lies outside the partition asked for: not made in it
    (``in_partition`` false) and holding none of its ``nodes``."""
    name = safe_name(name)
    try:
        host_names = expand_hosts(node_list, f"reservation {name}")
        count = number(node_count or None) or len(host_names)
        if count <= 0 or (not in_partition and not nodes.intersection(host_names)):
            return None
        if start is None or end is None:
            raise ValueError("no start or end time")
        return Reservation(name=name, start=start, end=end, hosts=count,
                           host_names=host_names, users=_users(users))  # fmt: skip
    except ValueError as error:
        raise ValueError(f"{source}: reservation {name}: {_why(error)}") from error


def parse_reservations(
    text: str, partition: str | None = None, nodes: Iterable[str] | None = None
) -> list[Reservation]:
    """Reservations of ``scontrol -o show reservation`` ("No reservations in the system": []),
    kept as :func:`reservation_of` keeps them."""
    wanted = set(nodes) if nodes is not None else set()
    reservations: list[Reservation] = []
    for record in _records(text):
        fields = record_fields(record)
        found = reservation_of(
            fields.get("ReservationName", ""),
            fields.get("Nodes", ""),
            fields.get("NodeCnt"),
            parse_time(fields.get("StartTime", "")) if fields.get("StartTime") else None,
            parse_time(fields.get("EndTime", "")) if fields.get("EndTime") else None,
            fields.get("Users", ""),
            in_partition=partition is None or fields.get("PartitionName") == partition,
            nodes=wanted,
            source="scontrol",
        )
        if found is not None:
            reservations.append(found)
    return reservations
