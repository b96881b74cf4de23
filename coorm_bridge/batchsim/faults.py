"""A site's faults: batch systems that do not answer, reservations refused, users it forgot.

Apart from the schedulers because they are the site's, not one scheduler's: a batch system in an
outage still runs its jobs (its scheduler goes on), it only does not answer; a simulated refusal
or an unknown user is decided before a request reaches the scheduler. Outages come from the
platform file or from a call; the other faults from calls (:mod:`.calls`), journaled as any
other, so that a restarted site has the same faults at the same times.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from coorm_bridge.core.batch import NotPermitted, Refused, ReservationSpec, Unavailable


class SimulatedRefusal(Refused):
    """A reservation request refused by ``refuse_reservations``: it used one refusal up."""


@dataclass
class _Outage:
    start: int
    end: int


@dataclass
class _Refusals:
    remaining: int
    reason: str


class Faults:
    """The faults in force on the clusters of one site, in the order they came."""

    def __init__(self, clusters: Iterable[str]) -> None:
        self._outages: dict[str, list[_Outage]] = {name: [] for name in clusters}
        self._refusals: dict[str, _Refusals] = {}
        self._unknown_users: set[str] = set()

    def add_outage(self, cluster: str, start: int, end: int) -> None:
        """``cluster``'s batch system does not answer during ``[start, end)`` (checked by the
        caller: the platform file's model, or the call's handling)."""
        self._outages[cluster].append(_Outage(start, end))

    def refuse(self, cluster: str, count: int, reason: str) -> None:
        """The next ``count`` reservation requests on ``cluster`` are refused for ``reason``."""
        self._refusals[cluster] = _Refusals(count, reason)

    def refusal_used(self, cluster: str) -> None:
        """A refusal was given (replayed from the journal: it changed nothing else)."""
        self._refusals[cluster].remaining -= 1

    def forget(self, user: str) -> None:
        """The batch systems no longer know ``user``: its reservations are refused for good."""
        self._unknown_users.add(user)

    def check_answering(self, cluster: str, now: int) -> None:
        """Unavailable while ``cluster``'s batch system is in an outage at ``now``."""
        for outage in self._outages[cluster]:
            if outage.start <= now < outage.end:
                raise Unavailable(
                    f"{cluster}: the batch system does not answer (simulated outage until "
                    f"{outage.end})",
                    cluster=cluster,
                )

    def check_reservation(self, cluster: str, spec: ReservationSpec) -> None:
        """Refuse a reservation for a user the site forgot, then by a simulated refusal (which
        uses one up): before the scheduler sees it, so a refusal changes nothing else."""
        strangers = sorted(set(spec.users) & self._unknown_users)
        if strangers:
            raise NotPermitted(
                f"{cluster}: Invalid user id: {', '.join(strangers)} (unknown to the simulated "
                "batch system)",
                cluster=cluster,
            )
        refusals = self._refusals.get(cluster)
        if refusals and refusals.remaining > 0:
            refusals.remaining -= 1
            raise SimulatedRefusal(
                f"{cluster}: {refusals.reason} (simulated refusal)", cluster=cluster
            )
