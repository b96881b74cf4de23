"""Argument vectors for Slurm's commands: built here, run by a runner, parsed by :mod:`.parse`.

Every builder returns a tuple of arguments, never a shell string, and validates every name that
reaches a command (reservations, partitions, clusters, hosts, jobs) with the data model's
:data:`~coorm_bridge.core.model.NAME_PATTERN`, and users with its
:data:`~coorm_bridge.core.model.USER_NAME_PATTERN` (which adds '@' and a final '$'), so that no
argument can smuggle a space, ``=``, ``,`` or a shell metacharacter into scontrol's
``key=value`` tokens (or into a command line an SSH runner joins, which quotes every word).
Invalid input raises :class:`ValueError`.

Times: scontrol reads and prints times in the local time zone of the process that runs it. The
runner must run every command with :data:`ENV` (``TZ=UTC``) added to its environment; times are
then formatted here, and parsed by :mod:`.parse`, as UTC.

Slurm 22.05 ignores ``-p`` with ``squeue --json`` and ``sinfo --json`` (it prints the whole
controller); the builders still pass it, for versions that honour it, and the parsers filter.
The snapshot reads the cheaper text forms (:func:`squeue_text`, :func:`sinfo_text`), once per
controller for all its partitions.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from coorm_bridge.adapters.batch.names import check_name, check_user
from coorm_bridge.adapters.slurm import parse_text
from coorm_bridge.core.batch import JobSpec, ReservationSpec
from coorm_bridge.core.model import ENV_NAME_PATTERN

#: The environment every command must run with (see the module's docstring).
ENV: Final[dict[str, str]] = {"TZ": "UTC"}

#: scontrol's time format (ISO 8601 without zone: the zone is the process's, UTC with :data:`ENV`).
TIME_FORMAT: Final = "%Y-%m-%dT%H:%M:%S"

#: A job id: digits, with an optional array task suffix (``1234_7``).
JOB_ID_PATTERN: Final = re.compile(r"^[0-9]{1,20}(?:_[0-9]{1,10})?$")

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_job_id(value: str) -> str:
    """``value`` when it is a Slurm job id (``123`` or ``123_4``), else ValueError."""
    if not isinstance(value, str) or not JOB_ID_PATTERN.fullmatch(value):
        raise ValueError(f"invalid job id {value!r}: digits, optionally '_' and an array index")
    return value


def format_time(timestamp: int) -> str:
    """Unix seconds as scontrol reads them under ``TZ=UTC``: ``2026-11-21T09:13:07``."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise ValueError(f"invalid time {timestamp!r}: whole Unix seconds >= 0")
    return time.strftime(TIME_FORMAT, time.gmtime(timestamp))


@dataclass(frozen=True)
class Target:
    """How one coorm cluster is addressed on a controller.

    ``cluster``: the Slurm cluster name of a multi-cluster setup (slurmdbd), passed as ``-M``.
    ``partition``: the partition the coorm cluster is limited to (``-p``, ``partitionname=``).
    """

    cluster: str | None = None
    partition: str | None = None

    def __post_init__(self) -> None:
        if self.cluster is not None:
            check_name(self.cluster, "cluster name")
        if self.partition is not None:
            check_name(self.partition, "partition name")

    def clusters(self) -> tuple[str, ...]:
        """``-M cluster`` when a cluster is set."""
        return () if self.cluster is None else ("-M", self.cluster)

    def partitions(self) -> tuple[str, ...]:
        """``-p partition`` when a partition is set."""
        return () if self.partition is None else ("-p", self.partition)


# --- reading -----------------------------------------------------------------------------------


def squeue_json(target: Target) -> tuple[str, ...]:
    """All jobs as JSON (``-p`` keeps the jobs that may run in the partition, where honoured)."""
    return ("squeue", "--json", *target.clusters(), *target.partitions())


def sinfo_json(target: Target) -> tuple[str, ...]:
    """All nodes as JSON (``-p`` keeps the partition's nodes, where honoured)."""
    return ("sinfo", "--json", *target.clusters(), *target.partitions())


def known_clusters() -> tuple[str, ...]:
    """The Slurm clusters slurmdbd knows, one name a line (to name them when ``-M`` is wrong)."""
    return ("sacctmgr", "-n", "-P", "list", "clusters", "format=cluster")


def squeue_text(target: Target) -> tuple[str, ...]:
    """Every job of the controller, one line each (array tasks too: ``-r``), in the format of
    :data:`.parse_text.SQUEUE_FORMAT`; ``-a``: hidden partitions too (one may be a cluster).

    In queue order (priority, then job id: ``--sort=-p,i``), the order in which the adapter plans
    the pending jobs the backfill left without a start. No ``-p``: one answer serves every
    partition of the controller (the parser splits it).
    """
    return (
        "squeue", *target.clusters(), "-a", "-h", "-r", "--sort=-p,i",
        "-o", parse_text.SQUEUE_FORMAT,
    )  # fmt: skip


