"""The CooRM policy (paper §III-C, slides "RMS scheduling algorithm"): FCFS by subscription order
with conservative backfilling, ghosts that hold a finished application's hosts for ``fair_start``.

The engine is a deterministic function of (free hosts per cluster, application table, now): the
caller persists states and talks to launchers and batch systems. It keeps a memo of the previous
pass only to go faster: an application is recomputed only when the profiles of the clusters it
asks for, or its request, differ from last time, so a new request at the end of a long queue costs
one application, not the whole queue. Results never depend on the memo (tested).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Self

from pydantic import Field, model_validator

from coorm_bridge.core.model import MAX_TIME, Frozen, Name, Request, Time, UserName
from coorm_bridge.core.profile import Profile, earliest_common_start
from coorm_bridge.core.states import HOLDING, PLACED, AppState, check, transition

#: A policy pass at least once an hour: a request is answered after about two intervals.
MAX_INTERVAL = 3600.0
#: A ghost holds hosts at most a day: a longer one would only keep them idle.
MAX_FAIR_START = 86_400
#: Preemptible work is told at most an hour ahead: the hosts stay idle to the others meanwhile.
MAX_PREEMPT_GRACE = 3_600


class PolicyConfig(Frozen):
    """``[policy]`` in the configuration."""

    interval: Annotated[float, Field(gt=0, le=MAX_INTERVAL, allow_inf_nan=False)] = 1.0
    """Re-policy interval: a pass runs at most once per this many seconds (at most an hour)."""
    fair_start: Annotated[int, Field(ge=0, le=MAX_FAIR_START, strict=True)] = 30
    """Seconds a finished application's hosts stay held (its ghost; at most a day)."""
    preempt_grace: Annotated[int, Field(ge=0, le=MAX_PREEMPT_GRACE, strict=True)] = 10
    """Seconds of notice preemptible work gets (API v2): a request that needs its hosts is
    placed no earlier than this after the pass that decides it, so that the work can stop,
    checkpoint and give them back before its deadline (at most an hour)."""


class Application(Frozen):
    """One row of the application table, as the policy needs it."""

    id: Name
    owner: UserName | None = None
    """Whose it is: an owner with a cap on hosts held at once is never started past it."""
    order: Annotated[int, Field(ge=0, strict=True)]
    """Subscription order: the implicit priority (lower goes first)."""
    clusters: tuple[Name, ...]
    """The clusters its filter let through: what its view covers."""
    state: AppState = AppState.SUBMITTED
    request: Request | None = None
    started_at: Time | None = None
    done_at: Time | None = None
    not_before: Time | None = None
    """Placed no earlier than this (say its placeholders could not be held: the others may use
    the hosts until its next attempt)."""
    ghost: Annotated[int, Field(ge=0, strict=True)] | None = None
    """Its own fair-start, in place of the policy's (0: a request of an evolving application
    whose announced update takes its hosts over at done)."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        check(self)
        return self

    def hold_end(self, fair_start: int) -> int:
        """Until when its hosts are held: its allocation, or its ghost (never beyond either)."""
        assert self.request is not None
        assert self.started_at is not None
        end = self.started_at + self.request.duration
        fair = fair_start if self.ghost is None else self.ghost
        return end if self.done_at is None else min(self.done_at + fair, end)


@dataclass(frozen=True, slots=True)
class Decision:
    """What one pass decided for one application."""

    state: AppState
    estimated_start: int | None = None
    """For placed applications: when its request starts (None: not yet asked, or never fits)."""
    hold_until: int | None = None
    """For started applications and ghosts: when their hosts are released."""
    view_changed: bool = False


@dataclass(slots=True)
class Counters:
    """The paper's cost measures, cumulated over passes."""

    passes: int = 0
    notifications: int = 0
    computed_configurations: int = 0
    """Distinct views handed to each application's selector (what a memoizing launcher runs)."""
    recomputed: int = 0
    """Earliest-start searches actually run (the rest were reused from the previous pass)."""


