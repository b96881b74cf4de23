"""Deployment on the mock platform: the bridge itself is the front-end.

The simulated batch systems have no commands to run: the daemon takes the jobs
(``POST /v1/sessions/{id}/jobs``), runs each in the session's placeholder on its hosts (as a
process of the daemon's host), and reports their states and exit statuses. Every job of the mock
runs on the bridge's host, so the rendezvous address of a part is the loopback address.
"""

from __future__ import annotations

from typing import Any, Protocol

from coorm_bridge.launchers.client import BridgeError
from coorm_bridge.launchers.deploy.base import Deployer, DeployError, JobStatus
from coorm_bridge.launchers.rundir import JobPlan

_STATES = frozenset({"pending", "running", "completed", "failed", "cancelled"})


class FrontEnd(Protocol):
    """The bridge's job calls (:class:`~coorm_bridge.launchers.client.BridgeClient`)."""

    def submit_job(self, session: str, job: Any) -> Any: ...
    def jobs(self, session: str) -> list[Any]: ...
    def cancel_job(self, session: str, job: str) -> Any: ...
    def close(self) -> None: ...


class MockDeployer(Deployer):
    kind = "mock"

    def __init__(self, cluster: str, front_end: FrontEnd, session: str) -> None:
        super().__init__(cluster)
        self.front_end = front_end
        self.session = session

    def submit(self, plan: JobPlan, time_limit: int) -> str:
        from coorm_bridge.protocol import JobRequest  # noqa: PLC0415

        request = JobRequest(
            cluster=plan.cluster,
            name=plan.component,
            argv=plan.argv,
            environment=dict(plan.environment),
            workdir=str(plan.workdir),
            walltime=time_limit,
            stdout=str(plan.stdout),
            stderr=str(plan.stderr),
        )
        try:
            submitted = self.front_end.submit_job(self.session, request)
        except BridgeError as error:
            raise DeployError(f"{self.cluster}: the bridge refused the job: {error}") from error
        if sorted(submitted.hosts) != sorted(plan.hosts):
            self.cancel(submitted.job)
            raise DeployError(
                f"{self.cluster}: the job got hosts {submitted.hosts}, not the granted "
                f"{list(plan.hosts)}"
            )
        return str(submitted.job)

    def status(self, job: str) -> JobStatus:
        try:
            found = [j for j in self.front_end.jobs(self.session) if str(j.job) == job]
        except BridgeError as error:
            raise DeployError(f"{self.cluster}: cannot read the jobs: {error}") from error
        if not found:
            return JobStatus("unknown", None, f"the bridge no longer knows job {job}")
        state = str(found[0].state)
        if state not in _STATES:
            return JobStatus("unknown", found[0].exit_code, f"state {state!r}")
        return JobStatus(state, found[0].exit_code)  # type: ignore[arg-type]

    def cancel(self, job: str) -> None:
        try:
            self.front_end.cancel_job(self.session, job)
        except BridgeError as error:
            if error.status != 409:  # already finished
                raise DeployError(f"{self.cluster}: cannot cancel job {job}: {error}") from error

    def address(self, host: str) -> str:
        return "127.0.0.1"

    def close(self) -> None:
        self.front_end.close()