def sinfo_text(target: Target) -> tuple[str, ...]:
    """Every node of the controller, one line per node and partition, in the format of
    :data:`.parse_text.SINFO_FORMAT` (no ``-p``, as for :func:`squeue_text`)."""
    return ("sinfo", *target.clusters(), "-a", "-h", "-N", "-o", parse_text.SINFO_FORMAT)


def show_reservations(target: Target) -> tuple[str, ...]:
    """All reservations, one line each (scontrol 22.05 has no --json); filtered by the parser."""
    return ("scontrol", *target.clusters(), "-o", "show", "reservation")


def job_state(target: Target, job_id: str) -> tuple[str, ...]:
    """One job's state name (``%T``), finished jobs included (``-t all``).

    squeue knows a finished job for MinJobAge (300 s by default) and then forgets it: the output
    is then empty, or squeue exits 1 with "Invalid job id specified" (classified ``no_such_job``);
    both mean :attr:`JobState.UNKNOWN`. sacct would remember longer but needs slurmdbd.
    """
    return ("squeue", *target.clusters(), "-h", "-t", "all", "-j", check_job_id(job_id), "-o", "%T")


# --- reservations --------------------------------------------------------------------------------


def _reservation_tokens(spec: ReservationSpec) -> tuple[str, ...]:
    """``starttime= endtime= nodecnt=|nodes= users=`` of a spec, every value checked."""
    start, end = format_time(spec.start), format_time(spec.end)
    if spec.end <= spec.start:
        raise ValueError(f"reservation {spec.name!r} must end after it starts")
    if spec.host_names:
        hosts = ",".join(check_name(h, "host name") for h in spec.host_names)
        size = f"nodes={hosts}"
    else:
        if isinstance(spec.hosts, bool) or not isinstance(spec.hosts, int) or spec.hosts <= 0:
            raise ValueError(f"reservation {spec.name!r} holds at least one host")
        size = f"nodecnt={spec.hosts}"
    if not spec.users:
        raise ValueError(f"reservation {spec.name!r} needs at least one user")
    users = ",".join(check_user(u) for u in spec.users)
    return (f"starttime={start}", f"endtime={end}", size, f"users={users}")


def create_reservation(target: Target, spec: ReservationSpec) -> tuple[str, ...]:
    """``scontrol create reservation``: in the target's partition when it has one.

    Slurm may make a smaller reservation than asked (a node count larger than the partition) and
    still succeed: the caller reads the reservation back and compares.
    """
    name = check_name(spec.name, "reservation name")
    partition = () if target.partition is None else (f"partitionname={target.partition}",)
    return (
        "scontrol",
        *target.clusters(),
        "create",
        "reservation",
        f"reservationname={name}",
        *_reservation_tokens(spec),
        *partition,
    )


def update_reservation(
    target: Target, spec: ReservationSpec, *, begun: bool = False
) -> tuple[str, ...]:
    """``scontrol update reservationname=``: new times, size and users, in place.

    A reservation that has begun keeps its start, and Slurm refuses even to be told it again
    ("Reservation already started"): with ``begun`` the start is left out.
    """
    name = check_name(spec.name, "reservation name")
    tokens = _reservation_tokens(spec)
    if begun:
        tokens = tokens[1:]
    return ("scontrol", *target.clusters(), "update", f"reservationname={name}", *tokens)


def delete_reservation(target: Target, name: str) -> tuple[str, ...]:
    """``scontrol delete reservationname=`` (an unknown name: ``no_such_reservation``)."""
    name = check_name(name, "reservation name")
    return ("scontrol", *target.clusters(), "delete", f"reservationname={name}")


# --- jobs ----------------------------------------------------------------------------------------


def _shell_word(word: str) -> str:
    """``shlex.quote``, but a first word with ``=`` is quoted too (else sh takes an assignment)."""
    quoted = shlex.quote(word)
    if quoted == word and "=" in word:
        quoted = f"'{word}'"
    return quoted


