"""The CooRMv2 policy: one pass computes both views of every evolving application.

A pure, deterministic function of (free hosts per cluster, the v2 application table, now,
fair_start), like v1's :class:`~coorm_bridge.core.policy.Policy`, in four steps:

1. The base: free hosts less what started pre-allocations and non-preemptible requests hold
   (a request inside a started pre-allocation takes nothing more: the pre-allocation holds its
   hosts) and less ghosts (a done request's hosts held until ``done + fair_start``, per request).
2. Announced updates: a ``next`` request whose related request started is reserved first, at the
   related one's end, on its hosts (a ghost hands them over). Reserving it before anyone else is
   what makes an announced update guaranteed. If it does not fit there, step 3 places it.
3. Conservative backfilling in subscription order: an application's non-preemptible view is the
   last view before its own waiting requests; its pre-allocations and non-preemptible requests
   are placed in request order at their earliest start (``coalloc`` ones at one common start)
   and reserved. A non-preemptible request that fits in the unused part of one of its started
   pre-allocations starts inside it (a spontaneous update): nowhere else is one guaranteed.
4. The preemptible view: what the last view leaves free plus the unused parts of started
   pre-allocations, equi-partitioned among the applications that ask for preemptible hosts.
   A pending preemptible request starts when its share covers it now; a started one whose share
   later falls below what it holds is told to give hosts back by then (a preemption).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coorm_bridge.core.model import MAX_TIME
from coorm_bridge.core.preemptible import Outcome, Preemption, claims_of, share_cluster
from coorm_bridge.core.profile import Profile, earliest_joint_start
from coorm_bridge.core.typed import (
    EvolvingApplication,
    Relation,
    RequestRow,
    RequestStatus,
    RequestType,
)

NP, PA, PRE = RequestType.NON_PREEMPTIBLE, RequestType.PRE_ALLOCATION, RequestType.PREEMPTIBLE
PENDING, STARTED, DONE = RequestStatus.PENDING, RequestStatus.STARTED, RequestStatus.DONE
_ZERO = Profile.constant(0)


@dataclass(frozen=True, slots=True)
class RequestDecision:
    """What one pass decided for one pending request."""

    estimated_start: int | None = None
    """When it starts (None: it never fits, or its related request is not placed)."""
    starts_now: bool = False
    inside: str | None = None
    """The started pre-allocation whose hosts it takes (None: the cluster's)."""


@dataclass(frozen=True, slots=True)
class Views:
    """An application's two views, per cluster it sees."""

    non_preemptible: dict[str, Profile]
    preemptible: dict[str, Profile]


@dataclass(frozen=True)
class PlanV2:
    now: int
    views: dict[str, Views]
    decisions: dict[str, dict[str, RequestDecision]]
    """Per application, per pending request."""
    preemptions: dict[str, tuple[Preemption, ...]]
    to_start: tuple[tuple[str, str], ...]
    """(application, request) that start now, in subscription then request order."""
    expired: tuple[tuple[str, str], ...]
    """Started requests whose allocation ended without ``done`` (to kill)."""
    changed: tuple[str, ...]
    """Applications whose views differ from the previous plan's (all of them without one)."""
    base: dict[str, Profile]
    left: dict[str, Profile]
    """The last view once everything non-preemptible is placed: what a newcomer sees."""
    pool: dict[str, Profile]
    """What the preemptible views share, per cluster."""


def related_end(row: RequestRow) -> int:
    """When a started request lets a ``next`` one take over: done, or its allocation's end."""
    return row.done_at if row.done_at is not None else row.end()


class _Pass:
    """The state of one pass: the last view, unused pre-allocations, decisions so far."""

    def __init__(
        self, capacity: Mapping[str, Profile], table: list[EvolvingApplication], now: int, fair: int
    ) -> None:
        self.now, self.fair = now, fair
        self.decisions: dict[str, dict[str, RequestDecision]] = {app.id: {} for app in table}
        self.expired: list[tuple[str, str]] = []
        self.unused: dict[tuple[str, str], Profile] = {}
        self.pa_cluster: dict[tuple[str, str], str] = {}
        self.in_base: set[tuple[str, str]] = set()
        """Started and done requests whose hosts the base holds (a ``next`` one takes them over)."""
        base = dict(capacity)
        for app in table:
            rows = {row.id: row for row in app.requests}
            for row in app.requests:
                if row.status is PENDING:
                    continue
                end = row.end()
                if row.status is STARTED and end <= now:
                    self.expired.append((app.id, row.id))
                    continue
                if row.request.type is PRE:
                    continue
                if self.lends(row):
                    self.unused[app.id, row.id] = _ZERO.add(row.held or 0, row.started_at or 0, end)
                    self.pa_cluster[app.id, row.id] = row.request.cluster
                inside = rows[row.inside] if row.inside is not None else None
                if inside is not None and self.lends(inside):
                    key = (app.id, inside.id)
                    stop = row.done_at if row.done_at is not None else end
                    self.unused[key] = self.unused[key].add(
                        -(row.held or 0), row.started_at or 0, stop
                    )
                    continue
                c = row.request.cluster
                self.in_base.add((app.id, row.id))
                if c in base:
                    base[c] = base[c].add(-(row.held or 0), row.started_at or 0, row.hold_end(fair))
        self.base = {c: _floor(p.truncated(now)) for c, p in base.items()}
        self.unused = {key: _floor(p.truncated(now)) for key, p in self.unused.items()}
        self.left = dict(self.base)

    def lends(self, row: RequestRow) -> bool:
        """A started pre-allocation, not done, not over: its unused hosts serve updates."""
        return row.request.type is PA and row.status is STARTED and row.end() > self.now

    def pools(self) -> dict[str, Profile]:
        """What the preemptible views share: the last view plus unused pre-allocations."""
        pools = dict(self.left)
        for key, unused in self.unused.items():
            c = self.pa_cluster[key]
            if c in pools:
                pools[c] = pools[c] + unused
        return pools

    def decide(
        self, app: str, row: RequestRow, start: int | None, inside: str | None = None
    ) -> None:
        self.decisions[app][row.id] = RequestDecision(start, start == self.now, inside)

    def start_of(self, app: EvolvingApplication, row: RequestRow) -> int | None:
        """The earliest a waiting request may start: now, or its related one's end for ``next``
        (None while the related one has no start)."""
        if row.request.related_how is not Relation.NEXT or row.request.related_to is None:
            return self.now
        related = next(r for r in app.requests if r.id == row.request.related_to)
        if related.status is not PENDING:
            return max(self.now, related_end(related))
        placed = self.decisions[app.id].get(related.id)
        if placed is None or placed.estimated_start is None:
            return None
        return max(self.now, placed.estimated_start + related.request.duration)

    def try_inside(self, app: EvolvingApplication, row: RequestRow, at: int) -> bool:
        """Start ``row`` at ``at`` inside a started pre-allocation whose unused hosts cover it."""
        request = row.request
        for pa in app.requests:
            key = (app.id, pa.id)
            if key not in self.unused or pa.request.cluster != request.cluster:
                continue
            end = at + request.duration
            unused = self.unused[key]
            if end <= pa.end() and unused.min_over(at, end) >= request.hosts:
                self.unused[key] = unused.add(-request.hosts, at, end)
                self.decide(app.id, row, at, pa.id)
                return True
        return False

    def announced(self, app: EvolvingApplication, row: RequestRow, grouped: set[str]) -> None:
        """Step 2 for one ``next`` request whose related one started."""
        related = next(r for r in app.requests if r.id == row.request.related_to)
        if related.status is PENDING or row.id in grouped:
            return
        at = max(self.now, related_end(related))
        if row.request.type is NP and self.try_inside(app, row, at):
            return
        c, hosts, end = row.request.cluster, row.request.hosts, at + row.request.duration
        if c not in self.left or end > MAX_TIME:
            return
        room = self.left[c]
        hold = related.hold_end(self.fair) if related.started_at is not None else at
        if (app.id, related.id) in self.in_base and hold > at:
            room = room.add(min(related.held or 0, hosts), at, hold)
        if room.min_over(at, end) >= hosts:
            self.left[c] = room.add(-hosts, at, end)
            self.decide(app.id, row, at)

    def backfill(self, app: EvolvingApplication) -> None:
        """Step 3 for one application: its waiting pre-allocations and non-preemptible requests."""
        groups = coalloc_groups(app)
        done = self.decisions[app.id]
        for row in app.requests:
            if row.status is not PENDING or row.request.type is PRE or row.id in done:
                continue
            members = groups.get(row.id, [row])
            after = self.start_of(app, members[0])
            if after is None:
                for member in members:
                    self.decide(app.id, member, None)
                continue
            if len(members) == 1 and row.request.type is NP and self.try_inside(app, row, after):
                continue
            start = self.earliest(members, after)
            for member in members:
                self.decide(app.id, member, start)
                if start is not None:
                    c, r = member.request.cluster, member.request
                    self.left[c] = self.left[c].add(-r.hosts, start, start + r.duration)

    def earliest(self, members: list[RequestRow], after: int) -> int | None:
        """The first start >= ``after`` where every member fits for its own duration."""
        per_cluster: dict[str, list[tuple[int, int]]] = {}
        for member in members:
            r = member.request
            if r.cluster not in self.left:
                return None
            per_cluster.setdefault(r.cluster, []).append((r.duration, r.hosts))
        demands: list[tuple[Profile, int, int]] = []
        for c, pairs in per_cluster.items():
            # On one cluster, members of different durations need the sum of the longer ones'
            # hosts at each offset: one (hosts, duration) constraint per distinct duration.
            total = 0
            for duration, hosts in sorted(pairs, reverse=True):
                total += hosts
                demands.append((self.left[c], total, duration))
        start = earliest_joint_start(demands, after)
        longest = max(m.request.duration for m in members)
        return None if start is None or start > MAX_TIME - longest else start


def coalloc_groups(app: EvolvingApplication) -> dict[str, list[RequestRow]]:
    """Waiting non-preemptible requests tied by ``coalloc``, keyed by their first member (in
    request order, which is where a group is placed). Relations to started or preemptible
    requests tie nothing: such a pair cannot start together any more."""
    rows = {row.id: row for row in app.requests}
    groups: dict[str, list[RequestRow]] = {}
    root_of: dict[str, str] = {}
    for row in app.requests:
        if row.status is not PENDING or row.request.type is PRE:
            continue
        root = row.id
        related = rows.get(row.request.related_to or "")
        if (
            row.request.related_how is Relation.COALLOC
            and related is not None
            and related.id in root_of
        ):
            root = root_of[related.id]
        root_of[row.id] = root
        groups.setdefault(root, []).append(row)
    return groups


def _floor(profile: Profile) -> Profile:
    """A batch system may over-commit: a negative count of free hosts means none."""
    return profile.clamped(0) if profile.min_value() < 0 else profile


def _share(
    step: _Pass, table: list[EvolvingApplication]
) -> tuple[dict[str, Profile], dict[str, dict[str, Profile]], dict[str, tuple[Preemption, ...]]]:
    """Step 4: the pool per cluster, each application's preemptible view, the preemptions;
    decisions for waiting preemptible requests go into ``step``."""
    pools = step.pools()
    claims, unplaced = claims_of(table, step.now, step.start_of)
    outcomes: dict[str, dict[str, Outcome]] = {}
    unclaimed: dict[str, Profile] = {}
    for c, by_app in claims.items():
        if c not in pools:  # a cluster the platform no longer has
            unplaced += [
                (app_id, w.request) for app_id, claim in by_app.items() for w in claim.waiting
            ]
            continue
        outcomes[c], unclaimed[c] = share_cluster(pools[c], by_app, step.now)
    for app_id, request in unplaced:
        step.decisions[app_id][request] = RequestDecision()
    views: dict[str, dict[str, Profile]] = {}
    preemptions: dict[str, tuple[Preemption, ...]] = {}
    unshared = {c: unclaimed.get(c, pool) for c, pool in pools.items()}
    claimed: dict[str, set[str]] = {}
    for c, shared in outcomes.items():
        for app_id in shared:
            claimed.setdefault(app_id, set()).add(c)
    for app in table:
        view = views[app.id] = {c: unshared[c] for c in app.clusters if c in unshared}
        found: list[Preemption] = []
        mine = claimed.get(app.id, set())
        for c in app.clusters if mine else ():
            if c not in mine:
                continue
            outcome = outcomes[c][app.id]
            view[c] = outcome.share
            found.extend(outcome.preemptions)
            for request, start in outcome.starts.items():
                step.decisions[app.id][request] = RequestDecision(start, start == step.now)
        preemptions[app.id] = tuple(found)
    return pools, views, preemptions


def plan(
    capacity: Mapping[str, Profile],
    apps: Sequence[EvolvingApplication],
    now: int,
    fair_start: int,
    previous: PlanV2 | None = None,
) -> PlanV2:
    """One v2 pass; ``capacity``: hosts the batch systems leave free (foreign load subtracted)."""
    table = sorted(apps, key=lambda app: app.order)
    if len({a.id for a in table}) != len(table) or len({a.order for a in table}) != len(table):
        raise ValueError("application ids and subscription orders must be unique")
    step = _Pass(capacity, table, now, fair_start)
    for app in table:
        grouped = {m.id for ms in coalloc_groups(app).values() if len(ms) > 1 for m in ms}
        for row in app.requests:
            if (
                row.status is PENDING
                and row.request.type is not PRE
                and row.request.related_how is Relation.NEXT
            ):
                step.announced(app, row, grouped)
    np_views: dict[str, dict[str, Profile]] = {}
    for app in table:
        np_views[app.id] = {c: step.left[c] for c in app.clusters if c in step.left}
        step.backfill(app)
    pools, pre_views, preemptions = _share(step, table)
    views = {app.id: Views(np_views[app.id], pre_views[app.id]) for app in table}
    to_start = [
        (app.id, row.id)
        for app in table
        for row in app.requests
        if (d := step.decisions[app.id].get(row.id)) is not None and d.starts_now
    ]
    order = {
        (app.id, row.id): (app.order, i) for app in table for i, row in enumerate(app.requests)
    }
    to_start.sort(key=order.__getitem__)
    return PlanV2(
        now=now,
        views=views,
        decisions=step.decisions,
        preemptions=preemptions,
        to_start=tuple(to_start),
        expired=tuple(step.expired),
        changed=_changed(previous, views, now),
        base=step.base,
        left=step.left,
        pool=pools,
    )


def _changed(previous: PlanV2 | None, views: dict[str, Views], now: int) -> tuple[str, ...]:
    """Applications whose views differ from ``now`` on from the previous plan's."""

    def same(old: dict[str, Profile], new: dict[str, Profile]) -> bool:
        return old.keys() == new.keys() and all(
            old[c] is new[c] or old[c].truncated(now) == new[c].truncated(now) for c in new
        )

    if previous is None:
        return tuple(views)
    return tuple(
        app_id
        for app_id, new in views.items()
        if (old := previous.views.get(app_id)) is None
        or not same(old.non_preemptible, new.non_preemptible)
        or not same(old.preemptible, new.preemptible)
    )


__all__ = [
    "PlanV2",
    "Preemption",
    "RequestDecision",
    "Views",
    "plan",
]
