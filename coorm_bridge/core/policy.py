"""The CooRM policy (paper §III-C, slides "RMS scheduling algorithm"): FCFS by subscription order
with conservative backfilling, ghosts that hold a finished application's hosts for ``fair_start``.

The engine is a deterministic function of (free hosts per cluster, application table, now): the
caller persists states and talks to launchers and batch systems. It keeps a memo of the previous
pass only to go faster (:mod:`coorm_bridge.core.policy_memo`): a pass takes over the leading
applications that are as they were, and of the others recomputes only those whose request, or the
profiles of the clusters it asks for, differ from last time; so a new request at the end of a long
queue costs one application, not the whole queue. Results never depend on the memo (tested).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Self

from pydantic import Field, model_validator

from coorm_bridge.core.model import Frozen, Name, Request, Time, UserName
from coorm_bridge.core.policy_memo import (
    NEVER,
    Memo,
    Previous,
    State,
    Tail,
    arrange,
    reserve,
    reusable,
)
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import HOLDING, AppState, check, transition

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


_SET_STATE, _SET_START, _SET_HOLD, _SET_CHANGED = (
    Decision.__dict__[name].__set__
    for name in ("state", "estimated_start", "hold_until", "view_changed")
)


def _decision(state: AppState, start: int | None, view_changed: bool) -> Decision:
    """``Decision(state, start, view_changed=view_changed)`` at half the cost (a frozen
    dataclass sets each field through ``object.__setattr__``): one per placed application."""
    decision = object.__new__(Decision)
    _SET_STATE(decision, state)
    _SET_START(decision, start)
    _SET_HOLD(decision, None)
    _SET_CHANGED(decision, view_changed)
    return decision


def _unchanged(decision: Decision) -> Decision:
    """The decision of a pass that takes an application over and finds its view unchanged."""
    return _decision(decision.state, decision.estimated_start, False)


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
    _views: dict[str, tuple[tuple[int, ...], State]] = field(repr=False)

    def view(self, app_id: str) -> dict[str, Profile]:
        """The view of a placed application: free hosts left to it, per cluster it sees."""
        indices, state = self._views[app_id]
        return {self._clusters[i]: state[i] for i in indices}


class Policy:
    """Plans passes (the service carries them out); see the module docstring. One per bridge."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self.counters = Counters()
        self._previous: Previous | None = None

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
        previous = self._previous
        if previous is not None and previous.clusters != clusters:
            previous = None
        arranged = arrange(apps, None if previous is None else previous.arranged)
        table = arranged.table
        outcomes, holding, expired = self._settle_holders(
            [table[p] for p in arranged.holders_at], now
        )
        index = {name: i for i, name in enumerate(clusters)}
        base_key = (now, *holding, *[free[name] for name in clusters])
        if previous is not None and previous.base_key == base_key:
            base = previous.base
        else:
            old = () if previous is None else previous.base
            base = self._make_base(free, clusters, holding, index, now, old)
        headroom = _headroom(held_caps or {}, holding, self.config.fair_start, now)
        placed = [table[p] for p in arranged.placed_at]
        first = reusable(previous, placed, base, headroom, now)
        tail = Tail.taking_over(previous, first, placed, _unchanged)
        if previous is None or not first:
            state, room, memo = base, headroom, {} if previous is None else previous.memo
        else:
            state, room, memo = previous.states[first], previous.rooms[first], previous.memo
        state, room, recomputed = self._place(placed, first, tail, memo, index, state, room, now)
        tail.states.append(state)
        tail.rooms.append(room)
        self._previous = Previous(
            clusters, now, arranged, base_key, base, headroom, placed, *tail.kept()
        )
        outcomes.update(tail.decisions)
        self.counters.passes += 1
        self.counters.notifications += len(tail.changed)
        self.counters.recomputed += recomputed
        return Plan(
            now=now,
            outcomes=outcomes,
            to_start=tuple(placed[p].id for p in tail.to_start),
            changed=tuple(tail.changed),
            expired=tuple(expired),
            free=dict(zip(clusters, base, strict=True)),
            recomputed=recomputed,
            left=dict(zip(clusters, state, strict=True)),
            _clusters=clusters,
            _views=tail.views,
        )

    def _place(  # noqa: PLR0917 - the pass's state, handed over once
        self,
        placed: list[Application],
        first: int,
        tail: Tail,
        memo: dict[str, Memo],
        index: Mapping[str, int],
        state: State,
        room: dict[str, Profile],
        now: int,
    ) -> tuple[State, dict[str, Profile], int]:
        """Steps 3-4 of the slides from the ``first`` placed application on: in priority order,
        each gets its view, and its request the earliest start where it fits, reserved there.
        Returns the state and the owners' headroom after the last, and the searches run.

        The one loop over the whole queue in a full pass: locals and plain appends, not calls.
        """
        recomputed = configurations = 0
        seen_of: dict[tuple[str, ...], tuple[int, ...]] = {}
        decisions, views, entries = tail.decisions, tail.views, tail.memo
        add_state, add_room, add_due = tail.states.append, tail.rooms.append, tail.due.append
        soonest = -tail.due[-1] if tail.due else NEVER
        for position in range(first, len(placed)):
            app = placed[position]
            app_id, clusters, request, owner = app.id, app.clusters, app.request, app.owner
            seen = seen_of.get(clusters)
            if seen is None:
                seen = seen_of[clusters] = tuple([index[c] for c in clusters if c in index])
            view = state
            views[app_id] = (seen, view)
            add_state(view)
            add_room(room)
            old = memo.get(app_id)
            entry = Memo(request, (), (), (), None, view, app.not_before or 0)
            if old is not None:
                entry.first, entry.hashes = old.first, old.hashes
            start = None
            if request is not None:
                own = None if owner is None else room.get(owner)
                recomputed += reserve(request, entry, old, index, now, own)
                start = entry.start
                if start is not None:
                    state = _replace(state, entry.wanted, entry.reserved)
                    if owner is not None and own is not None:
                        room = _take(room, owner, request, start)
                    soonest = min(soonest, start)
            add_due(-soonest)
            new_state: AppState = app.state
            if new_state is AppState.REQUEST_SENT:
                new_state = transition(new_state, AppState.WAITING)
            if start is not None and start <= now:
                new_state = transition(new_state, AppState.STARTED)
                tail.to_start.append(position)
            view_changed = old is None or _view_changed(old.view, view, seen, now)
            if view_changed:
                tail.noted.append(position)
                if new_state is not AppState.STARTED:
                    tail.changed.append(app_id)
                    configurations += entry.add_view(view, seen)
            decisions[app_id] = _decision(new_state, start, view_changed)
            entries[app_id] = entry
        self.counters.computed_configurations += configurations
        return state, room, recomputed

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

    def _make_base(  # noqa: PLR0917
        self,
        free: Mapping[str, Profile],
        clusters: tuple[str, ...],
        holding: list[Application],
        index: Mapping[str, int],
        now: int,
        previous: State,
    ) -> State:
        """Free hosts minus held ones; a cluster that agrees from ``now`` on keeps its old object
        (``previous``), so that time passing a breakpoint neither recomputes nor notifies
        anyone."""
        base = [free[name] for name in clusters]
        for app in holding:
            assert app.request is not None
            assert app.started_at is not None
            end = app.hold_end(self.config.fair_start)
            for cluster, hosts in app.request.nodes.items():
                if cluster in index:
                    i = index[cluster]
                    base[i] = base[i].add(-hosts, app.started_at, end)
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


def _take(
    headroom: dict[str, Profile], owner: str, request: Request, start: int
) -> dict[str, Profile]:
    """A placed request of a capped owner takes its hosts from the owner's headroom: in a new
    dict, since the record of the pass (:class:`Previous`) shares the old one."""
    end = start + request.duration
    return {**headroom, owner: headroom[owner].add(-request.hosts, start, end)}


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
