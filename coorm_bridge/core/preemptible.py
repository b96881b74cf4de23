"""The preemptible side of a CooRMv2 pass, on one cluster: shares, starts and preemptions.

Preemptible work runs on hosts nobody holds (holes before local jobs' predicted starts, unused
parts of pre-allocations). Those hosts are equi-partitioned among the applications that ask for
preemptible ones, so each is told how many it may use and until when: a waiting request starts
when its application's share now covers it, and a running one whose share later falls below
what its application holds must give hosts back by the time it falls (a preemption).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from coorm_bridge.core.equipartition import equipartition
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.typed import EvolvingApplication, RequestRow, RequestStatus, RequestType

_ZERO = Profile.constant(0)


@dataclass(frozen=True, slots=True)
class Preemption:
    """A started preemptible request must give ``hosts`` back by ``deadline``."""

    request: str
    hosts: int
    deadline: int


@dataclass(frozen=True, slots=True)
class Running:
    request: str
    held: int
    started_at: int
    end: int


@dataclass(frozen=True, slots=True)
class Waiting:
    request: str
    hosts: int
    duration: int
    after: int
    """The earliest it may start (now, or its related request's end for ``next``)."""


@dataclass(slots=True)
class Claim:
    """One application's preemptible requests on one cluster."""

    running: list[Running] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)

    def wanted(self, now: int) -> Profile:
        """Hosts it asks for over time: what runs, until its end; what waits, from when it may
        start on (its end is unknown until it starts)."""
        profile = _ZERO
        for r in self.running:
            profile = profile.add(r.held, r.started_at, r.end)
        for w in self.waiting:
            profile = profile.add(w.hosts, w.after, None)
        return profile.truncated(now)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the preemptible side decided for one application on one cluster."""

    share: Profile
    starts: dict[str, int | None]
    """Per waiting request: its (estimated) start; now when it starts at once."""
    preemptions: tuple[Preemption, ...]


def claims_of(
    table: Sequence[EvolvingApplication],
    now: int,
    start_of: Callable[[EvolvingApplication, RequestRow], int | None],
) -> tuple[dict[str, dict[str, Claim]], list[tuple[str, str]]]:
    """Per cluster, per application in subscription order, its preemptible requests; and the
    waiting ones that cannot start yet (``start_of`` says when each may: None, not yet)."""
    claims: dict[str, dict[str, Claim]] = {}
    unplaced: list[tuple[str, str]] = []
    for app in table:
        for row in app.requests:
            r = row.request
            if r.type is not RequestType.PREEMPTIBLE or row.status is RequestStatus.DONE:
                continue
            claim = claims.setdefault(r.cluster, {}).setdefault(app.id, Claim())
            if row.status is RequestStatus.STARTED:
                if row.end() > now:
                    claim.running.append(
                        Running(row.id, row.held or 0, row.started_at or 0, row.end())
                    )
            elif (after := start_of(app, row)) is not None:
                claim.waiting.append(Waiting(row.id, r.hosts, r.duration, after))
            else:
                unplaced.append((app.id, row.id))
    return claims, unplaced


def share_cluster(
    pool: Profile, claims: Mapping[str, Claim], now: int
) -> tuple[dict[str, Outcome], Profile]:
    """Each claiming application's outcome (``claims`` in subscription order), and what nobody
    claims (the preemptible view of the applications that ask for nothing here)."""
    shares = equipartition(pool, {app: claim.wanted(now) for app, claim in claims.items()})
    unclaimed = pool
    outcomes: dict[str, Outcome] = {}
    for app, claim in claims.items():
        share = shares[app]
        unclaimed = unclaimed - share
        running = list(claim.running)
        held = _ZERO
        for r in running:
            held = held.add(r.held, r.started_at, r.end)
        starts: dict[str, int | None] = {}
        for w in claim.waiting:
            room = share - held
            if w.after == now and room.value_at(now) >= w.hosts:
                starts[w.request] = now
                running.append(Running(w.request, w.hosts, now, now + w.duration))
                held = held.add(w.hosts, now, now + w.duration)
            else:
                # Not a promise: the share may fall again before then.
                starts[w.request] = room.earliest_fit(w.hosts, 1, w.after)
        outcomes[app] = Outcome(share, starts, _preempt(share, held, running, now))
    return outcomes, unclaimed


def _preempt(
    share: Profile, held: Profile, running: list[Running], now: int
) -> tuple[Preemption, ...]:
    """When the share first falls below what runs: the hosts over, taken from the requests that
    started last (they lose the least work)."""
    deadline = (held - share).earliest_fit(1, 1, now)
    if deadline is None:
        return ()
    over = held.value_at(deadline) - share.value_at(deadline)
    found = []
    alive = [(r.started_at, i, r) for i, r in enumerate(running) if deadline < r.end]
    for _, _, r in sorted(alive, reverse=True):
        if over <= 0:
            break
        give = min(over, r.held)
        found.append(Preemption(r.request, give, deadline))
        over -= give
    return tuple(found)


__all__ = ["Claim", "Outcome", "Preemption", "Running", "Waiting", "claims_of", "share_cluster"]