def wrap_script(job: JobSpec) -> str:
    """The shell command ``sbatch --wrap`` runs: exports, then the argument vector, quoted.

    The environment is exported by the script rather than with ``--export=ALL,K=V``: sbatch splits
    --export on commas (``--export=ALL,A=x,y`` sets A=x and re-exports ``y``), so values could not
    hold commas. Quoted by :func:`shlex.quote`, any value and argument survives /bin/sh intact.
    """
    if not job.argv:
        raise ValueError(f"job {job.name!r} has an empty argument vector")
    lines = []
    for key, value in sorted(job.environment.items()):
        if not isinstance(key, str) or not ENV_NAME_PATTERN.fullmatch(key):
            raise ValueError(
                f"invalid environment variable name {key!r}: letters, digits and '_', "
                "not starting with a digit"
            )
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"environment variable {key}: the value must be a string without NUL")
        lines.append(f"export {key}={shlex.quote(value)}")
    for arg in job.argv:
        if not isinstance(arg, str) or "\x00" in arg:
            raise ValueError(f"job {job.name!r}: arguments are strings without NUL")
    first, *rest = job.argv
    lines.append(" ".join([_shell_word(first), *(shlex.quote(arg) for arg in rest)]))
    return "\n".join(lines)


def sbatch(
    target: Target,
    job: JobSpec,
    *,
    nodelist: Sequence[str] = (),
    output: str | None = None,
    error: str | None = None,
) -> tuple[str, ...]:
    """``sbatch --parsable``: prints ``ID``, or ``ID;cluster`` with -M (read by
    :func:`.answers.parse_job_id`).

    ``--time`` is the walltime in whole minutes, rounded up. The job runs as the user who runs
    sbatch: submitting for ``job.user`` is the runner's business (sbatch's ``--uid`` is root only).
    ``nodelist``: exactly these hosts (``--nodelist``, as many as ``job.hosts``: a launcher
    deploys on the hosts a start granted); ``output``/``error``: the job's files (sbatch's
    ``%j`` patterns allowed).
    """
    name = check_name(job.name, "job name")
    if isinstance(job.hosts, bool) or not isinstance(job.hosts, int) or job.hosts <= 0:
        raise ValueError(f"job {name!r} needs at least one host")
    if isinstance(job.walltime, bool) or not isinstance(job.walltime, int) or job.walltime <= 0:
        raise ValueError(f"job {name!r} needs a positive walltime")
    options = [
        f"--job-name={name}",
        f"--nodes={job.hosts}",
        f"--time={-(-job.walltime // 60)}",
    ]
    if job.reservation is not None:
        options.append(f"--reservation={check_name(job.reservation, 'reservation name')}")
    if job.workdir is not None:
        if not job.workdir or _CONTROL.search(job.workdir):
            raise ValueError(f"invalid working directory {job.workdir!r}")
        options.append(f"--chdir={job.workdir}")
    if nodelist:
        hosts = [check_name(host, "host name") for host in nodelist]
        if len(set(hosts)) != job.hosts or len(hosts) != job.hosts:
            raise ValueError(f"job {name!r} asks for {job.hosts} hosts but names {len(hosts)}")
        options.append(f"--nodelist={','.join(hosts)}")
    for option, path in (("--output", output), ("--error", error)):
        if path is not None:
            if not path or _CONTROL.search(path):
                raise ValueError(f"invalid {option[2:]} file {path!r}")
            options.append(f"{option}={path}")
    script = wrap_script(job)
    return (
        "sbatch",
        "--parsable",
        *options,
        *target.clusters(),
        *target.partitions(),
        f"--wrap={script}",
    )


def show_job(target: Target, job_id: str) -> tuple[str, ...]:
    """``scontrol -o show job ID``: one line with its state and exit code (read by
    :func:`.answers.parse_job`).

    Slurm remembers a finished job for MinJobAge (300 s by default); then it answers "Invalid job
    id specified" (``no_such_job``). Unlike sacct, it needs no accounting database.
    """
    return ("scontrol", *target.clusters(), "-o", "show", "job", check_job_id(job_id))


def show_node(target: Target, host: str) -> tuple[str, ...]:
    """``scontrol -o show node HOST``: its ``NodeAddr``, where others reach it
    (:func:`.answers.node_address`)."""
    return ("scontrol", *target.clusters(), "-o", "show", "node", check_name(host, "host name"))


def scancel(target: Target, job_id: str) -> tuple[str, ...]:
    """``scancel ID`` (a finished or unknown job is not an error for scancel 22.05)."""
    return ("scancel", *target.clusters(), check_job_id(job_id))


def lower_time_limit(target: Target, job_id: str, seconds: int) -> tuple[str, ...]:
    """``scontrol update JobId=ID TimeLimit=M``: ``seconds`` in whole minutes, rounded down.

    A user may lower their own job's limit (only an operator may raise one): a launcher does it
    to a job that waits past its slack, so that it still ends with its allocation."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 60:
        raise ValueError(f"invalid time limit {seconds!r}: at least one minute, in seconds")
    return (
        "scontrol", *target.clusters(), "update",
        f"JobId={check_job_id(job_id)}", f"TimeLimit={seconds // 60}",
    )  # fmt: skip
