"""From a batch system's snapshot to the hosts it leaves free over time (the policy's input).

The batch system's own load is everything but the bridge: running jobs until their walltime
bound, pending jobs from their predicted start, foreign reservations, and hosts that are down or
drained. The bridge's placeholders (recognised by their name prefix) and the jobs inside them are
left out: the policy accounts for the applications that hold them.
"""

from __future__ import annotations

from collections.abc import Iterator

from coorm_bridge.adapters.base import ClusterSnapshot, JobState, NodeState
from coorm_bridge.core.profile import Profile


def foreign_load(
    snapshot: ClusterSnapshot, own_prefix: str | None
) -> Iterator[tuple[int, int | None, int]]:
    """``(start, end, hosts)`` of everything that keeps hosts from the bridge (None: forever).

    ``own_prefix=None`` counts the bridge's placeholders too: the batch system's own view."""
    now = snapshot.time

    def ours(name: str) -> bool:
        return own_prefix is not None and name.startswith(own_prefix)

    foreign = {r.name for r in snapshot.reservations if not ours(r.name)}
    own = {r.name for r in snapshot.reservations if ours(r.name)}
    down = {n.name for n in snapshot.nodes if n.state is not NodeState.UP}
    if down:
        yield now, None, len(down)
    for job in snapshot.jobs:
        if job.reservation in foreign or job.reservation in own:
            continue  # the reservation (or the application holding it) already counts these
        if job.state is JobState.RUNNING:
            assert job.start is not None
            # Hosts that are down stay unavailable after the job: they are counted above.
            hosts = job.hosts - len(down.intersection(job.host_names))
            # A job past its walltime bound still holds its hosts until the batch system acts.
            yield now, max(job.start + job.walltime, now + 1), hosts
        elif job.state is JobState.PENDING and job.start is not None:
            start = max(job.start, now)
            yield start, start + job.walltime, job.hosts
    for reservation in snapshot.reservations:
        if reservation.name in foreign and reservation.end > now:
            yield max(reservation.start, now), reservation.end, reservation.hosts


def free_profile(snapshot: ClusterSnapshot, own_prefix: str) -> Profile:
    """Hosts of this cluster free for the bridge over time, never below zero.

    Batch systems can over-commit in their predictions (a pending job predicted on hosts a
    reservation also covers): the count is clamped rather than trusted below zero.
    """
    profile = Profile.from_intervals(len(snapshot.nodes), foreign_load(snapshot, own_prefix))
    return profile.clamped(0) if profile.min_value() < 0 else profile
