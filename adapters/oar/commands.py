"""Argument vectors for OAR's commands and the REST API's job bodies, and what their answers say.

Every builder returns a tuple of arguments, never a shell string. Names that reach OAR's SQL
property expressions (cluster values, host names, properties) are checked with the data model's
:data:`~coorm_bridge.core.model.NAME_PATTERN` (letters, digits, ``-``, ``_``, ``.``: no quote
can close the expression), users with :data:`~coorm_bridge.core.model.USER_NAME_PATTERN`.

Times: OAR reads reservation dates in the local time of the process that parses them. The
commands run with :data:`ENV` (``TZ=UTC``) and dates are written as UTC; the REST API's server
has its own zone, given in the settings.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Final
from zoneinfo import ZoneInfo

from coorm_bridge.adapters.batch.backend import BatchFailure, ErrorKind
from coorm_bridge.adapters.batch.names import check_name, check_user
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.core.batch import JobSpec, ReservationSpec
from coorm_bridge.core.model import ENV_NAME_PATTERN

#: The environment every command runs with (see the module's docstring).
ENV: Final[dict[str, str]] = {"TZ": "UTC"}
DATE_FORMAT: Final = "%Y-%m-%d %H:%M:%S"
#: Placeholders are containers (users' jobs go inside with ``-t inner=ID``) that run nothing.
PLACEHOLDER_TYPES: Final = ("container", "noop")
#: Where oarsub records the launching directory of a placeholder (it runs nothing there).
LAUNCHING_DIRECTORY: Final = "/tmp"  # noqa: S108 - nothing is written there

PLACEHOLDER_COMMAND: Final = "coorm-placeholder"
JOB_ID: Final = re.compile(r"^[0-9]{1,18}$")
_CREATED = re.compile(r"^OAR_JOB_ID=([0-9]{1,18})\s*$", re.MULTILINE)
_UNQUOTABLE = re.compile(r"['\x00-\x1f\x7f]")
_COULD_RUN = re.compile(r"This reservation could run at ([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8})")


def check_job_id(value: str) -> str:
    if not isinstance(value, str) or not JOB_ID.fullmatch(value):
        raise ValueError(f"invalid OAR job id {value!r}: digits")
    return value


def format_date(timestamp: int, zone: str = "UTC") -> str:
    """Unix seconds as OAR reads a date in ``zone``: ``2026-11-21 09:13:07``."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise ValueError(f"invalid time {timestamp!r}: whole Unix seconds >= 0")
    return datetime.fromtimestamp(timestamp, ZoneInfo(zone)).strftime(DATE_FORMAT)


def parse_date(text: str, zone: str = "UTC") -> int:
    """A date OAR printed in ``zone`` as Unix seconds."""
    naive = datetime.strptime(text, DATE_FORMAT)
    return int(naive.replace(tzinfo=ZoneInfo(zone)).astimezone(UTC).timestamp())


def walltime(seconds: int) -> str:
    """OAR's ``H:M:S`` (hours may exceed 24)."""
    if seconds <= 0:
        raise ValueError(f"invalid walltime {seconds!r}: at least one second")
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def selection(binding: OarBinding, hosts: Sequence[str] = ()) -> str:
    """The SQL property expression of a cluster's resources (and of some of its hosts)."""
    prop = check_name(binding.property, "property")
    expression = f"{prop}='{check_name(binding.value, 'cluster value')}'"
    if hosts:
        host_property = check_name(binding.host_property, "host property")
        named = ",".join(f"'{check_name(h, 'host name')}'" for h in sorted(set(hosts)))
        expression += f" AND {host_property} IN ({named})"
    return expression


def resources(binding: OarBinding, hosts: int, seconds: int) -> str:
    """``-l``: so many hosts (all of each one's resources) for so long."""
    host_property = check_name(binding.host_property, "host property")
    if hosts <= 0:
        raise ValueError(f"invalid host count {hosts!r}")
    return f"/{host_property}={hosts},walltime={walltime(seconds)}"


def as_user(user: str | None) -> tuple[str, ...]:
    """The prefix that runs a command as ``user`` (the bridge's own identity: none). OAR's
    commands act as the Unix user who runs them; ``runuser`` needs root."""
    return () if user is None else ("runuser", "-u", check_user(user), "--")


