"""OAR's answers about one container, one job and one host, as a launcher reads them
(``oarstat -J``, ``oarstat -J -f -j ID``, ``oarnodes -J --sql``).

Apart from :mod:`.parse`, which reads the whole server for the bridge (the Gantt, every
resource): a launcher needs only the container it was granted, the jobs it submitted and the
address of a host.

A job's ``exit_code`` is what OAR's ``oarexec`` got from ``waitpid`` on the user's shell: a wait
status, not an exit status (256 is exit 1; 9 is a process killed by SIGKILL). A job OAR killed
(``oardel``, its walltime) ends in ``Error`` with no exit code, and its events say why.
Recorded answers of OAR 2.5.9: tests/data/oar/deploy/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coorm_bridge.adapters.oar.parse import LIVE

#: Events that say why a job ended in Error, with what a user should read (the rest: OAR's own
#: description of the event).
REASONS: Mapping[str, str] = {
    "FRAG_JOB_REQUEST": "deleted (oardel)",
    "WALLTIME": "killed at the end of its walltime",
    "WORKING_DIRECTORY": "OAR could not enter its working directory on the first node",
    "OUTPUT_FILES": "OAR could not create its output files",
}
#: What OAR says of a waiting job it cannot place (an inner job: not in its container's hosts
#: or time).
NO_SLOT = "no_matching_slot"
#: Signal numbers occupy the low 7 bits of a wait status, the exit status the next 8.
_SIGNAL_MASK = 0x7F
_STOPPED = 0x7F


@dataclass(frozen=True, slots=True)
class JobDetails:
    """One job as ``oarstat -J -f -j ID`` described it."""

    id: str
    state: str
    """OAR's state (``Waiting``, ``Running``, ``Terminated``, ``Error``...)."""
    wait_status: int | None
    """``exit_code`` as OAR stores it (see the module's docstring); None while it runs."""
    events: tuple[str, ...] = ()
    """The types of its events, oldest first."""
    descriptions: tuple[str, ...] = ()
    message: str = ""

    @property
    def exit_code(self) -> int | None:
        """The exit status as a shell reports it: the process's, or 128 + the signal that
        killed it (None when OAR recorded none)."""
        status = decode_wait_status(self.wait_status)
        if status is None:
            return None
        code, signal = status
        return code if signal is None else 128 + signal

    @property
    def signal(self) -> int | None:
        status = decode_wait_status(self.wait_status)
        return None if status is None else status[1]

    @property
    def deleted(self) -> bool:
        """Deleted by someone's ``oardel`` (the walltime's kill is a deletion by OAR too: its
        ``FRAG_JOB_REQUEST`` comes with a ``WALLTIME`` event)."""
        return "FRAG_JOB_REQUEST" in self.events and "WALLTIME" not in self.events

    @property
    def reason(self) -> str | None:
        """Why OAR ended it, from its events (None: nothing said)."""
        for event, description in zip(
            reversed(self.events), reversed(self.descriptions), strict=True
        ):
            if event in REASONS:
                return REASONS[event]
            if event.endswith("ERROR") and description:
                return f"{event}: {description}"
        return None


def decode_wait_status(status: int | None) -> tuple[int, int | None] | None:
    """``(exit code, None)`` for a process that exited, ``(0, signal)`` for one a signal
    killed; None for no status or one that is neither (a stopped process, out of range)."""
    if status is None or isinstance(status, bool) or not 0 <= status <= 0xFFFF:
        return None
    signal = status & _SIGNAL_MASK
    if signal == 0:
        return status >> 8, None
    if signal == _STOPPED:
        return None
    return 0, signal


def job(data: Any, job_id: str) -> JobDetails | None:
    """The job of ``oarstat -J -f -j ID`` (None: OAR does not know it)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"oarstat -J printed {type(data).__name__}, not jobs")
    raw = data.get(job_id)
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or "state" not in raw:
        raise ValueError(f"oarstat -J: job {job_id} has no state: {str(raw)[:200]}")
    code = raw.get("exit_code")
    events = [e for e in raw.get("events") or () if isinstance(e, Mapping)]
    events.sort(key=lambda e: (_int(e.get("date")), _int(e.get("event_id"))))
    return JobDetails(
        id=job_id,
        state=str(raw["state"]),
        wait_status=code if isinstance(code, int) and not isinstance(code, bool) else None,
        events=tuple(str(e.get("type") or "") for e in events),
        descriptions=tuple(str(e.get("description") or "").strip() for e in events),
        message=str(raw.get("message") or ""),
    )


def container(data: Any, name: str) -> str | None:
    """The id of the live container named ``name`` in ``oarstat -J`` (every unfinished job):
    the newest when there are several (the bridge moves a placeholder by submitting a new one
    with the same name before it deletes the old one)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"oarstat -J printed {type(data).__name__}, not jobs")
    found = [
        int(key)
        for key, raw in data.items()
        if str(key).isdigit()
        and isinstance(raw, Mapping)
        and raw.get("name") == name
        and "container" in (raw.get("types") or ())
        and raw.get("state") in LIVE
    ]
    return str(max(found)) if found else None


def network_address(data: Any, host_property: str, host: str) -> str | None:
    """The ``network_address`` of ``host``'s resources in ``oarnodes -J`` (None: not said)."""
    if isinstance(data, Mapping):
        resources = list(data.values())
    elif isinstance(data, list):
        resources = data
    else:
        raise ValueError(f"oarnodes -J printed {type(data).__name__}, not resources")
    for raw in resources:
        if isinstance(raw, Mapping) and str(raw.get(host_property)) == host:
            address = raw.get("network_address")
            if address:
                return str(address)
    return None


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
