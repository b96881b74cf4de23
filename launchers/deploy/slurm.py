"""Deployment on Slurm: ``sbatch`` into the bridge's placeholder, on exactly the granted hosts.

The job is submitted as the user who runs the launcher (the placeholder lets only that user
in), on this host or on the cluster's front-end over SSH (known host keys only, the project's
:class:`~coorm_bridge.adapters.batch.runner.SshRunner`). The argument vector and every check on
it come from the Slurm adapter's :mod:`~coorm_bridge.adapters.slurm.commands`: the job script
exports the environment and runs the command, every word quoted. Its state and exit status are
read with ``scontrol show job`` (no accounting database needed); ``scancel`` stops it.

With a front-end, the run directory must be on a file system the front-end and the nodes share
with the launcher (a home directory, say): the launcher checks that the front-end sees it.
"""

from __future__ import annotations

from coorm_bridge.adapters.batch.runner import Runner
from coorm_bridge.adapters.slurm import answers, commands
from coorm_bridge.adapters.slurm.commands import Target
from coorm_bridge.core.batch import JobSpec
from coorm_bridge.launchers.deploy.base import (
    DeployError,
    JobStatus,
    SubmissionInfo,
)
from coorm_bridge.launchers.deploy.front_end import CommandDeployer, runner_for, said
from coorm_bridge.launchers.rundir import JobPlan

#: Seconds one Slurm command may take (slurmctld answers in well under a second; a restart
#: makes its commands wait about 9 s before they give up).
TIMEOUT = 30


class SlurmDeployer(CommandDeployer):
    kind = "slurm"
    unit = 60  # Slurm's --time is in minutes
    #: slurmctld starts a job in an active reservation at the scheduling its submission
    #: triggers, well within a second; one it starts later gets its limit lowered (:meth:`refit`).
    slack = 5
    tool = "sbatch"
    timeout = TIMEOUT
    environment = commands.ENV

    def __init__(
        self, cluster: str, submission: SubmissionInfo, runner: Runner | None = None
    ) -> None:
        self.target = Target(cluster=submission.cluster, partition=submission.partition)
        env = {} if submission.slurm_conf is None else {"SLURM_CONF": submission.slurm_conf}
        runner = runner or runner_for(submission.front_end, env)
        super().__init__(cluster, runner, remote=submission.front_end is not None)

    def command(self, plan: JobPlan, job: JobSpec) -> tuple[str, ...]:
        return commands.sbatch(
            self.target,
            job,
            nodelist=plan.hosts,
            output=str(plan.stdout),
            error=str(plan.stderr),
        )

    def job_id(self, output: str) -> str:
        return answers.parse_job_id(output)

    def status(self, job: str) -> JobStatus:
        done = self._run(commands.show_job(self.target, job))
        if not done.ok:
            if answers.classify_error(done.stderr) == "no_such_job":
                return JobStatus(
                    "unknown", None, f"Slurm no longer knows job {job} (past MinJobAge)"
                )
            raise DeployError(f"{self.cluster}: scontrol show job {job}: {said(done)}")
        try:
            record = answers.parse_job(done.stdout)
        except ValueError as error:
            raise DeployError(f"{self.cluster}: {error}") from error
        return JobStatus(record.state.value, record.exit_code)

    def cancel(self, job: str) -> None:
        done = self._run(commands.scancel(self.target, job))
        if not done.ok:
            raise DeployError(f"{self.cluster}: scancel {job}: {said(done)}")

    def refit(self, job: str, time_limit: int) -> bool:
        """``scontrol update JobId=ID TimeLimit=M``: a user may lower their own job's limit."""
        try:
            argv = commands.lower_time_limit(self.target, job, time_limit)
        except ValueError as error:
            raise DeployError(f"{self.cluster}: {error}") from error
        done = self._run(argv)
        if not done.ok:
            raise DeployError(f"{self.cluster}: scontrol update {job}: {said(done)}")
        return True

    def address(self, host: str) -> str:
        """The node's ``NodeAddr`` (its name when Slurm does not say)."""
        done = self._run(commands.show_node(self.target, host))
        return (answers.node_address(done.stdout) if done.ok else None) or host
