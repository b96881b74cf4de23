"""The bridge's way: views from snapshots, the earliest common start, placeholders on all or none.

Modelled on the daemon's placement pass (:mod:`coorm_bridge.service.passes`) without its store:
each cluster's view is :func:`~coorm_bridge.core.occupancy.free_profile` of the local
scheduler's snapshot (running jobs to their bound, pending jobs at their predicted starts,
reservations); the application starts at the earliest time all three fit it
(:func:`~coorm_bridge.core.profile.earliest_common_start`). The pass runs again whenever a local
scheduler changes (any event) or the planned start comes within ``horizon``; only then are the
placeholders held, with :func:`~coorm_bridge.placement.coallocation.hold` (all or none). A
refusal rolls everything back; the pass recomputes at once from fresh snapshots, no earlier than
the refusing scheduler's hint (a count-based view cannot see that no single set of hosts is free
for the whole window; the hint can). The application's jobs are submitted into the placeholders
as soon as they are held and start at their start.

A horizon of :data:`HOLD_AT_ONCE` models the daemon's ``hold_first`` (the first waiting
application holds at its estimated start whatever the horizon).
"""

from __future__ import annotations

from coorm_bridge.core.occupancy import free_profile
from coorm_bridge.core.profile import earliest_common_start
from coorm_bridge.placement.coallocation import CoAllocationFailed, hold
from coorm_bridge.sim.coupling.platform import (
    OWNER,
    Scenario,
    StrategyResult,
    advance,
    next_time,
    run_in_reservations,
)

#: The bridge's placeholder prefix (the daemon's default instance prefix is alike).
PREFIX = "coorm-"
SESSION = "app"
#: A horizon longer than any wait: placeholders are held as soon as the start is known.
HOLD_AT_ONCE = 10**9


def run_bridge(scenario: Scenario, *, horizon: int) -> StrategyResult:
    """Place the application through the bridge's placeholders; see the module docstring."""
    adapter = scenario.platform()
    advance(adapter, scenario.arrival)
    nodes = dict.fromkeys(scenario.clusters, scenario.hosts)
    duration = scenario.duration
    floor = scenario.arrival  # no start before the latest refusal's hint
    rounds = 0
    while True:
        now = adapter.now()
        snapshot = adapter.snapshot()
        views = [(free_profile(snapshot.clusters[c], PREFIX), n) for c, n in nodes.items()]
        start = earliest_common_start(views, duration, max(now, floor))
        if start is None:
            raise RuntimeError(f"{scenario.hosts} hosts never fit on every cluster")
        if start > now + horizon:
            advance(adapter, next_time(adapter, start - horizon))
            continue
        rounds += 1
        try:
            handles = hold(
                adapter,
                prefix=PREFIX,
                session_id=SESSION,
                owner=OWNER,
                nodes=nodes,
                start=start,
                end=start + duration,
            )
        except CoAllocationFailed as failed:
            hints = [t for t in failed.retry_after.values() if t > start]
            if hints:
                floor = max(floor, *hints)
            else:  # nothing to go by: wait for the platform to change
                advance(adapter, next_time(adapter))
            continue
        break
    return run_in_reservations(
        adapter, handles, nodes, name=SESSION, start=start, duration=duration, rounds=rounds
    )
