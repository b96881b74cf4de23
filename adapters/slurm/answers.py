"""Slurm's one-line answers and error messages: what a failed command meant (``classify_error``),
the name ``scontrol create`` gave, the job id ``sbatch --parsable`` printed, one job of
``scontrol -o show job`` and a node's address in ``scontrol -o show node``.

Apart from :mod:`.parse`, which reads the snapshot's answers (squeue, sinfo, reservations):
every back-end and the launchers' Slurm deployer need these, and nothing of the snapshot.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from coorm_bridge.adapters.batch.backend import ErrorKind
from coorm_bridge.adapters.slurm.parse import job_state_of, parse_time, record_fields
from coorm_bridge.core.batch import JobState

#: Slurm 22.05's messages (libslurm's error strings and scontrol's own), first match wins.
_ERROR_TEXTS: Final[tuple[tuple[str, ErrorKind], ...]] = (
    (r"Unable to contact slurm controller|Socket timed out|Zero Bytes were transmitted"
     r"|Connection refused|Transport endpoint is not connected|Communication connection failure"
     r"|Problem talking to database|can't be reached now", "unreachable"),
    (r"Requested nodes are busy|Required node not available", "busy"),
    (r"overlaps with another reservation", "overlap"),
    (r"Requested reservation is in use", "in_use"),
    (r"Invalid time specified|Start time cannot be after end time"
     r"|StartTime \+ Duration does not equal EndTime", "invalid_time"),
    (r"Invalid user id", "invalid_user"),
    (r"Requested reservation is invalid|Reservation \S+ not found", "no_such_reservation"),
    (r"Invalid job id specified", "no_such_job"),
)  # fmt: skip
_ERRORS: Final = tuple((re.compile(text, re.IGNORECASE), kind) for text, kind in _ERROR_TEXTS)

#: How every back-end says that slurmctld did not answer, before the command's own words: Slurm's
#: own ("Socket timed out", "Unspecified error") never say which daemon is silent.
NO_ANSWER: Final = "the controller does not answer"
#: Slurm 22.05's ``sinfo --json`` and ``squeue --json`` exit 0 with this as their only error and
#: no record, after 10 s, both when slurmctld is down and when it is stopped or too busy to answer
#: (their text forms then say "Unable to contact slurm controller" or "Socket timed out").
UNANSWERED_JSON: Final = re.compile(r"Unspecified error|Failed while looking for jobs")


#: The ``unreachable`` messages that are slurmdbd's, not the controller's.
_DATABASE: Final = re.compile(r"Problem talking to database", re.IGNORECASE)


def not_answering(message: str) -> str:
    """``message`` of a command slurmctld did not answer, saying so first (once); a message
    that is not of an unanswered controller (slurmdbd's, another failure) is left as it is."""
    if message.startswith(NO_ANSWER) or _DATABASE.search(message):
        return message
    if classify_error(message) != "unreachable" and not UNANSWERED_JSON.search(message):
        return message
    return f"{NO_ANSWER}: {message}"


def classify_error(stderr: str) -> ErrorKind:
    """What a failed command's message means; unknown messages are ``other``. ``busy``,
    ``overlap``, ``in_use``, ``invalid_time``: conflicts to work around; ``unreachable``: retry;
    ``no_such_reservation`` (delete) and ``no_such_job`` (squeue -j): already gone."""
    for pattern, kind in _ERRORS:
        if pattern.search(stderr):
            return kind
    return "other"


_CREATED: Final = re.compile(r"Reservation created:\s*(\S+)")


def parse_created_name(stdout: str) -> str | None:
    """The name in scontrol's "Reservation created: NAME", None when absent."""
    match = _CREATED.search(stdout)
    return match.group(1) if match else None


_JOB_ID: Final = re.compile(r"^\s*([0-9]+(?:_[0-9]+)?)\s*(?:;\s*\S+\s*)?$")


def parse_job_id(stdout: str) -> str:
    """The job id of ``sbatch --parsable``: ``ID`` or ``ID;cluster`` (ValueError otherwise)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    match = _JOB_ID.match(lines[-1]) if lines else None
    if match is None:
        raise ValueError(f"sbatch --parsable: no job id in {stdout!r}")
    return match.group(1)


class ShownJob(NamedTuple):
    """What ``scontrol -o show job`` tells of one job: its state, its exit status once it
    finished (a signal counts as 128 + its number, as a shell reports it), and its start."""

    state: JobState
    exit_code: int | None
    start: int | None


_EXIT: Final = re.compile(r"^([0-9]{1,3}):([0-9]{1,3})$")


def parse_job(stdout: str) -> ShownJob:
    """One job of ``scontrol -o show job ID`` (run with :data:`.commands.ENV`); ValueError when
    the answer holds no job (a ``CLUSTER:`` line before it, with -M, is skipped)."""
    line = next((ln for ln in stdout.splitlines() if ln.lstrip().startswith("JobId=")), None)
    if line is None:
        raise ValueError(f"scontrol show job: no job in {stdout[:200]!r}")
    fields = record_fields(line.strip())
    state = job_state_of(fields.get("JobState", "").split()[0] if fields.get("JobState") else "")
    exit_code = None
    match = _EXIT.match(fields.get("ExitCode", ""))
    if match is not None and state.finished:
        code, signal = int(match.group(1)), int(match.group(2))
        exit_code = 128 + signal if signal else code
    start_text = fields.get("StartTime", "")
    try:
        start = parse_time(start_text) if state is not JobState.PENDING else None
    except ValueError:
        start = None  # "Unknown", "None"
    return ShownJob(state, exit_code, start)


def node_address(stdout: str) -> str | None:
    """The ``NodeAddr`` of ``scontrol -o show node`` (None when absent or unusable): the
    address a node is reached at, which may differ from its name."""
    line = next((ln for ln in stdout.splitlines() if ln.lstrip().startswith("NodeName=")), None)
    if line is None:
        return None
    address = record_fields(line.strip()).get("NodeAddr", "").split(",")[0].strip()
    return address if address and re.fullmatch(r"[A-Za-z0-9_.:-]{1,255}", address) else None
