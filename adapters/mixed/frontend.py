"""The front end of a mixed site: the one system's that has one, confined to its clusters.

Only the simulated platform has a front end (the bridge runs the jobs launchers submit into its
placeholders, :mod:`coorm_bridge.adapters.frontend`); on a mixed site the other systems' clusters
take jobs through their own batch systems' commands, so a job for one of them is refused here
rather than handed to a platform that does not have the cluster.
"""

from __future__ import annotations

from collections.abc import Callable

from coorm_bridge.adapters.frontend import FrontEnd, Launched, ProcessEnd, ProcessSpec
from coorm_bridge.core.batch import AdapterError, JobSpec


class ConfinedFrontEnd(FrontEnd):
    """A system's front end, confined to its own clusters: a job for another cluster is
    refused (its batch system takes jobs itself) rather than sent to the wrong one."""

    def __init__(self, front: FrontEnd, label: str, serves: Callable[[str], bool]) -> None:
        self.front = front
        self.label = label
        self.serves = serves
        self.grace = front.grace

    def refusal(self, owner: str) -> str | None:
        return self.front.refusal(owner)

    def submit(self, cluster: str, job: JobSpec) -> str:
        self._check(cluster)
        return self.front.submit(cluster, job)

    def launch(self, job: str, spec: ProcessSpec) -> Launched:
        return self.front.launch(job, spec)

    def recover(self, job: str) -> Launched | None:
        return self.front.recover(job)

    def outcome(self, job: str, launched: Launched) -> ProcessEnd | None:
        return self.front.outcome(job, launched)

    def stop(self, job: str, launched: Launched, *, force: bool = False) -> None:
        self.front.stop(job, launched, force=force)

    def ended(self, cluster: str, batch_job: str, outcome: ProcessEnd) -> None:
        self._check(cluster)
        self.front.ended(cluster, batch_job, outcome)

    def _check(self, cluster: str) -> None:
        if not self.serves(cluster):
            raise AdapterError(
                f"{cluster}: its batch system takes jobs itself; the bridge runs jobs on the "
                f"clusters of {self.label} only",
                cluster=cluster,
            )
