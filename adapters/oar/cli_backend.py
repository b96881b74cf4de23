"""The command-line back-end: ``oarstat -J --gantt``, ``oarnodes -J``, ``oarsub``, ``oardel``,
``oarwalltime``, run here or on a front-end over SSH (see
:mod:`~coorm_bridge.adapters.batch.runner`).

One ``oarstat -J --gantt`` reads the whole server (resources, running and planned jobs,
reservations: 0.25 s for 2,000 jobs). OAR's commands act as the Unix user who runs them, and
root and ``oar`` may not submit: a placeholder owned by anyone but the account the commands run
as is submitted through ``runuser`` (the bridge then runs as root on an OAR front-end).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coorm_bridge.adapters.batch.backend import BatchFailure
from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.oar import commands, parse
from coorm_bridge.adapters.oar.backend import OarBackend
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.core.batch import JobSpec, ReservationSpec


class OarCliBackend(OarBackend):
    """``identity``: the account the commands run as (the SSH user, or this process's)."""

    def __init__(
        self,
        runner: Runner,
        *,
        identity: str,
        submit_as: str = "owner",
        timeout: float = 60,
        horizon: int = 30 * 86400,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(submit_as=submit_as, horizon=horizon, clock=clock)
        self.runner = runner
        self.identity = identity
        self.timeout = timeout

    def _run(self, argv: Sequence[str]) -> Completed:
        done = self.runner.run(argv, env=commands.ENV, timeout=self.timeout)
        if not done.ok:
            raise commands.refusal(done.returncode, f"{done.stdout}\n{done.stderr}")
        return done

    def _json(self, argv: Sequence[str], stdout: str | None = None) -> object:
        """What ``argv`` printed (or ``stdout``, what it already printed), decoded."""
        try:
            return json.loads(self._run(argv).stdout if stdout is None else stdout)
        except ValueError as error:
            raise BatchFailure("other", f"{argv[0]}: unreadable JSON: {error}") from error

    def _as(self, user: str) -> str | None:
        """``runuser`` target for ``user``, None when the commands already run as them."""
        return None if user == self.identity else user

    def whole(
        self, binding: OarBinding, now: int
    ) -> tuple[list[parse.Resource], list[parse.OarJob]]:
        data = self._json(commands.gantt(max(0, now - 1), now + self.horizon))
        return parse.gantt(data, binding)

    def resource_rows(self) -> list[Mapping[str, Any]]:
        return parse.rows_of_nodes(self._json(commands.nodes()))

    def submit_reservation(self, binding: OarBinding, spec: ReservationSpec) -> str:
        argv = commands.create_reservation(binding, spec, self._as(self.owner(spec.users)))
        try:
            return commands.created_job_id(self._run(argv).stdout)
        except BatchFailure as failure:
            raise self.as_owner(failure) from failure

    def submit_inner(self, binding: OarBinding, job: JobSpec, container: str) -> str:
        argv = commands.submit_inner(binding, job, container, self._as(job.user))
        return commands.created_job_id(self._run(argv).stdout)

    def delete_job(self, job: parse.OarJob) -> None:
        try:
            self._run(commands.delete_job(job.id, self._as(job.owner or self.identity)))
        except BatchFailure as failure:
            if failure.kind != "no_such_job":
                raise

    def job(self, job_id: str) -> parse.OarJob | None:
        argv = commands.show_job(job_id)
        try:
            done = self._run(argv)
        except BatchFailure as failure:
            if failure.kind == "no_such_job":
                return None
            raise
        if not done.stdout.strip():
            return None  # oarstat -J prints nothing at all for a job OAR does not have
        data = self._json(argv, done.stdout)
        if not isinstance(data, dict) or not isinstance(data.get(job_id), dict):
            return None
        return parse.record(data[job_id])

    def notify(self) -> None:
        """``oarnotify Scheduling``: root or the oar group only (a bridge over SSH as another
        account cannot; the containers then start at Almighty's own pace)."""
        self._run(commands.notify_scheduler())

    def extend(self, job: parse.OarJob, seconds: int) -> None:
        """``oarwalltime``: OAR applies it at its next pass, if enabled and the hosts are free."""
        argv = commands.change_walltime(job.id, seconds, self._as(job.owner or self.identity))
        self._run(argv)

    def close(self) -> None:
        self.runner.close()