def create_reservation(
    binding: OarBinding, spec: ReservationSpec, user: str | None
) -> tuple[str, ...]:
    """``oarsub -r`` a container on ``spec``'s hosts of one cluster, named ``spec.name``."""
    types = [arg for kind in PLACEHOLDER_TYPES for arg in ("-t", kind)]
    return (
        *as_user(user),
        "oarsub",
        "-r",
        format_date(spec.start),
        *types,
        "-n",
        check_name(spec.name, "reservation name"),
        "-d",
        LAUNCHING_DIRECTORY,
        "-p",
        selection(binding, spec.host_names),
        "-l",
        resources(binding, spec.size, spec.end - spec.start),
        placeholder_command(spec.start),
    )


def placeholder_command(start: int) -> str:
    """What a placeholder records as its command (a noop job runs none): its start as asked.
    OAR reports a begun reservation from when it launched it, seconds later; the bridge's
    promise is the start it asked for (:func:`.parse.held` reads it back)."""
    return f"{PLACEHOLDER_COMMAND} start={start}"


def delete_job(job_id: str, user: str | None) -> tuple[str, ...]:
    return (*as_user(user), "oardel", check_job_id(job_id))


_FOLDER = re.compile(r"^/[A-Za-z0-9_./@+-]{0,4095}$")


def check_folder(path: str) -> str:
    """An absolute folder of plain characters: OAR's API puts it in a shell command line."""
    if not _FOLDER.fullmatch(path) or "/../" in f"{path}/":
        raise ValueError(
            f"invalid working folder {path!r}: an absolute path of letters, digits and ._@+-/"
        )
    return path


def _exports(job: JobSpec) -> list[tuple[str, str]]:
    """A job's environment, sorted, with names a shell can set (ValueError otherwise)."""
    for key in job.environment:
        if not isinstance(key, str) or not ENV_NAME_PATTERN.fullmatch(key):
            raise ValueError(
                f"invalid environment variable name {key!r}: letters, digits and '_', "
                "not starting with a digit"
            )
    return [(key, shlex.quote(value)) for key, value in sorted(job.environment.items())]


def _words(argv: Sequence[str]) -> str:
    """An argument vector as one shell command, every word quoted (a first word with ``=``
    too: unquoted, the shell would take it for an assignment)."""
    first, *rest = argv
    quoted = shlex.quote(first)
    if quoted == first and "=" in first:
        quoted = f"'{first}'"
    return " ".join([quoted, *(shlex.quote(arg) for arg in rest)])


def job_script(job: JobSpec) -> str:
    """A job as a script (what OAR's REST API takes as it is): its environment exported, then
    its argument vector run in place of the shell, every word quoted."""
    exports = [f"export {key}={value}\n" for key, value in _exports(job)]
    return "#!/bin/sh\n" + "".join(exports) + f"exec {_words(job.argv)}\n"


def submit_inner(
    binding: OarBinding,
    job: JobSpec,
    container: str,
    user: str | None,
    *,
    hosts: Sequence[str] = (),
    output: str | None = None,
    error: str | None = None,
) -> tuple[str, ...]:
    """``oarsub -t inner=ID`` a job into a container, on its cluster, as ``user``.

    ``hosts``: exactly these hosts (as many as ``job.hosts``: a launcher deploys on the hosts a
    start granted); ``output``/``error``: the job's files (``-O``/``-E``; OAR replaces
    ``%jobid%``). The command is one argument vector, which OAR runs on the first node as
    ``$SHELL -c COMMAND`` (the user's login shell): every word is quoted there
    (:func:`command_line`).
    """
    kind = f"inner={check_job_id(container)}"
    return _submit(binding, job, kind, user, hosts=hosts, output=output, error=error)


def submit_besteffort(
    binding: OarBinding,
    job: JobSpec,
    user: str | None,
    *,
    hosts: Sequence[str] = (),
    output: str | None = None,
    error: str | None = None,
) -> tuple[str, ...]:
    """``oarsub -t besteffort``: a job outside any container, which OAR kills itself when a job
    or a container needs its hosts (a preemptible request's work); otherwise as
    :func:`submit_inner`."""
    return _submit(binding, job, "besteffort", user, hosts=hosts, output=output, error=error)