@dataclass(frozen=True)
class Plan:
    now: int
    outcomes: dict[str, Decision]
    to_start: tuple[str, ...]
    """Applications whose request starts now, in priority order."""
    changed: tuple[str, ...]
    """Placed applications whose view changed since the previous pass (to notify)."""
    expired: tuple[str, ...]
    """Started applications whose allocation ended without ``done`` (to kill)."""
    free: dict[str, Profile]
    """Free hosts once started applications and ghosts are subtracted (before placement)."""
    recomputed: int
    left: dict[str, Profile]
    """Free hosts once every placed application is subtracted too: what a new subscriber sees."""
    _clusters: tuple[str, ...] = field(repr=False)
    _views: dict[str, tuple[tuple[int, ...], tuple[Profile, ...]]] = field(repr=False)

    def view(self, app_id: str) -> dict[str, Profile]:
        """The view of a placed application: free hosts left to it, per cluster it sees."""
        indices, state = self._views[app_id]
        return {self._clusters[i]: state[i] for i in indices}


@dataclass(slots=True)
class _Memo:
    """What the previous pass computed for one application."""

    request: Request | None
    wanted: tuple[int, ...]
    inputs: tuple[Profile, ...]
    reserved: tuple[Profile, ...]
    start: int | None
    view: tuple[Profile, ...]
    views: _Seen
    not_before: int = 0


@dataclass(slots=True)
class _Seen:
    """The distinct views an application was handed. The first is kept as (state, indices) and
    hashed only once a second one comes, so a first pass over a long queue hashes nothing."""

    first: tuple[tuple[Profile, ...], tuple[int, ...]] | None = None
    hashes: set[int] = field(default_factory=set)

    def add(self, state: tuple[Profile, ...], seen: tuple[int, ...]) -> bool:
        """Record the view ``state`` restricted to ``seen``; True when it is a new one."""
        if self.first is None and not self.hashes:
            self.first = (state, seen)
            return True
        if self.first is not None:
            self.hashes.add(_view_hash(*self.first))
            self.first = None
        key = _view_hash(state, seen)
        if key in self.hashes:
            return False
        self.hashes.add(key)
        return True


def _view_hash(state: tuple[Profile, ...], seen: tuple[int, ...]) -> int:
    return hash(tuple(state[i] for i in seen))


