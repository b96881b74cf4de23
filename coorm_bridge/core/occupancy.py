"""What a cluster's snapshot says keeps hosts from the bridge over time, and so what it leaves free.

One idea in one place: the batch system's own load (running jobs until their walltime bound,
predicted pending ones, foreign reservations, unavailable hosts; never the bridge's
placeholders, recognised by their name prefix) and the free hosts it leaves, the policy's
input. The bridge's placement reads the free profile; adapters that plan what the batch system
left unplanned (:mod:`coorm_bridge.adapters.batch.estimate`) read the load as the batch system
sees it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from coorm_bridge.core.batch import ClusterSnapshot, JobState, NodeState
from coorm_bridge.core.profile import Profile


def foreign_load(
    snapshot: ClusterSnapshot,
    own_prefix: str | None,
    accounted: Collection[str] | None = None,
) -> Iterator[tuple[int, int | None, int]]:
    """``(start, end, hosts)`` of everything that keeps hosts from the bridge (None: forever).

    The batch system's own load: running jobs until their walltime bound, pending jobs from their
    predicted start, foreign reservations, and hosts that are down or drained. Reservations named
    with ``own_prefix`` (the bridge's placeholders) and the jobs inside them are left out: the
    policy accounts for the applications that hold them. ``own_prefix=None`` counts them too: the
    batch system's own view. With ``accounted``, only those named there are left out: a
    placeholder the bridge is still releasing (say a job inside keeps it in use) holds its hosts
    as any reservation does, until it is gone."""
    now = snapshot.time

    def ours(name: str) -> bool:
        return (
            own_prefix is not None
            and name.startswith(own_prefix)
            and (accounted is None or name in accounted)
        )

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


def free_profile(
    snapshot: ClusterSnapshot, own_prefix: str, accounted: Collection[str] | None = None
) -> Profile:
    """Hosts of this cluster free for the bridge over time, never below zero; ``accounted``:
    the placeholders the policy subtracts itself (None: all of the bridge's).

    Batch systems can over-commit in their predictions (a pending job predicted on hosts a
    reservation also covers): the count is clamped rather than trusted below zero.
    """
    profile = Profile.from_intervals(
        len(snapshot.nodes), foreign_load(snapshot, own_prefix, accounted)
    )
    return profile.clamped(0) if profile.min_value() < 0 else profile
