"""From a batch system's snapshot to the hosts it leaves free over time (the policy's input).

What counts as the batch system's own load is :func:`~coorm_bridge.adapters.load.foreign_load`
(running jobs, predicted pending ones, foreign reservations, unavailable hosts; never the
bridge's placeholders, recognised by their name prefix).
"""

from __future__ import annotations

from collections.abc import Collection

from coorm_bridge.adapters.load import foreign_load
from coorm_bridge.core.batch import ClusterSnapshot
from coorm_bridge.core.profile import Profile


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