class Policy:
    """Plans passes (the service carries them out); see the module docstring. One per bridge."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self.counters = Counters()
        self._clusters: tuple[str, ...] = ()
        self._base: tuple[Profile, ...] = ()
        self._memo: dict[str, _Memo] = {}

    def plan(
        self,
        free: Mapping[str, Profile],
        apps: Iterable[Application],
        now: int,
        held_caps: Mapping[str, int] | None = None,
    ) -> Plan:
        """One pass of the policy; ``free``: hosts the batch systems leave free (foreign load
        subtracted); ``held_caps``: per owner, the most hosts their applications may hold at
        once (all clusters together). An application whose start would pass its owner's cap
        starts later, when the owner's earlier ones leave room: the owner's headroom is one
        more profile its request must fit in, reserved like a cluster's."""
        clusters = tuple(sorted(free))
        if clusters != self._clusters:
            self._clusters, self._base, self._memo = clusters, (), {}
        index = {name: i for i, name in enumerate(clusters)}
        table = sorted(apps, key=lambda app: app.order)
        _check_unique(table)
        outcomes, holding, expired = self._settle_holders(table, now)
        state = self._base = self._make_base(free, holding, index, now)
        headroom = _headroom(held_caps or {}, holding, self.config.fair_start, now)
        to_start: list[str] = []
        changed: list[str] = []
        views: dict[str, tuple[tuple[int, ...], tuple[Profile, ...]]] = {}
        memo: dict[str, _Memo] = {}
        recomputed = 0
        seen_of: dict[tuple[str, ...], tuple[int, ...]] = {}
        for app in table:
            if app.state not in PLACED:
                continue
            seen = seen_of.get(app.clusters)
            if seen is None:
                seen = seen_of[app.clusters] = tuple(index[c] for c in app.clusters if c in index)
            views[app.id] = (seen, state)
            old = self._memo.get(app.id)
            seen_views = old.views if old else _Seen()
            entry = _Memo(app.request, (), (), (), None, state, seen_views, app.not_before or 0)
            if app.request is not None:
                room = None if app.owner is None else headroom.get(app.owner)
                recomputed += self._place(app.request, entry, old, index, now, room=room)
                if entry.start is not None:
                    state = _replace(state, entry.wanted, entry.reserved)
                    _take(headroom, app.owner, app.request, entry.start)
            new_state: AppState = app.state
            if new_state is AppState.REQUEST_SENT:
                new_state = transition(new_state, AppState.WAITING)
            if entry.start is not None and entry.start <= now:
                new_state = transition(new_state, AppState.STARTED)
                to_start.append(app.id)
            view_changed = old is None or _view_changed(old.view, entry.view, seen, now)
            if view_changed and new_state is not AppState.STARTED:
                changed.append(app.id)
                if entry.views.add(entry.view, seen):
                    self.counters.computed_configurations += 1
            outcomes[app.id] = Decision(new_state, entry.start, view_changed=view_changed)
            memo[app.id] = entry
        self._memo = memo
        self.counters.passes += 1
        self.counters.notifications += len(changed)
        self.counters.recomputed += recomputed
        return Plan(
            now=now,
            outcomes=outcomes,
            to_start=tuple(to_start),
            changed=tuple(changed),
            expired=tuple(expired),
            free=dict(zip(clusters, self._base, strict=True)),
            recomputed=recomputed,
            left=dict(zip(clusters, state, strict=True)),
            _clusters=clusters,
            _views=views,
        )

    def _settle_holders(
        self, table: list[Application], now: int
    ) -> tuple[dict[str, Decision], list[Application], list[str]]:
        """Steps 1-2 of the slides: done becomes ghost, expired ghosts finish; who still holds."""
        outcomes: dict[str, Decision] = {}
        holding: list[Application] = []
        expired: list[str] = []
        for app in table:
            if app.state not in HOLDING:
                continue
            hold_until = app.hold_end(self.config.fair_start)
            started = app.state is AppState.STARTED
            if hold_until > now:
                held = AppState.STARTED if started else AppState.GHOST
                outcomes[app.id] = Decision(transition(app.state, held), hold_until=hold_until)
                holding.append(app)
            elif started:
                expired.append(app.id)
                outcomes[app.id] = Decision(AppState.STARTED, hold_until=hold_until)
            else:
                outcomes[app.id] = Decision(transition(app.state, AppState.FINISHED))
        return outcomes, holding, expired

    @staticmethod
    def _place(
        request: Request,
        entry: _Memo,
        old: _Memo | None,
        index: Mapping[str, int],
        now: int,
        *,
        room: Profile | None = None,
    ) -> int:
        """Fill ``entry`` with the request's start and reservation; 1 if searched, 0 if reused.

        ``room``: the owner's headroom under their cap, which the request must fit in too.
        Reused when the request, its earliest allowed start, the profiles of the clusters it
        asks for and the owner's headroom are those of the previous pass, and the start found
        then is not in the past.
        """
        same = old is not None and old.request == request and old.not_before == entry.not_before
        wanted = old.wanted if old is not None and same else _indices(request, index)
        state = entry.view
        inputs = tuple(state[i] for i in wanted) if -1 not in wanted else ()
        if inputs and room is not None:
            inputs = (*inputs, room)
        entry.wanted = wanted
        fresh = old is not None and (old.start is None or old.start >= now)
        if old is not None and same and fresh and old.inputs == inputs:
            entry.inputs, entry.reserved, entry.start = old.inputs, old.reserved, old.start
            return 0
        hosts = tuple(request.nodes.values())
        demands = zip(inputs, (*hosts, request.hosts) if room is not None else hosts, strict=True)
        after = max(now, entry.not_before)
        start = earliest_common_start(demands, request.duration, after) if inputs else None
        if start is not None and start > MAX_TIME - request.duration:
            # Behind a queue of long requests a start can pass year 9999: no time the bridge
            # could state, store or give a batch system. Such a request never fits.
            start = None
        reserved = _reserve(inputs[: len(hosts)], request, start)
        entry.inputs, entry.reserved, entry.start = inputs, reserved, start
        return 1

    def _make_base(
        self,
        free: Mapping[str, Profile],
        holding: list[Application],
        index: Mapping[str, int],
        now: int,
    ) -> tuple[Profile, ...]:
        """Free hosts minus held ones; a cluster that agrees from ``now`` on keeps its old object,
        so that time passing a breakpoint neither recomputes nor notifies anyone."""
        base = [free[name] for name in self._clusters]
        for app in holding:
            assert app.request is not None
            assert app.started_at is not None
            end = app.hold_end(self.config.fair_start)
            for cluster, hosts in app.request.nodes.items():
                if cluster in index:
                    i = index[cluster]
                    base[i] = base[i].add(-hosts, app.started_at, end)
        previous = self._base
        for i, whole in enumerate(base):
            held = whole.truncated(now)
            # A batch system may over-commit; a negative count of free hosts means none.
            profile = held.clamped(0) if held.min_value() < 0 else held
            same = previous and (previous[i] is profile or previous[i].truncated(now) == profile)
            base[i] = previous[i] if same else profile
        return tuple(base)


