"""A started application's jobs: submitted together, watched, stopped together.

The jobs of all clusters are submitted at once (one thread per cluster), so that the batch
systems start them as close together as the placeholders allow. A coupled code cannot go on
without any of its parts: when one job fails, the others are cancelled. The run's exit status is
0 only when every job completed with status 0. Every change is written to ``jobs.json``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from coorm_bridge.core.messages import StartEvent
from coorm_bridge.launchers.deploy.base import Deployer, DeployError, JobStatus
from coorm_bridge.launchers.display import Display
from coorm_bridge.launchers.rundir import JobPlan, RunDirectory


class Run:
    """The jobs of one start, one per cluster."""

    def __init__(
        self, directory: RunDirectory, deployers: Mapping[str, Deployer], display: Display
    ) -> None:
        self.directory = directory
        self.deployers = dict(deployers)
        self.display = display
        self.jobs: dict[str, str] = {}
        self.statuses: dict[str, JobStatus] = {}
        self.limits: dict[str, int] = {}
        """Each job's time limit, as submitted or since lowered (:meth:`_refit`)."""
        self.start: StartEvent | None = None
        self.cancelling = False

    @property
    def plans(self) -> list[JobPlan]:
        return self.directory.plans

    def submit(self, start: StartEvent) -> None:
        """Submit every cluster's job; DeployError (after cancelling those that went in) when
        one could not be."""
        self.start = start
        now = time.time()
        with ThreadPoolExecutor(max(1, len(self.plans))) as pool:
            futures = {
                plan.cluster: pool.submit(self._submit, plan, start, now) for plan in self.plans
            }
        failures = []
        for cluster, future in futures.items():
            error = future.exception()
            if error is None:
                job, self.limits[cluster] = future.result()
                self.jobs[cluster] = job
                self.directory.record(cluster, job=job, state="submitted")
                self.display.note(f"{cluster}: job {job} submitted")
            else:
                self.directory.record(cluster, state="refused", detail=str(error))
                failures.append(str(error))
        if failures:
            self.cancel()
            raise DeployError("; ".join(failures))

    def _submit(self, plan: JobPlan, start: StartEvent, now: float) -> tuple[str, int]:
        deployer = self.deployers[plan.cluster]
        limit = start.time_limit(now, deployer.unit, deployer.slack)
        if limit <= 0:
            raise DeployError(
                f"{plan.cluster}: too late to submit, the allocation ends at {start.end} "
                f"(less than {deployer.unit} s left once its batch system has started the job, "
                f"which may take {deployer.slack:g} s)"
            )
        return deployer.submit(plan, limit), limit

    def _refit(self, cluster: str, job: str) -> None:
        """A job still pending whose limit, counted from now, would pass the allocation's end:
        it would wait for ever where the next placeholder follows on its hosts. Its limit is
        lowered to what fits (where the batch system lets the user do it)."""
        deployer, start = self.deployers[cluster], self.start
        assert start is not None
        now = time.time()
        if now + self.limits[cluster] <= start.end:
            return
        fits = start.time_limit(now, deployer.unit, deployer.slack)
        if fits <= 0:
            return  # nothing fits any more: the allocation's end will stop it
        try:
            lowered = deployer.refit(job, fits)
        except DeployError as error:
            self.display.warn(f"{error} (will try again)")
            return
        if lowered:
            self.limits[cluster] = fits
            self.display.note(
                f"{cluster}: job {job} not started yet: its time limit lowered to {fits} s, "
                "so that it ends with the allocation"
            )

    def poll(self) -> bool:
        """Read every unfinished job's state; whether all have finished. The first failure
        cancels the others."""
        for cluster, job in self.jobs.items():
            known = self.statuses.get(cluster)
            if known is not None and known.finished:
                continue
            try:
                status = self.deployers[cluster].status(job)
            except DeployError as error:
                self.display.warn(f"{error} (will ask again)")
                continue
            if status.state == "pending" and not self.cancelling:
                self._refit(cluster, job)
            if status != known:
                self.statuses[cluster] = status
                self.directory.record(
                    cluster, state=status.state, exit_code=status.exit_code, detail=status.detail
                )
                self.display.note(f"{cluster}: job {job} {_said(status)}")
            if status.finished and not status.succeeded and not self.cancelling:
                self.display.warn(f"{cluster} failed: cancelling the other jobs")
                self.cancel()
        return len(self.statuses) == len(self.jobs) and all(
            s.finished for s in self.statuses.values()
        )

    def cancel(self) -> None:
        """Cancel every job not known to have finished; problems are shown, not raised."""
        self.cancelling = True
        for cluster, job in self.jobs.items():
            status = self.statuses.get(cluster)
            if status is not None and status.finished:
                continue
            try:
                self.deployers[cluster].cancel(job)
            except DeployError as error:
                self.display.warn(str(error))

    def wait_cancelled(self, timeout: float, interval: float = 0.5) -> bool:
        """Poll until every job finished after :meth:`cancel`, for at most ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.poll():
                return True
            time.sleep(interval)
        return False

    def exit_status(self) -> int:
        """0 when every job completed with status 0, else 1."""
        if len(self.jobs) != len(self.plans):
            return 1
        ok = all(self.statuses.get(c, JobStatus("unknown")).succeeded for c in self.jobs)
        return 0 if ok else 1

    def close(self) -> None:
        for deployer in self.deployers.values():
            deployer.close()


def _said(status: JobStatus) -> str:
    text: str = status.state
    if status.exit_code is not None:
        text += f" (exit status {status.exit_code})"
    if status.detail:
        text += f": {status.detail}"
    return text
