"""What the deployers that run a batch system's own commands share: where the commands run (this
host, or the cluster's front-end over SSH), the check that a front-end sees the run directory,
what a failed command said, and how a job is submitted (:class:`CommandDeployer`: psij-python's
split, a batch system supplies only its command and the reading of its answer).

The commands run as the user who runs the launcher: the bridge's placeholder lets that user's
jobs in, and the jobs' files are theirs. Over SSH only known host keys are trusted (the
project's :class:`~coorm_bridge.adapters.batch.runner.SshRunner`).
"""

from __future__ import annotations

import getpass
import shlex
from abc import abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from pydantic import ValidationError

from coorm_bridge.adapters.batch.runner import Completed, LocalRunner, Runner, SshRunner, SshTarget
from coorm_bridge.core.batch import AdapterError, JobSpec, Unavailable
from coorm_bridge.core.model import describe
from coorm_bridge.launchers.deploy.base import Deployer, DeployError
from coorm_bridge.launchers.rundir import JobPlan


def runner_for(front_end: str | None, env: Mapping[str, str] | None = None) -> Runner:
    """The commands' runner: here when there is no front-end, else over SSH to it."""
    if front_end is None:
        return LocalRunner(env)
    return SshRunner(SshTarget(host=front_end), env)


def check_shared(runner: Runner, cluster: str, plan: JobPlan, timeout: float) -> None:
    """The front-end must see the run directory the launcher wrote (``run.json``): the jobs
    read it and write their outputs there."""
    try:
        done = runner.run(("test", "-r", plan.environment["COORM_RUN_JSON"]), timeout=timeout)
    except (Unavailable, AdapterError) as error:
        raise DeployError(f"{cluster}: {error}") from error
    if not done.ok:
        raise DeployError(
            f"{cluster}: the front-end does not see {shlex.quote(str(plan.workdir))}: "
            "put deployment.run_root on a file system it shares with this host"
        )


def said(done: Completed) -> str:
    """The end of what a failed command printed (its exit status when it printed nothing)."""
    text = (done.stderr or done.stdout).strip()
    return text[-600:] or f"exit status {done.returncode}"


class CommandDeployer(Deployer):
    """A deployer that submits with the batch system's command, as the launcher's user: the
    run-directory check, the job built from its plan, the refusals and the job id's reading
    are here; a batch system says which command (:meth:`command`) and how to read its id."""

    #: The submitting command's name, for messages.
    tool: ClassVar[str]
    #: Seconds one command may take.
    timeout: ClassVar[float] = 30
    #: Added to every command's environment.
    environment: ClassVar[Mapping[str, str]] = {}

    def __init__(self, cluster: str, runner: Runner, *, remote: bool) -> None:
        super().__init__(cluster)
        self.runner = runner
        self.remote = remote

    def submit(self, plan: JobPlan, time_limit: int) -> str:
        if self.remote:
            check_shared(self.runner, self.cluster, plan, self.timeout)
        try:
            job = JobSpec(
                name=plan.component,
                user=getpass.getuser(),
                argv=plan.argv,
                hosts=len(plan.hosts),
                walltime=time_limit,
                reservation=plan.reservation,
                workdir=str(plan.workdir),
                environment=dict(plan.environment),
            )
            argv = self.command(plan, job)
        except ValidationError as error:
            raise DeployError(f"{self.cluster}: cannot submit: {describe(error)}") from None
        except ValueError as error:
            raise DeployError(f"{self.cluster}: cannot submit: {error}") from error
        done = self._run(argv)
        if not done.ok:
            raise DeployError(f"{self.cluster}: {self.tool} refused the job: {said(done)}")
        try:
            return self.job_id(done.stdout)
        except ValueError as error:
            raise DeployError(f"{self.cluster}: {error}") from error

    @abstractmethod
    def command(self, plan: JobPlan, job: JobSpec) -> tuple[str, ...]:
        """The submitting command of ``job`` (``plan``'s hosts and files); ValueError when a
        name or a path cannot reach the batch system."""

    @abstractmethod
    def job_id(self, output: str) -> str:
        """The job id the submitting command printed; ValueError when it printed none."""

    def close(self) -> None:
        self.runner.close()

    def _run(self, argv: tuple[str, ...]) -> Completed:
        try:
            return self.runner.run(argv, env=self.environment, timeout=self.timeout)
        except (Unavailable, AdapterError) as error:
            raise DeployError(f"{self.cluster}: {error}") from error