def _submit(
    binding: OarBinding,
    job: JobSpec,
    kind: str,
    user: str | None,
    *,
    hosts: Sequence[str],
    output: str | None,
    error: str | None,
) -> tuple[str, ...]:
    name = check_name(job.name, "job name")
    chosen = [check_name(host, "host name") for host in hosts]
    if chosen and (len(set(chosen)) != job.hosts or len(chosen) != job.hosts):
        raise ValueError(f"job {name!r} asks for {job.hosts} hosts but names {len(chosen)}")
    files: list[str] = []
    for option, path in (("-O", output), ("-E", error)):
        if path is not None:
            files += [option, check_path(path, "output file" if option == "-O" else "error file")]
    return (
        *as_user(user),
        "oarsub",
        "-t",
        kind,
        "-n",
        name,
        "-d",
        check_path(job.workdir or LAUNCHING_DIRECTORY, "working directory"),
        "-p",
        selection(binding, chosen),
        "-l",
        resources(binding, job.hosts, job.walltime),
        *files,
        command_line(job.argv, job.environment),
    )


def change_walltime(job_id: str, seconds: int, user: str | None) -> tuple[str, ...]:
    """``oarwalltime ID +H:M:S`` (or ``-``): ask OAR to change a running job's walltime."""
    sign = "+" if seconds >= 0 else "-"
    return (*as_user(user), "oarwalltime", check_job_id(job_id), f"{sign}{walltime(abs(seconds))}")


def notify_scheduler() -> tuple[str, ...]:
    """Ask Almighty for a scheduler pass (``oarnotify``: root and the oar group only)."""
    return ("oarnotify", "Scheduling")


def check_path(value: str, what: str) -> str:
    """A path OAR can use: oarexec puts it between single quotes in its own shell commands
    (``cd '$dir'``, ``tee -a '$file'``), so a quote or a control character would break them."""
    if not isinstance(value, str) or not value or _UNQUOTABLE.search(value):
        raise ValueError(f"invalid {what} {value!r}: no quote or control character")
    return value


def command_line(argv: Sequence[str], environment: Mapping[str, str]) -> str:
    """``argv`` with its environment as one shell command line, every word quoted.

    OAR runs it as ``$SHELL -c LINE`` with the user's login shell, and exports nothing of the
    submitter's environment: the variables are set by ``env``, a program, so no shell's own
    syntax (``export``, ``setenv``) is needed. The words are quoted for POSIX shells
    (:func:`shlex.join`; csh-family shells read those single quotes too, but not a newline
    inside them). ``env`` takes every leading ``NAME=VALUE`` word for a variable: a command
    whose name holds ``=`` would silently not run, so it is refused.
    """
    if not argv or not argv[0]:
        raise ValueError("an empty command")
    if not environment:
        # Quoted, a first word with '=' is a command's name, never an assignment.
        first = shlex.quote(argv[0])
        if "=" in first and not first.startswith("'"):
            first = f"'{first}'"
        return " ".join([first, *(shlex.quote(word) for word in argv[1:])])
    if "=" in argv[0]:
        raise ValueError(f"command {argv[0]!r}: a name with '=' would be read by env as a variable")
    for key in environment:
        check_env_name(key)
    return shlex.join(["env", *(f"{k}={v}" for k, v in environment.items()), *argv])


def check_env_name(value: str) -> str:
    if not ENV_NAME_PATTERN.fullmatch(value):
        raise ValueError(f"invalid environment variable name {value!r}")
    return value


def gantt(start: int, end: int) -> tuple[str, ...]:
    """Every job and reservation placed between two dates (OAR's cheapest full view)."""
    return ("oarstat", "-J", "--gantt", f"{format_date(start)}, {format_date(end)}")


def nodes() -> tuple[str, ...]:
    return ("oarnodes", "-J")


def host_resources(binding: OarBinding, host: str) -> tuple[str, ...]:
    """``oarnodes -J`` of one host's resources only (their ``network_address`` among them)."""
    return hosts_resources(binding, (host,))


def hosts_resources(binding: OarBinding, hosts: Sequence[str]) -> tuple[str, ...]:
    """``oarnodes -J`` of these hosts' resources only, in one call."""
    host_property = check_name(binding.host_property, "host property")
    named = ",".join(f"'{check_name(host, 'host name')}'" for host in hosts)
    if not hosts:
        raise ValueError("no host to look up")
    if len(hosts) == 1:
        return ("oarnodes", "-J", "--sql", f"{host_property}={named}")
    return ("oarnodes", "-J", "--sql", f"{host_property} IN ({named})")


