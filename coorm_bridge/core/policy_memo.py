"""What a policy pass keeps of the previous one, so as to redo only what changed.

Two levels. Per application, :class:`Memo`: its request's reservation is reused when the profiles
it was searched on are the same (the search is the costly part of a pass). Per position in
priority order, :class:`Previous`: the whole pass state after each placed application. When the
new table starts like the previous one (same applications, same free hosts once started ones are
subtracted, same owners' headroom, no estimated start come due), the pass jumps to the first
application that differs and takes the prefix's outcomes and views as they were: appending a
request to a queue of 10,000 costs one application, and no walk over the others.

Nothing here decides anything: the engine (:mod:`coorm_bridge.core.policy`) computes the same
results with or without it (tested).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter, is_
from typing import TYPE_CHECKING, TypeVar

from coorm_bridge.core.model import MAX_TIME
from coorm_bridge.core.profile import Profile, earliest_common_start
from coorm_bridge.core.states import HOLDING, PLACED

if TYPE_CHECKING:
    from collections.abc import Mapping

    from coorm_bridge.core.model import Request
    from coorm_bridge.core.policy import Application, Decision

State = tuple[Profile, ...]
View = tuple[tuple[int, ...], State]
K = TypeVar("K")
V = TypeVar("V")

#: Stands for "no estimated start" among the starts :attr:`Previous.due` folds.
NEVER = 2**63
_ORDER = attrgetter("order")


@dataclass(slots=True)
class Memo:
    """What the previous pass computed for one application, and the distinct views it was
    handed: the first kept as (state, indices) and hashed only once a second one comes, so
    that a first pass over a long queue hashes nothing."""

    request: Request | None
    wanted: tuple[int, ...]
    inputs: tuple[Profile, ...]
    reserved: tuple[Profile, ...]
    start: int | None
    view: State
    not_before: int
    first: tuple[State, tuple[int, ...]] | None = None
    hashes: set[int] | None = None

    def add_view(self, state: State, seen: tuple[int, ...]) -> bool:
        """Record the view ``state`` restricted to ``seen``; True when it is a new one."""
        if self.hashes is None:
            if self.first is None:
                self.first = (state, seen)
                return True
            self.hashes = {_view_hash(*self.first)}
            self.first = None
        key = _view_hash(state, seen)
        if key in self.hashes:
            return False
        self.hashes.add(key)
        return True


def _view_hash(state: State, seen: tuple[int, ...]) -> int:
    return hash(tuple(state[i] for i in seen))


@dataclass(frozen=True, slots=True)
class Arranged:
    """The application table in priority order, checked, and where its kinds of rows are."""

    table: list[Application]
    ids: set[str]
    holders_at: list[int]
    """Positions of started applications and ghosts."""
    placed_at: list[int]
    """Positions of the applications the pass places."""


@dataclass(frozen=True, slots=True)
class Previous:
    """A pass, as the next one may take it up: per placed application in priority order, the
    state before it (``states[p]``; the last one is the state after all of them)."""

    clusters: tuple[str, ...]
    now: int
    arranged: Arranged
    base_key: tuple[object, ...]
    base: State
    headroom: dict[str, Profile]
    placed: list[Application]
    states: list[State]
    rooms: list[dict[str, Profile]]
    """Owners' headroom before each placed application (shared while unchanged)."""
    due: list[int]
    """Less the earliest estimated start up to each placed application (non-decreasing)."""
    to_start: list[int]
    """Positions of the applications it started."""
    memo: dict[str, Memo]
    views: dict[str, View]
    decisions: dict[str, Decision]
    noted: list[int]
    """Positions of the applications whose view it found changed: a pass that takes them over
    finds it unchanged, and decides again (all else equal)."""


@dataclass(slots=True)
class Tail:
    """What a pass computes from the first application it does not take over, filled in as it
    goes: the rest of the next :class:`Previous`, and the pass's outcomes and notifications."""

    states: list[State]
    rooms: list[dict[str, Profile]]
    due: list[int]
    to_start: list[int]
    memo: dict[str, Memo]
    views: dict[str, View]
    decisions: dict[str, Decision]
    noted: list[int]
    changed: list[str]

    @classmethod
    def taking_over(
        cls,
        previous: Previous | None,
        length: int,
        placed: list[Application],
        unchanged: Callable[[Decision], Decision],
    ) -> Tail:
        """The first ``length`` placed applications as ``previous`` left them, but for the
        views it found changed: ``unchanged`` gives their decision now."""
        if previous is None or not length:
            return cls([], [], [], [], {}, {}, {}, [], [])
        decisions = head(previous.decisions, length)
        for position in islice(previous.noted, bisect_left(previous.noted, length)):
            app_id = placed[position].id
            decisions[app_id] = unchanged(decisions[app_id])
        return cls(
            previous.states[:length],
            previous.rooms[:length],
            previous.due[:length],
            previous.to_start[: bisect_left(previous.to_start, length)],
            head(previous.memo, length),
            head(previous.views, length),
            decisions,
            [],
            [],
        )

    def kept(
        self,
    ) -> tuple[
        list[State],
        list[dict[str, Profile]],
        list[int],
        list[int],
        dict[str, Memo],
        dict[str, View],
        dict[str, Decision],
        list[int],
    ]:
        """The fields :class:`Previous` keeps, in its order."""
        return (
            self.states,
            self.rooms,
            self.due,
            self.to_start,
            self.memo,
            self.views,
            self.decisions,
            self.noted,
        )


