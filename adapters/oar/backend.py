"""What every OAR back-end shares: an OAR server read whole at once, placeholders found by name,
moved by re-submission (:mod:`.moves`), jobs put into them with ``-t inner``.

The commands (:mod:`.cli_backend`) and the REST API (:mod:`.rest_backend`) supply only the
primitives: read the server, submit a reservation or an inner job, delete a job, read one job,
and (commands only) change a walltime.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from coorm_bridge.adapters.batch.backend import Backend, BatchFailure, Hardware, Read, ReadFailure
from coorm_bridge.adapters.oar import commands, parse
from coorm_bridge.adapters.oar import hardware as oar_hardware
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.adapters.oar.moves import Mover
from coorm_bridge.core.batch import AdapterError, JobSpec, JobState, Reservation, ReservationSpec
from coorm_bridge.core.rules import NO_RULES, ClusterRules

log = logging.getLogger(__name__)

#: Seconds by which OAR may shorten a reservation it validated late (its start passed), keeping
#: the end: what :meth:`OarBackend.as_asked` allows when OAR does not say the start yet.
LATE_VALIDATION = 60

#: Seconds between two requests for a scheduler pass (:meth:`OarBackend.nudge`).
NUDGE_EVERY = 5


class OarBackend(Backend[OarBinding]):
    """``submit_as``: "owner" (each placeholder is its owner's job) or one account's name."""

    def __init__(
        self,
        *,
        submit_as: str = "owner",
        horizon: int = 30 * 86400,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.submit_as = submit_as
        self.horizon = horizon
        self.clock = clock
        self.mover = Mover(self, clock)
        self._nudged = 0

    # -- primitives ---------------------------------------------------------------------------

    @abstractmethod
    def whole(
        self, binding: OarBinding, now: int
    ) -> tuple[list[parse.Resource], list[parse.OarJob]]:
        """The server's resources and every job placed from ``now`` to the horizon."""

    @abstractmethod
    def resource_rows(self) -> list[Mapping[str, Any]]:
        """Every resource of the server, as OAR gives its properties (a row of its resources
        table): the settings are checked against them (:mod:`.hardware`)."""

    @abstractmethod
    def submit_reservation(self, binding: OarBinding, spec: ReservationSpec) -> str:
        """A container reservation named ``spec.name``, as :meth:`owner`; its job id."""

    @abstractmethod
    def submit_inner(self, binding: OarBinding, job: JobSpec, container: str) -> str:
        """``job`` into the container job ``container``, as ``job.user``; its job id."""

    @abstractmethod
    def delete_job(self, job: parse.OarJob) -> None:
        """Delete a job (one already gone is no error)."""

    @abstractmethod
    def job(self, job_id: str) -> parse.OarJob | None:
        """One job, finished or not (None: OAR does not know it)."""

    def notify(self) -> None:
        """Ask OAR's scheduler for a pass now; by default it cannot be asked (see :meth:`nudge`)."""

    def nudge(self, jobs: Sequence[parse.OarJob], now: int) -> None:
        """Ask for a scheduler pass when OAR is late for the bridge: a container whose start has
        come and not begun, or a job waiting in a container that has. Almighty runs its
        scheduler on a submission or deletion, else only every 60 s (hard-coded): a container
        starts up to a minute late, and the jobs submitted into it before it began wait for the
        pass after (measured: 48 s and 110 s after the start). At most once per
        :data:`NUDGE_EVERY` seconds."""
        if now < self._nudged + NUDGE_EVERY:
            return
        running = {j.id for j in jobs if j.is_reservation and j.state == "Running"}
        late = any(
            (j.is_reservation and j.state == "Waiting" and j.start is not None and j.start <= now)
            or (j.state == "Waiting" and j.container in running)
            for j in jobs
        )
        if late:
            self._nudge(now)

    def _nudge(self, now: int) -> None:
        """Ask for a scheduler pass, at most once per :data:`NUDGE_EVERY` seconds."""
        if now < self._nudged + NUDGE_EVERY:
            return
        self._nudged = now
        try:
            self.notify()
        except (BatchFailure, AdapterError) as failure:
            log.info("OAR's scheduler could not be asked for a pass: %s", failure)

    def extend(self, job: parse.OarJob, seconds: int) -> None:
        """Change a running job's walltime; by default OAR cannot be asked."""
        raise BatchFailure("other", f"OAR job {job.id}: its walltime cannot be changed this way")

    # -- shared -------------------------------------------------------------------------------

    def now(self) -> int:
        """The clock placeholders are looked up at (the host's: OAR runs on it)."""
        return int(self.clock())

    def owner(self, users: Sequence[str]) -> str:
        """Who submits a placeholder for these users."""
        return users[0] if self.submit_as == "owner" else self.submit_as

    def as_owner(self, failure: BatchFailure) -> BatchFailure:
        """A placeholder's refusal, said of whom it concerns. Submitted as the session's owner
        (``submit_as = "owner"``), OAR's admission rules speak of that user, not of the bridge:
        root and ``oar`` may never submit (that session ends: run it as another user), and a
        user's cap on waiting reservations holds that session back only (it is tried again).
        Submitted as one account, both are the bridge's own rights (an admin must act)."""
        if self.submit_as != "owner" or failure.kind != "no_rights":
            return failure
        said = str(failure)
        if commands.ROOT_REFUSED in said:
            first = said.partition(";")[0]
            return BatchFailure(
                "invalid_user",
                f"{first}; OAR never runs jobs as root or oar: run the application as another user",
            )
        if commands.RESERVATIONS_CAPPED in said:
            return BatchFailure("user_refused", said)
        return failure

    def rules(self, binding: OarBinding) -> ClusterRules:
        """None read in advance: OAR's rules are its admission rules, Perl code that runs at
        each submission (``oarsub``, and the REST API through it) with the job's user, queue,
        types and resources, and may refuse or change the job. OAR 2.5 has no other limit a
        user's job is held to (its queues have a priority and a scheduler, no bounds), and a
        rule's code cannot be read as a bound without running it. The bridge submits each
        placeholder as its owner (``submit_as = "owner"``), so every rule applies to it there:
        a refusal ends that session with the rule's own words (:func:`.commands.refusal`)."""
        return NO_RULES

    def resources(self, binding: OarBinding) -> list[parse.Resource]:
        """Every resource of the server."""
        return [parse.resource(row, binding) for row in self.resource_rows()]

    def hardware(self, binding: OarBinding) -> Hardware:
        return oar_hardware.hardware(self.resource_rows(), binding)

    def source(self, binding: OarBinding) -> Hashable:
        return "oar"  # one server answers for all its clusters

    def read(self, binding: OarBinding, now: int) -> Read:
        resources, jobs = self.whole(binding, now)
        return parse.cluster_read(binding, resources, jobs, now)

    def read_all(self, bindings: Sequence[OarBinding], now: int) -> dict[str, Read | ReadFailure]:
        """One read of the server for all its clusters."""
        if not bindings:
            return {}
        try:
            resources, jobs = self.whole(bindings[0], now)
        except (BatchFailure, ValueError, AdapterError) as failure:
            return dict.fromkeys((b.name for b in bindings), failure)
        self.nudge(jobs, now)
        results: dict[str, Read | ReadFailure] = {}
        for binding in bindings:
            try:
                results[binding.name] = parse.cluster_read(binding, resources, jobs, now)
            except ValueError as failure:
                results[binding.name] = failure
        return results

    def held(
        self, binding: OarBinding, name: str, now: int
    ) -> list[tuple[parse.OarJob, Reservation]]:
        """The live containers named ``name`` on this cluster, oldest first."""
        resources, jobs = self.whole(binding, now)
        host_of = parse.host_names(parse.in_cluster(resources, binding))
        found = []
        for job in sorted(jobs, key=lambda j: int(j.id)):
            made = parse.held(job, host_of) if job.name == name else None
            if made is not None and made.name == name:
                found.append((job, made))
        return found

    def reservation(self, binding: OarBinding, name: str) -> Reservation | None:
        """The placeholder named ``name`` (during a move, the newer one). One whose start has
        come but that OAR has not launched yet gets a scheduler pass asked for: the bridge reads
        it back to start its application, which waits for it."""
        now = self.now()
        found = self.held(binding, name, now)
        if not found:
            return None
        made = found[-1][1]
        if made.start <= now and not made.begun(now):
            self._nudge(now)
        return made

    def create_reservation(self, binding: OarBinding, spec: ReservationSpec) -> None:
        self.as_asked(self.submit_reservation(binding, spec), spec)

    def as_asked(self, job_id: str, spec: ReservationSpec) -> None:
        """An admission rule may change a job instead of refusing it (a site that caps the
        walltime quietly): the same request would be changed again, so a container ending
        before the end asked is deleted and refused for good, like a rule's refusal. OAR itself
        shortens a reservation whose start passed before its scheduler validated it (a loaded
        server), keeping its end: that one is as asked."""
        job = self.job(job_id)
        if job is None or job.walltime >= spec.end - spec.start:
            return
        # Its start as OAR moved it; not known yet, a shortening within the slack OAR takes.
        start = job.start if job.start is not None else spec.start + LATE_VALIDATION
        if start + job.walltime >= spec.end:
            return
        try:
            self.delete_job(job)
        except BatchFailure as failure:  # the reconciler deletes what is named like ours
            log.warning(
                "OAR job %s, shortened by an admission rule, not deleted: %s", job_id, failure
            )
        raise BatchFailure(
            "invalid_user",
            f"{commands.ADMISSION_REFUSED} as asked: OAR job {job_id} was given a walltime of "
            f"{job.walltime} s instead of {spec.end - spec.start} s",
        )

    def update_reservation(
        self, binding: OarBinding, spec: ReservationSpec, *, begun: bool = False
    ) -> None:
        self.mover.update(binding, spec, begun=begun)

    def delete_reservation(self, binding: OarBinding, name: str) -> None:
        found = self.held(binding, name, self.now())
        if not found:
            raise BatchFailure("no_such_reservation", f"no reservation named {name}")
        for job, _ in found:
            self.delete_job(job)

    def submit(self, binding: OarBinding, job: JobSpec) -> str:
        if job.reservation is None:
            raise ValueError("OAR jobs through the bridge go into a placeholder")
        found = self.held(binding, job.reservation, self.now())
        if not found:
            raise BatchFailure("no_such_reservation", f"no reservation named {job.reservation}")
        return self.submit_inner(binding, job, found[-1][0].id)

    def cancel(self, binding: OarBinding, job_id: str) -> None:
        record = self.job(job_id)
        if record is not None and record.state in parse.LIVE | {"Hold"}:
            self.delete_job(record)

    def job_state(self, binding: OarBinding, job_id: str) -> JobState:
        record = self.job(job_id)
        if record is None:
            return JobState.UNKNOWN
        if record.state == "Terminated" and record.exit_code not in (0, None):
            return JobState.FAILED
        return parse.STATES.get(record.state, JobState.UNKNOWN)
