"""What the deployers that run a batch system's own commands share: where the commands run (this
host, or the cluster's front-end over SSH), the check that a front-end sees the run directory,
and what a failed command said.

The commands run as the user who runs the launcher: the bridge's placeholder lets that user's
jobs in, and the jobs' files are theirs. Over SSH only known host keys are trusted (the
project's :class:`~coorm_bridge.adapters.batch.runner.SshRunner`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from coorm_bridge.adapters.base import AdapterError, Unavailable
from coorm_bridge.adapters.batch.runner import Completed, LocalRunner, Runner, SshRunner, SshTarget
from coorm_bridge.launchers.deploy.base import DeployError
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
