"""Changing a placeholder the way OAR allows: OAR 2.5 cannot move an advance reservation, nor
resize it or give it to another user. So a placeholder that has not begun is re-submitted:

1. a new container with the same name at the new time, then the old one deleted: no moment
   without a reservation, when OAR can hold both (the new time does not need the old one's
   hosts);
2. otherwise the old one deleted first, then the new one submitted: a gap of one ``oardel`` and
   one ``oarsub -r`` (about a scheduler pass; ``benchmarks/oar_moves.py`` measures it) in which
   OAR's scheduler could start a waiting job on those hosts; if OAR refuses the new one, the old
   one is submitted again as it was, and the refusal (with OAR's suggested time) is raised.

A placeholder that has begun keeps its start (the adapter refuses to move it). A shorter end
is no change at all: the longer reservation still holds what is asked, and the bridge deletes
it when its ghost expires. A longer end is asked of ``oarwalltime`` where the admin enabled it
(OAR applies it at its next pass, if the hosts are free); anything else (other hosts, another
owner) cannot be done in place and fails as an :class:`AdapterError`, so the bridge releases
and holds again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from coorm_bridge.adapters.batch.backend import BatchFailure
from coorm_bridge.adapters.oar import parse
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.core.batch import ReservationSpec

if TYPE_CHECKING:
    from coorm_bridge.core.batch import Reservation

log = logging.getLogger(__name__)


class Writes(Protocol):
    """What a back-end offers the mover."""

    def held(
        self, binding: OarBinding, name: str, now: int
    ) -> list[tuple[parse.OarJob, Reservation]]:
        """The live containers named ``name`` on the cluster, oldest first."""
        ...

    def owner(self, users: Sequence[str]) -> str: ...

    def submit_reservation(self, binding: OarBinding, spec: ReservationSpec) -> str: ...

    def delete_job(self, job: parse.OarJob) -> None: ...

    def extend(self, job: parse.OarJob, seconds: int) -> None: ...


#: Seconds to wait for OAR to end a deleted reservation (it does so at its next pass).
GONE_WITHIN = 30.0


class Mover:
    def __init__(self, writes: Writes, clock: Callable[[], float] = time.time) -> None:
        self.writes = writes
        self.clock = clock
        self.last_gap: float | None = None
        """Seconds the last delete-first move left without a reservation (for benchmarks)."""

    def now(self) -> int:
        return int(self.clock())

    def update(self, binding: OarBinding, spec: ReservationSpec, *, begun: bool) -> None:
        found = self.writes.held(binding, spec.name, self.now())
        if not found:
            raise BatchFailure("no_such_reservation", f"no reservation named {spec.name}")
        *stale, (job, current) = found
        for old, _ in stale:  # left by a move cut short: the newest is the one
            self.writes.delete_job(old)
        owner = self.writes.owner(spec.users)
        same_hosts = (
            set(current.host_names) == set(spec.host_names)
            if spec.host_names
            else current.hosts == spec.size
        )
        if begun or current.start <= self.now():
            if owner != job.owner or not same_hosts:
                raise BatchFailure(
                    "other",
                    f"OAR cannot give a begun reservation ({spec.name}) other hosts or another "
                    "owner",
                )
            if current.end < spec.end:
                self.writes.extend(job, spec.end - current.end)
            return
        if spec.unmet_by(current) is None and owner == job.owner and current.end == spec.end:
            return
        self._resubmit(binding, spec, job, current)

    def _resubmit(
        self, binding: OarBinding, spec: ReservationSpec, job: parse.OarJob, current: Reservation
    ) -> None:
        try:
            self.writes.submit_reservation(binding, spec)
        except BatchFailure as first:
            if first.kind != "overlap":
                raise
        else:
            self.writes.delete_job(job)
            return
        # Only with the old one gone can OAR place the new one (it needs the same hosts).
        gone = time.monotonic()
        self.writes.delete_job(job)
        self._wait_gone(binding, spec.name, job.id)
        try:
            self.writes.submit_reservation(binding, spec)
        except BatchFailure as refused:
            back = ReservationSpec(
                name=current.name,
                start=current.start,
                end=current.end,
                host_names=current.host_names,
                users=(job.owner,) if job.owner else spec.users,
            )
            try:
                self.writes.submit_reservation(binding, back)
            except BatchFailure as lost:
                log.warning("%s: %s lost while moving it: %s", binding.name, spec.name, lost)
                raise BatchFailure(
                    "other", f"{spec.name}: moved away and not held again: {refused}; {lost}"
                ) from lost
            raise
        finally:
            self.last_gap = time.monotonic() - gone
        log.info(
            "%s: %s moved by deleting first, %.2f s without a reservation",
            binding.name,
            spec.name,
            self.last_gap,
        )

    def _wait_gone(self, binding: OarBinding, name: str, job_id: str) -> None:
        """oardel only registers the deletion: wait until OAR no longer holds the job."""
        deadline = time.monotonic() + GONE_WITHIN
        while any(j.id == job_id for j, _ in self.writes.held(binding, name, self.now())):
            if time.monotonic() > deadline:
                raise BatchFailure("unreachable", f"OAR did not end job {job_id} in time")
            time.sleep(0.2)