def show_job(job_id: str) -> tuple[str, ...]:
    return ("oarstat", "-J", "-f", "-j", check_job_id(job_id))


def current_jobs() -> tuple[str, ...]:
    """Every job not finished, with its name and type (for a placeholder by name)."""
    return ("oarstat", "-J")


# -- answers -----------------------------------------------------------------------------------


def created_job_id(output: str) -> str:
    """The job id oarsub printed (``OAR_JOB_ID=14``); ValueError when it printed none."""
    found = _CREATED.findall(output)
    if not found:
        raise ValueError(f"oarsub printed no OAR_JOB_ID: {output.strip()[-300:]!r}")
    return str(found[-1])


#: OAR 2.5.9's admission rules: no job as root or oar; 2 waiting reservations per user unless
#: listed in unlimited_reservation.users (rule 12).
ROOT_REFUSED = "root and oar users are not allowed to submit"
RESERVATIONS_CAPPED = "waiting advance reservations"
#: oarsub's exit status when an admission rule died (``add_micheline_job`` returns -2); the
#: REST API says it in its message (HTTP 500).
ADMISSION_STATUS: Final = 254
ADMISSION_REFUSED: Final = "OAR's admission rules refused it"
_API_STATUS = re.compile(r"Oarsub command exited with status ([0-9]{1,3}):")
_API_COMMAND = re.compile(r"\n\s*\nCmd:\n.*\Z", re.DOTALL)
#: What OAR 2.5.9 prints, to the kind of failure it is (the first that matches wins).
_SAID: tuple[tuple[str, ErrorKind, str], ...] = (
    ("Reservation not valid", "overlap", ""),
    (
        ROOT_REFUSED,
        "no_rights",
        "; OAR lets no job be submitted as root or oar: set submit_as to another account, or "
        "let the bridge act as each owner (REST API behind a trusted proxy, or runuser)",
    ),
    (
        RESERVATIONS_CAPPED,
        "no_rights",
        "; list the placeholders' owners (or the submit_as account) in OAR's "
        "unlimited_reservation.users (admission rule 12 caps everyone else at 2 waiting "
        "reservations)",
    ),
    ("invalid container id", "no_such_reservation", ""),
    ("You are not the right user", "no_such_job", ""),
    # oardel of a job OAR is already killing (a move's old container, read before it ended):
    # deleted already, as far as the bridge is concerned.
    ("This job was already killed", "no_such_job", ""),
    ("Unknown user", "invalid_user", ""),
)


def refusal(status: int, output: str, zone: str = "UTC") -> BatchFailure:
    """What a failed oarsub or oardel said, as a :class:`BatchFailure` of the right kind.

    ``Reservation not valid --> KO (This reservation could run at …)`` (exit 10) is a conflict
    carrying OAR's suggestion, in ``zone``; OAR's own admission rules (exit 254) are the bridge's
    lack of rights, said with the setting an admin should change (:meth:`.OarBackend.as_owner`
    says them of the owner instead), and any other rule's refusal is final for that request
    (``invalid_user``: that session ends, with the rule's words); ``oardel`` says "not the right
    user" of a job it does not know (exit 1).
    """
    text = output.strip()
    said = text[-600:] or f"exit status {status}"
    for words, kind, remedy in _SAID:
        if words in text:
            match = _COULD_RUN.search(text) if kind == "overlap" else None
            hint = parse_date(match.group(1), zone) if match else None
            return BatchFailure(kind, said + remedy, retry_after=hint)
    api = _API_STATUS.search(text)
    if status == ADMISSION_STATUS or (api is not None and int(api.group(1)) == ADMISSION_STATUS):
        # A site's rule: its verdict on this request by this user, which the same request
        # would get again (rule 12's count, the one that changes, is matched above).
        return BatchFailure("invalid_user", f"{ADMISSION_REFUSED}: {admission_words(text)}")
    return BatchFailure("other", said)


def admission_words(output: str) -> str:
    """The words of the admission rule that refused a submission: the last line oarsub wrote
    (OAR warns the rule's ``die`` text after everything the rules printed; the REST API adds
    the command line after it), at most 600 characters."""
    lines = [line.strip() for line in _API_COMMAND.sub("", output).splitlines()]
    said = [line for line in lines if line]
    return said[-1][-600:] if said else f"exit status {ADMISSION_STATUS}"
