"""What the cluster accepts, as Slurm 22.05 decides it: jobs, reservations and their hosts.

The embedded platform stands in for a production batch system, so its refusals are Slurm's, with
Slurm's reasons (the bridge and its tests rely on them): a job larger than the cluster or its
reservation, a reservation in the past, on hosts that are busy, down or reserved. A reservation
that a later start would cure says when (``retry_after``). Nothing here changes the cluster: it
reads the hosts, the plan's up hosts, the running jobs and the reservations, and answers.
"""

from __future__ import annotations

from coorm_bridge.batchsim.scheduler.book import ReservationBook, ReservationEntry
from coorm_bridge.batchsim.scheduler.events import Calendar
from coorm_bridge.batchsim.scheduler.hostplan import HostPlan, lowest_bits
from coorm_bridge.batchsim.scheduler.hosts import Hosts
from coorm_bridge.batchsim.scheduler.jobs import LocalJobSpec
from coorm_bridge.batchsim.scheduler.running import RunningJobs
from coorm_bridge.core.batch import Refused, ReservationSpec

#: Seconds in the past a new reservation may start, as Slurm 22.05 allows (MAX_RESV_DELAY in
#: slurmctld's reservation.c); the reservation keeps that start, and takes only hosts free now.
LATE_CREATION = 600
#: The same for a reservation moved to a new start (slurmctld allows a minute there).
LATE_MOVE = 60