def _headroom(
    caps: Mapping[str, int], holding: list[Application], fair_start: int, now: int
) -> dict[str, Profile]:
    """Per capped owner, how many more hosts they may hold over time: the cap less what their
    started applications and ghosts hold (below zero when the cap was lowered under them)."""
    if not caps:
        return {}
    room = {owner: Profile.constant(cap) for owner, cap in caps.items()}
    for app in holding:
        if app.owner in room:
            assert app.request is not None
            assert app.started_at is not None
            end = app.hold_end(fair_start)
            room[app.owner] = room[app.owner].add(-app.request.hosts, app.started_at, end)
    return {owner: profile.truncated(now) for owner, profile in room.items()}


def _take(headroom: dict[str, Profile], owner: str | None, request: Request, start: int) -> None:
    """A placed request of a capped owner takes its hosts from the owner's headroom."""
    if owner is not None and owner in headroom:
        end = start + request.duration
        headroom[owner] = headroom[owner].add(-request.hosts, start, end)


def _check_unique(table: list[Application]) -> None:
    ids = {app.id for app in table}
    orders = {app.order for app in table}
    if len(ids) != len(table) or len(orders) != len(table):
        raise ValueError("application ids and subscription orders must be unique")


def _indices(request: Request, index: Mapping[str, int]) -> tuple[int, ...]:
    """Cluster positions of a request; -1 for a cluster the platform no longer has."""
    return tuple(index.get(cluster, -1) for cluster in request.nodes)


def _reserve(
    inputs: tuple[Profile, ...], request: Request, start: int | None
) -> tuple[Profile, ...]:
    if start is None:
        return ()
    end = start + request.duration
    return tuple(
        profile.add(-hosts, start, end)
        for profile, hosts in zip(inputs, request.nodes.values(), strict=True)
    )


def _replace(
    state: tuple[Profile, ...], wanted: tuple[int, ...], reserved: tuple[Profile, ...]
) -> tuple[Profile, ...]:
    new = list(state)
    for i, profile in zip(wanted, reserved, strict=True):
        new[i] = profile
    return tuple(new)


def _view_changed(
    old: tuple[Profile, ...], new: tuple[Profile, ...], seen: tuple[int, ...], now: int
) -> bool:
    if old == new:
        return False
    return any(
        old[i] is not new[i] and old[i].truncated(now) != new[i].truncated(now) for i in seen
    )


__all__ = [
    "Application",
    "Counters",
    "Decision",
    "Plan",
    "Policy",
    "PolicyConfig",
]
