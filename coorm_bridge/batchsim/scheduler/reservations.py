"""The cluster's advance reservations changing: created, moved, resized, deleted, ended.

A reservation holds named hosts over its window, in the plan, against every job outside it;
jobs submitted into it use its hosts only and end at its end at the latest. Each change here
keeps the book (:mod:`.book`), the plan's reservation holds, the reservation's events and its
running jobs' bounds in step, and tells the planner what it did to the other jobs' plans: hosts
taken away break plans (:meth:`.Planner.broken`), hosts given back may let jobs start earlier
(:meth:`.Planner.freed`). Requests are checked first (:mod:`.admission`), so that a refused one
changes nothing. A reservation host that goes DOWN is replaced by a free one at that moment when
there is one (Slurm's REPLACE_DOWN), else kept; a DRAINED one is kept (its job inside may
finish).
"""

from __future__ import annotations

from coorm_bridge.batchsim.scheduler.admission import Admission
from coorm_bridge.batchsim.scheduler.book import ReservationBook, ReservationEntry
from coorm_bridge.batchsim.scheduler.events import RESERVATION_END, RESERVATION_START, Calendar
from coorm_bridge.batchsim.scheduler.hostplan import HostPlan
from coorm_bridge.batchsim.scheduler.hosts import Hosts
from coorm_bridge.batchsim.scheduler.planner import Planner
from coorm_bridge.batchsim.scheduler.running import RunningJobs
from coorm_bridge.core.batch import ReservationHandle, ReservationSpec


class Reservations:
    """Changes the reservations of one cluster; see the module docstring. The caller settles
    the planner after each change."""

    def __init__(
        self,
        *,
        hosts: Hosts,
        plan: HostPlan,
        book: ReservationBook,
        running: RunningJobs,
        planner: Planner,
        admission: Admission,
        calendar: Calendar,
    ) -> None:
        self._hosts = hosts
        self._plan = plan
        self._book = book
        self._running = running
        self._planner = planner
        self._admission = admission
        self._calendar = calendar

    def create(self, spec: ReservationSpec) -> ReservationHandle:
        """Hold hosts for ``spec``; pending jobs never block it, they are re-planned around it."""
        admission = self._admission
        if spec.name in self._book:
            raise admission.refused(f"Duplicate reservation name: {spec.name} already exists")
        admission.check_reservation(spec, None)
        mask = admission.choose_hosts(spec, None)
        reservation = self._book.add(spec, mask)
        self._plan.reserve(mask, spec.start, spec.end)
        self._file_events(reservation)
        self._planner.broken()
        return self.handle(reservation)

    def update(self, spec: ReservationSpec) -> ReservationHandle:
        """Change the times, size or users of ``spec.name``; checks as for creation.

        Hosts are kept where they still suit (those of its running jobs always), so that jobs
        inside it keep running. With running jobs its start cannot move.
        """
        admission, plan, running = self._admission, self._plan, self._running
        reservation = self._book.get(spec.name)
        if reservation is None:
            raise admission.refused(f"Requested reservation is invalid: no reservation {spec.name}")
        if spec.start != reservation.start and running.of(reservation.name):
            raise admission.refused(
                f"Requested reservation is in use: {spec.name} has running jobs, its start "
                "cannot move"
            )
        admission.check_reservation(spec, reservation)
        mask = admission.choose_hosts(spec, reservation)
        old_start, old_end, old_mask = reservation.start, reservation.end, reservation.mask
        plan.unreserve(old_mask, old_start, old_end)
        plan.reserve(mask, spec.start, spec.end)
        self._book.change(reservation, spec, mask)
        self._file_events(reservation)
        # Free every plan the change breaks before running jobs inside may take more time.
        self._planner.broken(force=spec.name)
        for job in running.of(spec.name):
            assert job.start is not None
            bound = min(job.start + job.spec.walltime, spec.end)
            if bound < job.bound:
                plan.release(job.mask, bound, job.bound)
            elif bound > job.bound:
                plan.hold(job.mask, job.bound, bound)
            running.set_bound(job, bound)
        if old_mask & ~mask or old_start < spec.start or old_end > spec.end:
            self._planner.freed(old_mask, old_start, old_end)
            self._planner.retry_all()
        return self.handle(reservation)

    def delete(self, name: str) -> bool:
        """Release a reservation (False: there is none); refused while jobs run in it, like
        Slurm."""
        reservation = self._book.get(name)
        if reservation is None:
            return False
        running = self._running.of(name)
        if running:
            raise self._admission.refused(
                f"Requested reservation is in use: job {running[0].spec.id} runs in {name}"
            )
        self.close(name)
        self._plan.unreserve(reservation.mask, reservation.start, reservation.end)
        self._planner.freed(reservation.mask, reservation.start, reservation.end)
        self._planner.retry_all()
        return True

    def close(self, name: str) -> None:
        """It ended or is deleted: its pending jobs can never run and are cancelled."""
        self._planner.drop_all(name)
        self._book.remove(name)

    def replace_down(self, bit: int) -> None:
        """REPLACE_DOWN: each reservation holding the host of ``bit`` (down now) gets the lowest
        free suitable one instead, if any."""
        now = self._calendar.now
        for reservation in self._book.values():
            if not reservation.mask & bit or reservation.end <= now:
                continue
            free = self._admission.replacement(reservation)
            if free:
                other = free & -free
                reservation.mask = reservation.mask & ~bit | other
                self._plan.unreserve(bit, reservation.start, reservation.end)
                self._plan.reserve(other, reservation.start, reservation.end)

    def handle(self, reservation: ReservationEntry) -> ReservationHandle:
        """What the caller gets back: the reservation as it now is, its hosts by name."""
        return ReservationHandle(
            cluster=self._admission.cluster,
            name=reservation.name,
            start=reservation.start,
            end=reservation.end,
            host_names=self._hosts.names_of(reservation.mask),
        )

    def _file_events(self, reservation: ReservationEntry) -> None:
        calendar = self._calendar
        if reservation.start > calendar.now:
            calendar.push(
                reservation.start, RESERVATION_START, reservation.name, reservation.version
            )
        calendar.push(reservation.end, RESERVATION_END, reservation.name, reservation.version)
