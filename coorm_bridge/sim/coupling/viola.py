"""VIOLA's negotiation loop (seed 003): advance reservations asked of every local scheduler.

The meta-scheduler proposes a start (first the arrival plus ``lead``) and asks every cluster to
reserve the application's hosts over ``[start, start + duration)``. Each one accepts or refuses;
a refusal carries the local scheduler's next possible time (the mock's ``retry_after``, as
Slurm's and OAR's answers give it). If any refused, everything reserved in this round is
released and the next round proposes the latest suggested time. Local schedulers grant
reservations over hosts their own pending jobs were planned on and re-plan those jobs later:
that is the cost this loop puts on the background, which the bridge avoids by asking for a start
its views show free. Negotiation takes no simulated time (a few seconds in reality).
"""

from __future__ import annotations

from coorm_bridge.core.batch import Refused, ReservationHandle, ReservationSpec
from coorm_bridge.sim.coupling.platform import (
    OWNER,
    Scenario,
    StrategyResult,
    advance,
    run_in_reservations,
)


def run_viola(scenario: Scenario, *, lead: int) -> StrategyResult:
    """Negotiate a common start for the application; see the module docstring."""
    adapter = scenario.platform()
    advance(adapter, scenario.arrival)
    n, duration, clusters = scenario.hosts, scenario.duration, sorted(scenario.clusters)
    start = scenario.arrival + lead
    rounds = 0
    while True:
        rounds += 1
        taken: dict[str, ReservationHandle] = {}
        hints: list[int] = []
        refused = False
        for c in clusters:
            spec = ReservationSpec(
                name=f"viola-{c}", start=start, end=start + duration, hosts=n, users=(OWNER,)
            )
            try:
                taken[c] = adapter.create_reservation(c, spec)
            except Refused as refusal:
                refused = True
                if refusal.retry_after is not None:
                    hints.append(refusal.retry_after)
        if not refused:
            break
        for c, handle in taken.items():
            adapter.delete_reservation(c, handle.name)
        if not hints or max(hints) <= start:
            raise RuntimeError(f"no cluster suggested a later start than {start}")
        start = max(hints)
    return run_in_reservations(
        adapter,
        taken,
        dict.fromkeys(taken, n),
        name="viola",
        start=start,
        duration=duration,
        rounds=rounds,
    )
