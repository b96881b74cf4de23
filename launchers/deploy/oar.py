"""Deployment on OAR: ``oarsub -t inner=ID`` into the bridge's container, on exactly the granted
hosts.

The bridge's placeholders on OAR are container advance reservations named after the placeholder;
the start event carries that name, not the container's job id. So the deployer looks the id up
in ``oarstat -J`` (the live container of that name; the newest if a move left two), then submits
an inner job restricted to the granted hosts (``-p "cluster='alpha' AND host IN (...)"`` with
``-l /host=N``: exactly those hosts), with a walltime no longer than the time limit, its
outputs in the run directory (``-O``/``-E``). The command is the plan's argument vector, quoted
word by word, because OAR hands it to the user's login shell (see
:func:`~coorm_bridge.adapters.oar.commands.command_line`).

Everything runs as the user who runs the launcher, here or on the cluster's front-end over SSH
(known host keys only): OAR's jobs belong to whoever runs ``oarsub``. States and exit statuses
come from ``oarstat -J -f -j ID`` (OAR stores a wait status: 256 is exit 1); ``oardel`` stops a
job.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from coorm_bridge.adapters.batch.runner import Runner
from coorm_bridge.adapters.oar import answers, commands
from coorm_bridge.adapters.oar.binding import CLUSTER_PROPERTY, HOST_PROPERTY, OarBinding
from coorm_bridge.core.batch import JobSpec
from coorm_bridge.launchers.deploy.base import (
    DeployError,
    JobStatus,
    State,
    SubmissionInfo,
)
from coorm_bridge.launchers.deploy.front_end import CommandDeployer, runner_for, said
from coorm_bridge.launchers.rundir import JobPlan

#: Seconds one OAR command may take (each is a Perl program that opens the database: well under
#: a second when the server is idle).
TIMEOUT = 60
#: Seconds of the time limit left unused (the deployer's slack). OAR places an inner job only
#: where it fits whole in its container from the meta-scheduler's next pass: a job asking for
#: exactly what is left is never placed (``no_matching_slot``; OAR 2.5.9, a pass one second
#: after the submission). The pass follows the submission within a second on an idle server,
#: and up to ~11 s with Debian's ``SCHEDULER_MIN_TIME_BETWEEN_2_CALLS`` of 5 s.
SCHEDULING_MARGIN = 30
#: OAR's states as a launcher's (Error is refined from the job's events).
STATES: dict[str, State] = {
    "Waiting": "pending",
    "Hold": "pending",
    "toAckReservation": "pending",
    "toLaunch": "running",
    "Launching": "running",
    "Running": "running",
    "Suspended": "running",
    "Resuming": "running",
    "Finishing": "running",
    "Terminated": "completed",
    "toError": "failed",
    "Error": "failed",
}


class OarDeployer(CommandDeployer):
    kind = "oar"
    unit = 1  # OAR's walltime is in seconds
    slack = SCHEDULING_MARGIN
    tool = "oarsub"
    timeout = TIMEOUT
    environment = commands.ENV

    def __init__(
        self, cluster: str, submission: SubmissionInfo, runner: Runner | None = None
    ) -> None:
        front_end = submission.front_end
        self.binding = OarBinding(
            name=cluster,
            property=submission.cluster_property or CLUSTER_PROPERTY,
            value=submission.cluster or cluster,
            host_property=submission.host_property or HOST_PROPERTY,
            front_end=front_end,
        )
        super().__init__(cluster, runner or runner_for(front_end), remote=front_end is not None)
        self._addresses: dict[str, str] = {}
        self._containers: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- submitting ---------------------------------------------------------------------------

    def container(self, reservation: str) -> str:
        """The OAR job id of the live container named ``reservation`` (asked once: a begun
        placeholder is not moved)."""
        with self._lock:
            known = self._containers.get(reservation)
        if known is not None:
            return known
        found = answers.container(self._json(commands.current_jobs()), reservation)
        if found is None:
            raise DeployError(
                f"{self.cluster}: OAR has no live container named {reservation!r} (the "
                "placeholder ended, or the bridge deleted it)"
            )
        with self._lock:
            self._containers[reservation] = found
        return found

    def command(self, plan: JobPlan, job: JobSpec) -> tuple[str, ...]:
        if job.reservation is None:  # a preemptible request's work: OAR takes it back itself
            return commands.submit_besteffort(
                self.binding, job, None, hosts=plan.hosts,
                output=str(plan.stdout), error=str(plan.stderr),
            )  # fmt: skip
        return commands.submit_inner(
            self.binding,
            job,
            self.container(job.reservation),
            None,  # the user who runs the launcher (see the module's docstring)
            hosts=plan.hosts,
            output=str(plan.stdout),
            error=str(plan.stderr),
        )

    def job_id(self, output: str) -> str:
        return commands.created_job_id(output)

    # -- watching -----------------------------------------------------------------------------

    def status(self, job: str) -> JobStatus:
        found = answers.job(self._json(commands.show_job(job)), job)
        if found is None:
            return JobStatus("unknown", None, f"OAR no longer knows job {job}")
        return status_of(found)

    def cancel(self, job: str) -> None:
        """``oardel``; OAR refuses to delete a finished job (and an unknown one): no error
        then, since it stopped anyway."""
        done = self._run(commands.delete_job(job, None))
        if done.ok:
            return
        if self.status(job).finished:
            return
        raise DeployError(f"{self.cluster}: oardel {job}: {said(done)}")

    def warm(self, hosts: Sequence[str], reservation: str | None) -> None:
        """The container's id and every host's ``network_address``, side by side: each OAR
        command is a Perl program opening OAR's database, between the start and the jobs'."""
        with ThreadPoolExecutor(2) as pool:
            if reservation is not None:
                pool.submit(self._container_id, reservation)
            pool.submit(self._addresses_of, hosts)

    def _container_id(self, reservation: str) -> None:
        with contextlib.suppress(DeployError):  # said again at the submission
            self.container(reservation)

    def _addresses_of(self, hosts: Sequence[str]) -> None:
        wanted = [h for h in hosts if h not in self._addresses]
        if not wanted:
            return
        try:
            data = self._json(commands.hosts_resources(self.binding, wanted))
        except (DeployError, ValueError):
            return  # looked up one by one later, as before
        with self._lock:
            for host in wanted:
                found = answers.network_address(data, self.binding.host_property, host)
                if found:
                    self._addresses[host] = found

    def address(self, host: str) -> str:
        """The host's ``network_address`` (how OAR itself reaches it); its name when OAR does
        not say."""
        with self._lock:
            if host not in self._addresses:
                try:
                    data = self._json(commands.host_resources(self.binding, host))
                    found = answers.network_address(data, self.binding.host_property, host)
                except (DeployError, ValueError):
                    found = None
                self._addresses[host] = found or host
            return self._addresses[host]

    def _json(self, argv: tuple[str, ...]) -> Any:
        """What a command printed, as JSON; nothing is an empty object (oarstat prints nothing
        when no job matches, an unknown job id included)."""
        done = self._run(argv)
        if not done.ok:
            raise DeployError(f"{self.cluster}: {argv[0]}: {said(done)}")
        if not done.stdout.strip():
            return {}
        try:
            return json.loads(done.stdout)
        except ValueError as error:
            raise DeployError(f"{self.cluster}: {argv[0]} printed no JSON: {error}") from error


def status_of(job: answers.JobDetails) -> JobStatus:
    """A launcher's view of an OAR job: Terminated with a non-zero exit is a failure, an Error
    that ``oardel`` caused is a cancellation; the exit status as a shell reports it."""
    state = STATES.get(job.state, "unknown")
    code = job.exit_code
    detail = job.reason
    if job.signal is not None:
        detail = f"signal {job.signal}" + (f": {detail}" if detail else "")
    if state == "completed" and code not in (0, None):
        state = "failed"
    elif state == "failed" and job.deleted:
        state = "cancelled"
    elif state == "unknown":
        detail = f"OAR state {job.state!r}"
    elif state == "pending" and answers.NO_SLOT in job.message:
        # never placed while the container's hosts or time cannot hold it (it waits on, as a
        # job that holds them may still end early)
        detail = "OAR finds no room for it in its container (hosts or time): it waits"
    return JobStatus(state, code, detail)