class Admission:
    """Slurm's checks on one cluster; ``current`` below is the reservation being updated (None:
    a new one)."""

    def __init__(
        self,
        cluster: str,
        *,
        hosts: Hosts,
        plan: HostPlan,
        running: RunningJobs,
        book: ReservationBook,
        calendar: Calendar,
    ) -> None:
        self.cluster = cluster
        self._hosts = hosts
        self._plan = plan
        self._running = running
        self._book = book
        self._calendar = calendar

    def refused(self, message: str, retry_after: int | None = None) -> Refused:
        return Refused(f"{self.cluster}: {message}", cluster=self.cluster, retry_after=retry_after)

    # -- jobs -----------------------------------------------------------------------------------

    def check_job(self, spec: LocalJobSpec) -> int:
        """Refused unless the cluster, or its reservation, can ever hold ``spec``; the mask of
        the hosts it names (0: none)."""
        size = len(self._hosts)
        if spec.hosts > size:
            raise self.refused(
                f"Requested node configuration is not available: {spec.hosts} hosts asked, "
                f"{self.cluster} has {size}"
            )
        named = self._job_hosts(spec)
        if spec.reservation is None:
            return named
        reservation = self._book.get(spec.reservation)
        if reservation is None:
            raise self.refused(
                f"Requested reservation is invalid: no reservation {spec.reservation}"
            )
        if spec.user not in reservation.users:
            raise self.refused(
                f"Access denied to requested reservation: {spec.user} is not a user of "
                f"{spec.reservation}"
            )
        if spec.hosts > reservation.mask.bit_count():
            raise self.refused(
                f"Requested node configuration is not available: {spec.hosts} hosts asked, "
                f"reservation {spec.reservation} holds {reservation.mask.bit_count()}"
            )
        if named & ~reservation.mask:
            raise self.refused(
                "Requested node configuration is not available: "
                + ", ".join(self._hosts.names_of(named & ~reservation.mask))
                + f" not in reservation {spec.reservation}"
            )
        return named

    def _job_hosts(self, spec: LocalJobSpec) -> int:
        """The mask of the hosts a job names (0: none), refused as Slurm refuses a
        ``--nodelist`` it cannot use: an unknown or repeated name, a count that differs."""
        if not spec.host_names:
            return 0
        if len(spec.host_names) != spec.hosts:
            raise self.refused(
                f"Node count specification invalid: {len(spec.host_names)} hosts named, "
                f"{spec.hosts} asked"
            )
        return self._mask_of(spec.host_names)

    # -- reservations ---------------------------------------------------------------------------

    def check_reservation(self, spec: ReservationSpec, current: ReservationEntry | None) -> None:
        """Refused when ``spec`` is larger than the cluster or in the past."""
        size, now = spec.size, self._calendar.now
        if size > len(self._hosts):
            raise self.refused(
                f"Requested node configuration is not available: {size} hosts asked, "
                f"{self.cluster} has {len(self._hosts)}"
            )
        late = _late_allowed(spec, current)
        if (late is not None and spec.start < now - late) or spec.end <= now:
            raise self.refused(
                f"Invalid time specification: [{spec.start}, {spec.end}) is in the past "
                f"(now {now})",
                self._retry_after(spec, current),
            )

    def choose_hosts(self, spec: ReservationSpec, current: ReservationEntry | None) -> int:
        """The hosts ``spec`` gets, or Refused with Slurm's reason and a retry hint.

        Named hosts must all suit; otherwise the lowest-index suitable hosts (an update keeps
        its current ones first, and always those its running jobs use).
        """
        ignore = None if current is None else current.name
        up = self._plan.up
        busy = self._running.busy(spec.start, ignore)
        taken = self._book.overlapping(spec.start, spec.end, ignore)
        must = 0 if current is None else self._running.hosts_of(current.name)
        if spec.host_names:
            return self._check_named(spec, current, must, busy, taken)
        size = spec.hosts
        if must.bit_count() > size:
            raise self.refused(
                f"Requested reservation is in use: its running jobs use {must.bit_count()} "
                f"hosts, more than {size}"
            )
        free = up & ~busy & ~taken & ~must
        if (free | must).bit_count() < size:
            if up.bit_count() < size:
                reason = f"Requested nodes are busy: only {up.bit_count()} hosts are up"
            elif (up & ~busy).bit_count() >= size and (up & ~taken).bit_count() < size:
                reason = "Reservation request overlaps with another reservation"
            else:
                reason = "Requested nodes are busy"
            raise self.refused(
                f"{reason} ({(free | must).bit_count()} of {size} hosts free over "
                f"[{spec.start}, {spec.end}))",
                self._retry_after(spec, current),
            )
        mask = must
        if current is not None:
            mask |= lowest_bits(current.mask & free, size - mask.bit_count())
        return mask | lowest_bits(free & ~mask, size - mask.bit_count())

    def replacement(self, reservation: ReservationEntry) -> int:
        """Hosts that could stand in for a host of ``reservation`` that went down: up, not its
        own, free of running jobs from its start (or now) and of other reservations."""
        now = self._calendar.now
        return (
            self._plan.up
            & ~reservation.mask
            & ~self._running.busy(max(reservation.start, now), None)
            & ~self._book.overlapping(reservation.start, reservation.end, reservation.name)
        )

    # -- internals ------------------------------------------------------------------------------

    def _mask_of(self, names: tuple[str, ...]) -> int:
        mask = 0
        for name in names:
            index = self._hosts.find(name)
            if index is None:
                raise self.refused(f"Invalid node name specified: {name} is not in {self.cluster}")
            if mask >> index & 1:
                raise self.refused(f"Invalid node name specified: {name} is named twice")
            mask |= 1 << index
        return mask

    def _check_named(
        self,
        spec: ReservationSpec,
        current: ReservationEntry | None,
        must: int,
        busy: int,
        taken: int,
    ) -> int:
        """The named hosts of ``spec`` if all suit (``must``: its running jobs' hosts)."""
        mask = self._mask_of(spec.host_names)
        up = self._plan.up
        names_of = self._hosts.names_of
        if must & ~mask:
            raise self.refused(
                f"Requested reservation is in use: its running jobs use hosts outside "
                f"{', '.join(spec.host_names)}"
            )
        if mask & taken:
            raise self.refused(
                "Reservation request overlaps with another reservation: "
                + ", ".join(names_of(mask & taken)),
                self._retry_after(spec, current),
            )
        if mask & busy:
            raise self.refused(
                "Requested nodes are busy: " + ", ".join(names_of(mask & busy)),
                self._retry_after(spec, current),
            )
        if mask & ~up & ~must:
            raise self.refused(
                "Requested nodes are busy: "
                + ", ".join(names_of(mask & ~up & ~must))
                + " down or drained"
            )
        return mask

    def _fits(self, spec: ReservationSpec, current: ReservationEntry | None, start: int) -> bool:
        """Whether ``spec`` moved to ``start`` would get its hosts (same size and duration)."""
        ignore = None if current is None else current.name
        end = start + spec.end - spec.start
        must = 0 if current is None else self._running.hosts_of(current.name)
        free = (
            self._plan.up
            & ~self._running.busy(start, ignore)
            & ~self._book.overlapping(start, end, ignore)
        ) | must
        if spec.host_names:
            named = 0
            for name in spec.host_names:
                index = self._hosts.find(name)
                if index is None:
                    return False
                named |= 1 << index
            return not named & ~free
        return free.bit_count() >= spec.hosts

    def _retry_after(self, spec: ReservationSpec, current: ReservationEntry | None) -> int | None:
        """The earliest start at which the same reservation would succeed, if any: hosts free
        up only when running jobs reach their bound or other reservations end."""
        base = max(spec.start, self._calendar.now)
        ignore = None if current is None else current.name
        candidates = {base}
        candidates.update(self._running.bounds_after(base))
        candidates.update(r.end for r in self._book.values() if r.end > base and r.name != ignore)
        return next((t for t in sorted(candidates) if self._fits(spec, current, t)), None)


def _late_allowed(spec: ReservationSpec, current: ReservationEntry | None) -> int | None:
    """How far before now ``spec`` may start (None: its start does not change). A start planned
    for "now" reaches the batch system a moment later, and Slurm takes it as asked
    (:data:`LATE_CREATION`, :data:`LATE_MOVE`): refusing it would fail every placement that
    crossed a second on its way."""
    if current is None:
        return LATE_CREATION
    return LATE_MOVE if spec.start != current.start else None
