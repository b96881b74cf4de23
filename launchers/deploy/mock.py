"""Deployment on the mock platform: the bridge itself is the front-end.

The simulated batch systems have no commands to run: the daemon takes the jobs
(``POST /v1/sessions/{id}/jobs``), runs each in the session's placeholder on its hosts (as a
process of the daemon's host), and reports their states and exit statuses. Every job of the mock
runs on the bridge's host, so the rendezvous address of a part is the loopback address.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import ValidationError

from coorm_bridge.core.model import describe
from coorm_bridge.launchers.client import BridgeError
from coorm_bridge.launchers.deploy.base import Deployer, DeployError, JobStatus
from coorm_bridge.launchers.rundir import JobPlan
from coorm_bridge.protocol import JOB_VARIABLES, JobAnswer, JobInfo, JobRequest


class JobCalls(Protocol):
    """The bridge's job calls (:class:`~coorm_bridge.launchers.client.BridgeClient`)."""

    def submit_job(self, session: str, job: JobRequest) -> JobAnswer: ...
    def jobs(self, session: str) -> list[JobInfo]: ...
    def cancel_job(self, session: str, job: str) -> JobInfo: ...
    def close(self) -> None: ...


class MockDeployer(Deployer):
    kind = "mock"

    def __init__(self, cluster: str, front_end: JobCalls, session: str) -> None:
        super().__init__(cluster)
        self.front_end = front_end
        self.session = session

    def submit(self, plan: JobPlan, time_limit: int) -> str:
        try:
            request = JobRequest(
                cluster=plan.cluster,
                name=plan.component,
                argv=plan.argv,
                # the bridge sets its own job variables (COORM_CLUSTER among them, the same)
                environment={k: v for k, v in plan.environment.items() if k not in JOB_VARIABLES},
                workdir=str(plan.workdir),
                walltime=time_limit,
                stdout=str(plan.stdout),
                stderr=str(plan.stderr),
            )
        except ValidationError as error:
            raise DeployError(f"{self.cluster}: cannot submit: {describe(error)}") from None
        try:
            submitted = self.front_end.submit_job(self.session, request)
        except BridgeError as error:
            # A refusal's sentence says why and what to do; its code and status add nothing.
            said = error.detail if 400 <= error.status < 500 else str(error)
            raise DeployError(f"{self.cluster}: the bridge refused the job: {said}") from error
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
        info = found[0]
        detail = info.reason
        if info.signal is not None:
            detail = f"signal {info.signal}" + (f": {detail}" if detail else "")
        exit_code = info.exit_code
        if exit_code is None and info.signal is not None:
            exit_code = 128 + info.signal  # as a shell reports a process a signal killed
        return JobStatus(info.state, exit_code, detail)

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
