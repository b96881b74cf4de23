"""The command-line back-end: ``oarstat -J --gantt``, ``oarsub``, ``oardel``, ``oarwalltime``,
run here or on a front-end over SSH (see :mod:`~coorm_bridge.adapters.batch.runner`).

One ``oarstat -J --gantt`` reads the whole server (resources, running and planned jobs,
reservations: 0.25 s for 2,000 jobs), so every cluster of the server is read by one call.
Placeholders are container reservations submitted as their owner (or the configured account);
OAR cannot move one, so :mod:`.moves` re-submits it.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence

from coorm_bridge.adapters.base import AdapterError, JobSpec, JobState, Reservation, ReservationSpec
from coorm_bridge.adapters.batch.backend import Backend, BatchFailure, Hardware, Read, ReadFailure
from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.oar import commands, parse
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.adapters.oar.moves import Mover


class OarCliBackend(Backend[OarBinding]):
    """``identity``: the account the commands run as (the SSH user, or this process's); a
    placeholder owned by anyone else is submitted through ``runuser`` (which needs root)."""

    def __init__(
        self,
        runner: Runner,
        *,
        identity: str,
        submit_as: str = "owner",
        timeout: float = 60,
        horizon: int = 30 * 86400,
    ) -> None:
        self.runner = runner
        self.identity = identity
        self.submit_as = submit_as
        self.timeout = timeout
        self.horizon = horizon
        self.mover = Mover(self)

    # -- running ------------------------------------------------------------------------------

    def _run(self, argv: Sequence[str]) -> Completed:
        done = self.runner.run(argv, env=commands.ENV, timeout=self.timeout)
        if not done.ok:
            raise commands.refusal(done.returncode, f"{done.stdout}\n{done.stderr}")
        return done

    def _json(self, argv: Sequence[str]) -> object:
        done = self._run(argv)
        try:
            return json.loads(done.stdout)
        except ValueError as error:
            raise BatchFailure("other", f"{argv[0]}: unreadable JSON: {error}") from error

    def owner(self, spec_users: Sequence[str]) -> str:
        """Who submits a placeholder for these users."""
        return spec_users[0] if self.submit_as == "owner" else self.submit_as

    def run_as(self, user: str) -> str | None:
        """``runuser`` target for ``user``, None when the commands already run as them."""
        return None if user == self.identity else user

    # -- reading ------------------------------------------------------------------------------

    def whole(
        self, binding: OarBinding, now: int
    ) -> tuple[list[parse.Resource], list[parse.JobRecord]]:
        """The server's resources and every job placed from ``now`` to the horizon."""
        data = self._json(commands.gantt(max(0, now - 1), now + self.horizon))
        return parse.gantt(data, binding)

    def hardware(self, binding: OarBinding) -> Hardware:
        data = self._json(commands.nodes())
        return parse.hardware(parse.in_cluster(parse.resources_of_nodes(data, binding), binding))

    def source(self, binding: OarBinding) -> Hashable:
        return "oar"  # one server answers for all its clusters

    def read(self, binding: OarBinding, now: int) -> Read:
        resources, jobs = self.whole(binding, now)
        return parse.cluster_read(binding, resources, jobs, now)

    def read_all(self, bindings: Sequence[OarBinding], now: int) -> dict[str, Read | ReadFailure]:
        """One Gantt for every cluster of the server."""
        if not bindings:
            return {}
        try:
            resources, jobs = self.whole(bindings[0], now)
        except (BatchFailure, ValueError, AdapterError) as failure:
            return dict.fromkeys((b.name for b in bindings), failure)
        results: dict[str, Read | ReadFailure] = {}
        for binding in bindings:
            try:
                results[binding.name] = parse.cluster_read(binding, resources, jobs, now)
            except ValueError as failure:
                results[binding.name] = failure
        return results

    def held(
        self, binding: OarBinding, name: str, now: int
    ) -> list[tuple[parse.JobRecord, Reservation]]:
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
        found = self.held(binding, name, self.mover.now())
        return found[-1][1] if found else None  # during a move, the newer one

    # -- placeholders -------------------------------------------------------------------------

    def submit_reservation(self, binding: OarBinding, spec: ReservationSpec) -> str:
        owner = self.owner(spec.users)
        argv = commands.create_reservation(binding, spec, self.run_as(owner))
        done = self._run(argv)
        return commands.created_job_id(done.stdout)

    def delete_job(self, job: parse.JobRecord) -> None:
        owner = job.owner or self.identity
        try:
            self._run(commands.delete_job(job.id, self.run_as(owner)))
        except BatchFailure as failure:
            if failure.kind != "no_such_job":
                raise

    def create_reservation(self, binding: OarBinding, spec: ReservationSpec) -> None:
        self.submit_reservation(binding, spec)

    def update_reservation(
        self, binding: OarBinding, spec: ReservationSpec, *, begun: bool = False
    ) -> None:
        self.mover.update(binding, spec, begun=begun)

    def delete_reservation(self, binding: OarBinding, name: str) -> None:
        found = self.held(binding, name, self.mover.now())
        if not found:
            raise BatchFailure("no_such_reservation", f"no reservation named {name}")
        for job, _ in found:
            self.delete_job(job)

    def extend(self, job: parse.JobRecord, seconds: int) -> None:
        """``oarwalltime``: ask OAR to change a running job's walltime by ``seconds``."""
        sign = "+" if seconds >= 0 else "-"
        argv = (
            *commands.as_user(self.run_as(job.owner or self.identity)),
            "oarwalltime",
            commands.check_job_id(job.id),
            f"{sign}{commands.walltime(abs(seconds))}",
        )
        self._run(argv)

    # -- jobs ---------------------------------------------------------------------------------

    def submit(self, binding: OarBinding, job: JobSpec) -> str:
        if job.reservation is None:
            raise ValueError("OAR jobs through the bridge go into a placeholder")
        found = self.held(binding, job.reservation, self.mover.now())
        if not found:
            raise BatchFailure("no_such_reservation", f"no reservation named {job.reservation}")
        container = found[-1][0].id
        argv = commands.submit_inner(binding, job, container, self.run_as(job.user))
        return commands.created_job_id(self._run(argv).stdout)

    def cancel(self, binding: OarBinding, job_id: str) -> None:
        try:
            self._run(commands.delete_job(job_id, None))
        except BatchFailure as failure:
            if failure.kind != "no_such_job":
                raise

    def job_state(self, binding: OarBinding, job_id: str) -> JobState:
        try:
            data = self._json(commands.show_job(job_id))
        except BatchFailure as failure:
            if failure.kind == "no_such_job":
                return JobState.UNKNOWN
            raise
        if not isinstance(data, dict) or job_id not in data:
            return JobState.UNKNOWN
        state = str(data[job_id].get("state", ""))
        if state == "Terminated" and data[job_id].get("exit_code") not in (0, None):
            return JobState.FAILED
        return parse.STATES.get(state, JobState.UNKNOWN)

    def close(self) -> None:
        self.runner.close()
