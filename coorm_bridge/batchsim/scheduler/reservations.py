"""The scheduler's advance reservations and node states, with Slurm's checks and refusals.

Together because both decide which hosts are left for pending jobs: a reservation holds named
hosts over its window; a host that goes down or is drained leaves the plan until it is up again,
and DOWN kills its job and has it replaced in the reservations holding it (Slurm's
REPLACE_DOWN). Lost capacity invalidates the plans it broke, and capacity given back is freed
for compression (:mod:`.backfilling`). Creations and updates are checked as Slurm checks them;
a refusal that a later start could cure says when the same request would succeed.

:class:`ReservationsMixin` is a mixin of :class:`.scheduler.LocalScheduler` for the same reason
as :class:`.backfilling.BackfillingMixin`: it changes the scheduler's own plan and jobs. The
attributes it shares are declared on it; the methods it calls elsewhere in the scheduler are
declared for type checking only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from coorm_bridge.batchsim.scheduler.hostplan import FOREVER, HostPlan, lowest_bits
from coorm_bridge.batchsim.scheduler.jobs import (
    _NODE,
    _RESERVATION_END,
    _RESERVATION_START,
    _Job,
    _Reservation,
)
from coorm_bridge.core.batch import (
    JobState,
    Node,
    NodeState,
    Refused,
    ReservationHandle,
    ReservationSpec,
)

#: Seconds in the past a new reservation may start, as Slurm 22.05 allows (MAX_RESV_DELAY in
#: slurmctld's reservation.c); the reservation keeps that start, and takes only hosts free now.
LATE_CREATION = 600
#: The same for a reservation moved to a new start (slurmctld allows a minute there).
LATE_MOVE = 60


class ReservationsMixin:
    """Reservations and node states of :class:`.scheduler.LocalScheduler`."""

    # Set up by LocalScheduler.__init__.
    cluster: str
    _names: tuple[str, ...]
    _index: dict[str, int]
    _states: list[NodeState]
    _nodes: tuple[Node, ...] | None
    _node_changes: list[tuple[int, NodeState]]
    _now: int
    _plan: HostPlan
    _queue: dict[str, _Job]
    _running: dict[str, _Job]
    _running_mask: int
    _reservations: dict[str, _Reservation]
    _full_pass: bool

    if TYPE_CHECKING:  # defined by LocalScheduler and BackfillingMixin

        def _push(self, time: int, kind: int, key: str, token: int = 0) -> None: ...

        def _refused(self, message: str, retry_after: int | None = None) -> Refused: ...

        def _host_names(self, mask: int) -> tuple[str, ...]: ...

        def _own_running(self, name: str) -> list[_Job]: ...

        def _set_bound(self, job: _Job, bound: int) -> None: ...

        def _end_job(self, job: _Job, state: JobState) -> None: ...

        def _settle(self, arrivals: Sequence[_Job] = ()) -> None: ...

        def _free(self, mask: int, start: int, end: int) -> None: ...

        def _invalidate(self, force: str | None = None) -> None: ...

        def _drop_pending(self, job: _Job, state: JobState = JobState.CANCELLED) -> None: ...

    # -- reservations -----------------------------------------------------------------------

    def create_reservation(self, spec: ReservationSpec) -> ReservationHandle:
        """Hold hosts for ``spec``; pending jobs never block it, they are re-planned around it."""
        if spec.name in self._reservations:
            raise self._refused(f"Duplicate reservation name: {spec.name} already exists")
        self._check_reservation(spec, None)
        mask = self._choose_hosts(spec, None)
        reservation = _Reservation(spec, mask)
        self._reservations[spec.name] = reservation
        self._plan.reserve(mask, spec.start, spec.end)
        self._push_reservation_events(reservation)
        self._invalidate()
        self._settle()
        return self._handle(reservation)

    def update_reservation(self, spec: ReservationSpec) -> ReservationHandle:
        """Change the times, size or users of ``spec.name``; checks as for creation.

        Hosts are kept where they still suit (those of its running jobs always), so that jobs
        inside it keep running. With running jobs its start cannot move.
        """
        reservation = self._reservations.get(spec.name)
        if reservation is None:
            raise self._refused(f"Requested reservation is invalid: no reservation {spec.name}")
        if spec.start != reservation.start and self._own_running(reservation.name):
            raise self._refused(
                f"Requested reservation is in use: {spec.name} has running jobs, its start "
                "cannot move"
            )
        self._check_reservation(spec, reservation)
        mask = self._choose_hosts(spec, reservation)
        old_start, old_end, old_mask = reservation.start, reservation.end, reservation.mask
        self._plan.unreserve(old_mask, old_start, old_end)
        self._plan.reserve(mask, spec.start, spec.end)
        reservation.start, reservation.end, reservation.mask = spec.start, spec.end, mask
        reservation.users = spec.users
        reservation.version += 1
        self._push_reservation_events(reservation)
        # Free every plan the change breaks before running jobs inside may take more time.
        self._invalidate(force=spec.name)
        for job in self._own_running(spec.name):
            assert job.start is not None
            bound = min(job.start + job.spec.walltime, spec.end)
            if bound < job.bound:
                self._plan.release(job.mask, bound, job.bound)
            elif bound > job.bound:
                self._plan.hold(job.mask, job.bound, bound)
            self._set_bound(job, bound)
        if old_mask & ~mask or old_start < spec.start or old_end > spec.end:
            self._free(old_mask, old_start, old_end)
            self._full_pass = True
        self._settle()
        return self._handle(reservation)

    def delete_reservation(self, name: str) -> None:
        """Release a reservation (unknown: nothing); refused while jobs run in it, like Slurm."""
        reservation = self._reservations.get(name)
        if reservation is None:
            return
        running = self._own_running(name)
        if running:
            raise self._refused(
                f"Requested reservation is in use: job {running[0].spec.id} runs in {name}"
            )
        self._close_reservation(reservation)
        self._plan.unreserve(reservation.mask, reservation.start, reservation.end)
        self._free(reservation.mask, reservation.start, reservation.end)
        self._full_pass = True
        self._settle()

    # -- nodes ------------------------------------------------------------------------------

    def set_node_state(self, host: str, state: NodeState, at: int | None = None) -> None:
        """A fault, a drain or a repair, now or at ``at``: DOWN kills the job on the host."""
        index = self._index[host]
        state = NodeState(state)
        if at is not None and at < self._now:
            raise ValueError(f"cannot change a node in the past ({at} < {self._now})")
        if at is not None and at > self._now:
            self._node_changes.append((index, state))
            self._push(at, _NODE, host, len(self._node_changes) - 1)
            return
        self._apply_node_state(index, state)
        self._settle()

    # -- reservations, internals ------------------------------------------------------------

    def _handle(self, reservation: _Reservation) -> ReservationHandle:
        return ReservationHandle(
            cluster=self.cluster,
            name=reservation.name,
            start=reservation.start,
            end=reservation.end,
            host_names=self._host_names(reservation.mask),
        )

    def _push_reservation_events(self, reservation: _Reservation) -> None:
        if reservation.start > self._now:
            self._push(reservation.start, _RESERVATION_START, reservation.name, reservation.version)
        self._push(reservation.end, _RESERVATION_END, reservation.name, reservation.version)

    def _close_reservation(self, reservation: _Reservation) -> None:
        """It ended or is deleted: its pending jobs can never run and are cancelled."""
        for job in list(self._queue.values()):
            if job.spec.reservation == reservation.name:
                self._drop_pending(job)
        del self._reservations[reservation.name]

    def _check_reservation(self, spec: ReservationSpec, current: _Reservation | None) -> None:
        size = spec.size
        if size > len(self._names):
            raise self._refused(
                f"Requested node configuration is not available: {size} hosts asked, "
                f"{self.cluster} has {len(self._names)}"
            )
        late = self._late_allowed(spec, current)
        if (late is not None and spec.start < self._now - late) or spec.end <= self._now:
            raise self._refused(
                f"Invalid time specification: [{spec.start}, {spec.end}) is in the past "
                f"(now {self._now})",
                self._retry_after(spec, current),
            )

    @staticmethod
    def _late_allowed(spec: ReservationSpec, current: _Reservation | None) -> int | None:
        """How far before now ``spec`` may start (None: its start does not change). A start
        planned for "now" reaches the batch system a moment later, and Slurm takes it as asked
        (:data:`LATE_CREATION`, :data:`LATE_MOVE`): refusing it would fail every placement that
        crossed a second on its way."""
        if current is None:
            return LATE_CREATION
        return LATE_MOVE if spec.start != current.start else None

    def _busy_hosts(self, at: int, ignore: str | None) -> int:
        """Hosts of running jobs that may still run at ``at`` (their bound; jobs of ``ignore``
        excepted)."""
        mask = 0
        for job in self._running.values():
            if job.bound > at and (ignore is None or job.spec.reservation != ignore):
                mask |= job.mask
        return mask

    def _reserved_hosts(self, start: int, end: int, ignore: str | None) -> int:
        """Hosts of the reservations (but ``ignore``) that overlap ``[start, end)``."""
        mask = 0
        for reservation in self._reservations.values():
            if reservation.name != ignore and reservation.start < end and start < reservation.end:
                mask |= reservation.mask
        return mask

    def _named_mask(self, spec: ReservationSpec) -> int:
        mask = 0
        for name in spec.host_names:
            index = self._index.get(name)
            if index is None:
                raise self._refused(f"Invalid node name specified: {name} is not in {self.cluster}")
            if mask >> index & 1:
                raise self._refused(f"Invalid node name specified: {name} is named twice")
            mask |= 1 << index
        return mask

    def _choose_hosts(self, spec: ReservationSpec, current: _Reservation | None) -> int:
        """The hosts ``spec`` gets, or Refused with Slurm's reason and a retry hint.

        Named hosts must all suit; otherwise the lowest-index suitable hosts (an update keeps
        its current ones first, and always those its running jobs use).
        """
        ignore = None if current is None else current.name
        up = self._plan.up
        busy = self._busy_hosts(spec.start, ignore)
        taken = self._reserved_hosts(spec.start, spec.end, ignore)
        must = 0
        if current is not None:
            for job in self._own_running(current.name):
                must |= job.mask
        if spec.host_names:
            return self._check_named(spec, current, must, busy, taken)
        size = spec.hosts
        if must.bit_count() > size:
            raise self._refused(
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
            raise self._refused(
                f"{reason} ({(free | must).bit_count()} of {size} hosts free over "
                f"[{spec.start}, {spec.end}))",
                self._retry_after(spec, current),
            )
        mask = must
        if current is not None:
            mask |= lowest_bits(current.mask & free, size - mask.bit_count())
        return mask | lowest_bits(free & ~mask, size - mask.bit_count())

    def _check_named(
        self, spec: ReservationSpec, current: _Reservation | None, must: int, busy: int, taken: int
    ) -> int:
        """The named hosts of ``spec`` if all suit (``must``: its running jobs' hosts)."""
        mask = self._named_mask(spec)
        up = self._plan.up
        if must & ~mask:
            raise self._refused(
                f"Requested reservation is in use: its running jobs use hosts outside "
                f"{', '.join(spec.host_names)}"
            )
        if mask & taken:
            raise self._refused(
                "Reservation request overlaps with another reservation: "
                + ", ".join(self._host_names(mask & taken)),
                self._retry_after(spec, current),
            )
        if mask & busy:
            raise self._refused(
                "Requested nodes are busy: " + ", ".join(self._host_names(mask & busy)),
                self._retry_after(spec, current),
            )
        if mask & ~up & ~must:
            raise self._refused(
                "Requested nodes are busy: "
                + ", ".join(self._host_names(mask & ~up & ~must))
                + " down or drained"
            )
        return mask

    def _fits(self, spec: ReservationSpec, current: _Reservation | None, start: int) -> bool:
        """Whether ``spec`` moved to ``start`` would get its hosts (same size and duration)."""
        ignore = None if current is None else current.name
        end = start + spec.end - spec.start
        must = 0
        if current is not None:
            for job in self._own_running(current.name):
                must |= job.mask
        free = (
            self._plan.up
            & ~self._busy_hosts(start, ignore)
            & ~self._reserved_hosts(start, end, ignore)
        ) | must
        if spec.host_names:
            named = 0
            for name in spec.host_names:
                index = self._index.get(name)
                if index is None:
                    return False
                named |= 1 << index
            return not named & ~free
        return free.bit_count() >= spec.hosts

    def _retry_after(self, spec: ReservationSpec, current: _Reservation | None) -> int | None:
        """The earliest start at which the same reservation would succeed, if any: hosts free
        up only when running jobs reach their bound or other reservations end."""
        base = max(spec.start, self._now)
        ignore = None if current is None else current.name
        candidates = {base}
        candidates.update(job.bound for job in self._running.values() if job.bound > base)
        candidates.update(
            r.end for r in self._reservations.values() if r.end > base and r.name != ignore
        )
        return next((t for t in sorted(candidates) if self._fits(spec, current, t)), None)

    # -- nodes, internals -------------------------------------------------------------------

    def _apply_node_state(self, index: int, state: NodeState) -> None:
        old = self._states[index]
        if state is old:
            return
        self._states[index] = state
        self._nodes = None
        bit = 1 << index
        if state is NodeState.UP:
            self._plan.set_up(self._plan.up | bit)
            self._free(bit, self._now, FOREVER)
            self._full_pass = True
            return
        if old is NodeState.UP:
            self._plan.set_up(self._plan.up & ~bit)
        if state is NodeState.DOWN:
            if bit & self._running_mask:
                victim = next(job for job in self._running.values() if job.mask & bit)
                self._end_job(victim, JobState.FAILED)
            self._replace_reserved_host(bit)
        self._invalidate()

    def _replace_reserved_host(self, bit: int) -> None:
        """REPLACE_DOWN: each reservation holding the host (down now) gets the lowest free
        suitable one instead, if any; a drained host stays (its job inside may finish)."""
        now = self._now
        for reservation in self._reservations.values():
            if not reservation.mask & bit or reservation.end <= now:
                continue
            free = (
                self._plan.up
                & ~reservation.mask
                & ~self._busy_hosts(max(reservation.start, now), None)
                & ~self._reserved_hosts(reservation.start, reservation.end, reservation.name)
            )
            if free:
                other = free & -free
                reservation.mask = reservation.mask & ~bit | other
                self._plan.unreserve(bit, reservation.start, reservation.end)
                self._plan.reserve(other, reservation.start, reservation.end)