def head(mapping: dict[K, V], length: int) -> dict[K, V]:
    """The first ``length`` items of ``mapping``, in its order."""
    if length == len(mapping):
        return mapping.copy()
    return dict(islice(mapping.items(), length))


def common_length(new: Sequence[object], old: Sequence[object]) -> int:
    """How many leading entries of ``new`` are those of ``old`` (the same objects or equal)."""
    size = min(len(new), len(old))
    if new[:size] == old[:size]:
        return size
    for k, (a, b) in enumerate(zip(new, old, strict=False)):
        if a is not b and a != b:
            return k
    return size  # pragma: no cover - the slices differed


def arrange(apps: Iterable[Application], previous: Arranged | None) -> Arranged:
    """The table sorted by subscription order, ids and orders checked unique. What starts like
    the previous table is neither sorted nor checked again: only the rest is looked at."""
    current = list(apps)
    old = previous.table if previous is not None else []
    common = common_length(current, old)
    if _ascending(current, common):
        table = current
    else:
        table = sorted(current, key=_ORDER)
        common = common_length(table, old)
        if not _ascending(table, common):
            raise ValueError("application ids and subscription orders must be unique")
    tail = table[common:]
    if previous is None or not common:
        ids: set[str] = set()
    elif common == len(old):
        ids = previous.ids.copy()
    else:
        ids = previous.ids.difference([app.id for app in old[common:]])
    size = len(ids) + len(tail)
    ids.update([app.id for app in tail])
    if len(ids) != size:
        raise ValueError("application ids and subscription orders must be unique")
    holders_at: list[int] = []
    placed_at: list[int] = []
    if previous is not None and common:
        holders_at = previous.holders_at[: bisect_left(previous.holders_at, common)]
        placed_at = previous.placed_at[: bisect_left(previous.placed_at, common)]
    for position, app in enumerate(tail, common):
        if app.state in PLACED:
            placed_at.append(position)
        elif app.state in HOLDING:
            holders_at.append(position)
    return Arranged(table, ids, holders_at, placed_at)


def _ascending(table: list[Application], start: int) -> bool:
    """Whether subscription orders strictly increase from ``start`` on (the entries before it
    are known to)."""
    low = table[start - 1].order if start else -1
    for app in islice(table, start, None):
        if app.order <= low:
            return False
        low = app.order
    return True


def reusable(
    previous: Previous | None,
    placed: list[Application],
    base: State,
    headroom: dict[str, Profile],
    now: int,
) -> int:
    """How many leading placed applications the pass may take over from ``previous``: all
    that are the same, on the same base and headroom, and whose estimated starts (and all
    before them) are still ahead when time has moved."""
    if previous is None or now < previous.now or headroom != previous.headroom:
        return 0
    if base is not previous.base and not all(map(is_, base, previous.base)):
        return 0
    length = common_length(placed, previous.placed)
    if now > previous.now:
        length = min(length, bisect_left(previous.due, -now))
    return length


def reserve(  # noqa: PLR0917 - the per-application step of the pass's loop
    request: Request,
    entry: Memo,
    old: Memo | None,
    index: Mapping[str, int],
    now: int,
    room: Profile | None,
) -> int:
    """Fill ``entry`` with the request's start and reservation; 1 if searched, 0 if reused.

    ``room``: the owner's headroom under their cap, which the request must fit in too.
    Reused when the request, its earliest allowed start, the profiles of the clusters it
    asks for and the owner's headroom are those of the previous pass, and the start found
    then is not in the past.
    """
    same = (
        old is not None
        and (old.request is request or old.request == request)
        and old.not_before == entry.not_before
    )
    wanted = old.wanted if old is not None and same else _indices(request, index)
    state = entry.view
    inputs = tuple([state[i] for i in wanted]) if -1 not in wanted else ()
    if inputs and room is not None:
        inputs = (*inputs, room)
    entry.wanted = wanted
    fresh = old is not None and (old.start is None or old.start >= now)  # not in the past
    if old is not None and same and fresh and old.inputs == inputs:
        entry.inputs, entry.reserved, entry.start = old.inputs, old.reserved, old.start
        return 0
    hosts = tuple(request.nodes.values())
    demands = zip(inputs, (*hosts, request.hosts) if room is not None else hosts, strict=True)
    after = max(now, entry.not_before)
    duration = request.duration
    start = earliest_common_start(demands, duration, after) if inputs else None
    if start is not None and start > MAX_TIME - duration:
        # Behind a queue of long requests a start can pass year 9999: no time the bridge
        # could state, store or give a batch system. Such a request never fits.
        start = None
    entry.inputs, entry.start = inputs, start
    if start is None:
        entry.reserved = ()
    else:
        end = start + duration
        entry.reserved = tuple(
            [profile.add(-count, start, end) for profile, count in zip(inputs, hosts, strict=False)]
        )
    return 1


def _indices(request: Request, index: Mapping[str, int]) -> tuple[int, ...]:
    """Cluster positions of a request; -1 for a cluster the platform no longer has."""
    return tuple([index.get(cluster, -1) for cluster in request.nodes])
