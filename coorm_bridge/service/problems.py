"""Problems only an admin can fix, as ``GET /v1/health`` shows them: logged once, until gone.

A batch system that refuses the bridge itself (Slurm: its account is not an operator) holds up
every session on that cluster, and no retry helps until an admin acts. Were each failed attempt
logged, the same line would come many times a minute forever and still not say what to do; here
the first report of a problem on a cluster is logged once at ERROR with its remedy, repeats only
keep it open, and its end is logged once too. Sessions keep their place and retry meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import AdapterError, LacksRights
from coorm_bridge.protocol import Problem, ProblemKind

log = logging.getLogger(__name__)

#: While a problem is open, its cluster is asked again at most this often (seconds), so that
#: health clears soon after an admin's fix even when no session is there to retry.
RECHECK_EVERY = 30


#: What the end of each kind of problem means, for the log.
_SOLVED: dict[ProblemKind, str] = {"rights": "the bridge may hold reservations there again"}


@dataclass(frozen=True, slots=True)
class _Open:
    message: str
    since: int
    checked: int


class Problems:
    """The open problems per (kind, cluster); thread-safe (polls, placements and health)."""

    def __init__(self) -> None:
        self._open: dict[tuple[ProblemKind, str], _Open] = {}
        self._lock = threading.Lock()

    def report(self, kind: ProblemKind, cluster: str, message: str, now: int) -> None:
        """``message`` says what is wrong and what to do; logged when the problem is new."""
        with self._lock:
            old = self._open.get((kind, cluster))
            since = now if old is None else old.since
            self._open[kind, cluster] = _Open(message, since, now)
        if old is None:
            log.error("cluster %s: %s", cluster, message)

    def clear(self, kind: ProblemKind, clusters: Iterable[str]) -> None:
        """The problem is gone on these clusters (a check or a placement went through)."""
        with self._lock:
            gone = [c for c in clusters if self._open.pop((kind, c), None) is not None]
        for cluster in gone:
            log.warning("cluster %s: solved: %s", cluster, _SOLVED[kind])

    def has(self, kind: ProblemKind, cluster: str) -> bool:
        with self._lock:
            return (kind, cluster) in self._open

    def due(self, kind: ProblemKind, cluster: str, now: int) -> bool:
        """Whether an open problem should be checked again now (see :data:`RECHECK_EVERY`)."""
        with self._lock:
            found = self._open.get((kind, cluster))
        return found is not None and now - found.checked >= RECHECK_EVERY

    def listed(self) -> tuple[Problem, ...]:
        """The open problems, one per kind and message with every cluster it concerns."""
        with self._lock:
            items = sorted(self._open.items())
        grouped: dict[tuple[ProblemKind, str], list[tuple[str, int]]] = {}
        for (kind, cluster), found in items:
            grouped.setdefault((kind, found.message), []).append((cluster, found.since))
        return tuple(
            Problem(
                kind=kind,
                clusters=tuple(cluster for cluster, _ in where),
                message=message,
                since=min(since for _, since in where),
            )
            for (kind, message), where in grouped.items()
        )


def check_rights(adapter: Adapter, problems: Problems, clusters: Iterable[str], now: int) -> None:
    """Ask each cluster's batch system whether the bridge may hold reservations there, and
    open or close its problem accordingly; a cluster that cannot tell now keeps its state."""
    for cluster in clusters:
        try:
            adapter.check_rights(cluster)
        except LacksRights as lacking:
            problems.report("rights", cluster, lacking.reason, now)
        except AdapterError as error:
            log.info("cluster %s: the bridge's rights could not be checked now: %s", cluster, error)
        else:
            problems.clear("rights", [cluster])
