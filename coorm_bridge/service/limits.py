"""``[limits]`` applied: what one user may ask for, hold at once and hold ahead.

Each key is looked for in the user's own table, then in the tables of the user's Unix groups
(the most generous of those that set it), then in ``[limits]`` (where the defaults are). The
bridge checks a request against the caps and the owner's current use in the store before
accepting it (:meth:`UserLimits.check_request`); the pass runner gives the policy each owner's
``held_hosts`` cap (:meth:`UserLimits.held_caps`), so that no session is started past it, even
one accepted while its owner's others were still waiting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from coorm_bridge.core.model import Request
from coorm_bridge.core.states import HOLDING, PLACED
from coorm_bridge.service.config import Limits, LimitSettings
from coorm_bridge.service.errors import OverLimit
from coorm_bridge.service.groups import Groups
from coorm_bridge.store import SessionRow, Store


@dataclass(frozen=True, slots=True)
class Cap:
    """One limit as it applies to a user, and where it is set (for messages)."""

    value: int
    table: str
    """``limits``, ``limits.group.NAME`` or ``limits.user.NAME``."""
    key: str
    note: str = ""
    """How the value was worked out, when it is not the key's own value."""

    @property
    def name(self) -> str:
        return f"{self.table}.{self.key}"


@dataclass(frozen=True, slots=True)
class Effective:
    """A user's limits, each with where it is set (None: no limit)."""

    sessions: Cap | None
    hosts: Cap | None
    duration: Cap | None
    held: Cap | None
    """``held_hosts``, or ``held_share`` of the platform where no ``held_hosts`` applies."""
    reserved: Cap | None
    waiting: Cap | None


@dataclass(frozen=True, slots=True)
class Use:
    """What a user has now, besides the request being checked."""

    held: int
    """Hosts of their started sessions and ghosts."""
    reserved: int
    """Host-seconds still ahead in their sessions with a request."""
    waiting: int
    """Sessions with a request not started yet."""


def _own(limits: Limits, key: str, total: int) -> tuple[int, str, str] | None:
    """A table's value of ``key`` (``held``: held_hosts, else held_share of ``total``)."""
    if key != "held":
        value = getattr(limits, key)
        return None if value is None else (value, key, "")
    if limits.held_hosts is not None:
        return limits.held_hosts, "held_hosts", ""
    if limits.held_share is not None and total > 0:
        hosts = max(1, math.floor(limits.held_share * total))
        return hosts, "held_share", f" ({limits.held_share:g} of the platform's {total})"
    return None


def _cap(
    settings: LimitSettings, user: str, groups: Iterable[str], key: str, total: int
) -> Cap | None:
    own = settings.user.get(user)
    found = None if own is None else _own(own, key, total)
    if found is not None:
        return Cap(found[0], f"limits.user.{user}", found[1], found[2])
    best: Cap | None = None
    for group in groups:
        table = settings.group.get(group)
        found = None if table is None else _own(table, key, total)
        if found is not None and (best is None or found[0] > best.value):
            best = Cap(found[0], f"limits.group.{group}", found[1], found[2])
    if best is not None:
        return best
    found = _own(settings, key, total)
    return None if found is None else Cap(found[0], "limits", found[1], found[2])


def resolve(settings: LimitSettings, user: str, groups: Iterable[str], total: int) -> Effective:
    """``user``'s limits, in groups ``groups``, on a platform of ``total`` hosts.

    Without a ``reserved`` anywhere, a user may have ahead what one request as large and as
    long as allowed would take (``held`` x ``duration``): what others wait behind one user
    stays bounded."""
    groups = tuple(groups)
    caps = {
        key: _cap(settings, user, groups, key, total)
        for key in ("sessions", "hosts", "duration", "held", "reserved", "waiting")
    }
    held, duration = caps["held"], caps["duration"]
    if caps["reserved"] is None and held is not None and duration is not None:
        note = f" (by default {held.name} x {duration.name})"
        caps["reserved"] = Cap(held.value * duration.value, "limits", "reserved", note)
    return Effective(**caps)


def hold_end(row: SessionRow, fair_start: int) -> int:
    """Until when a holding session's hosts are held: its allocation, or its ghost."""
    assert row.request is not None
    assert row.started_at is not None
    end = row.started_at + row.request.duration
    return end if row.done_at is None else min(row.done_at + fair_start, end)


class UserLimits:
    """The site's limits for each user: ``settings`` gives the ``[limits]`` in force (a reload
    changes them, so they are read at each call), sessions from ``store``, Unix groups from
    ``groups`` (read only when a group table exists), and the platform's ``total`` hosts (the
    catalogue's) for ``held_share``."""

    def __init__(
        self,
        *,
        settings: Callable[[], LimitSettings],
        store: Store,
        groups: Groups,
        total: Callable[[], int],
        fair_start: int,
    ) -> None:
        self._settings = settings
        self.store = store
        self.groups = groups
        self.total = total
        self.fair_start = fair_start

    @property
    def settings(self) -> LimitSettings:
        return self._settings()

    def of(self, user: str) -> Effective:
        settings = self.settings
        groups = self.groups.of(user) if settings.group else ()
        return resolve(settings, user, groups, self.total())

    def warm(self, user: str) -> None:
        """Read ``user``'s groups now, if any table needs them: then not under the lock."""
        if self.settings.group:
            self.groups.of(user)

    def held_caps(self, owners: Iterable[str]) -> dict[str, int]:
        """The ``held_hosts`` cap of each owner that has one: the policy starts no session
        past it."""
        caps = {}
        for owner in set(owners):
            held = self.of(owner).held
            if held is not None:
                caps[owner] = held.value
        return caps

    def use(self, user: str, now: int, besides: str | None = None) -> Use:
        """What ``user``'s sessions other than ``besides`` hold now and ahead."""
        held = reserved = waiting = 0
        # From the store's memory: one user with 10,000 sessions made each of their requests
        # read and parse every row under the bridge's lock, 2 s that the next pass waited.
        for row in self.store.active_sessions():
            if row.owner != user or row.id == besides or row.request is None:
                continue
            if row.typed is not None and (row.typed.inside or row.typed.type == "preemptible"):
                # API v2: on a pre-allocation's hosts, or on hosts nobody holds: a waiting one
                # still counts as waiting (a pass looks at it).
                waiting += row.state in PLACED
                continue
            hosts = row.request.hosts
            if row.state in HOLDING:
                left = hold_end(row, self.fair_start) - now
                if left > 0:
                    held += hosts
                    reserved += hosts * left
            elif row.state in PLACED:
                waiting += 1
                reserved += hosts * row.request.duration
        return Use(held, reserved, waiting)

    def check_subscribe(self, user: str) -> None:
        """Raise OverLimit when ``user`` may not open one more session."""
        cap = self.of(user).sessions
        if cap is not None:
            rows = self.store.active_sessions()
            active = sum(1 for row in rows if row.owner == user and row.parent is None)
            if active >= cap.value:
                raise OverLimit(
                    f"{user} has {active} sessions not ended, the most {cap.name} allows "
                    f"({cap.value}): end or withdraw one first"
                )

    def check_request(
        self, row: SessionRow, request: Request, now: int, *, holds: bool = True
    ) -> None:
        """Raise OverLimit when ``request``, in place of ``row``'s, asks for more than its
        owner may: the message names the cap, where it is set, and the owner's use.
        ``holds=False``: preemptible work (API v2), bound by the per-request caps only."""
        user, caps = row.owner, self.of(row.owner)
        hosts = request.hosts
        if caps.hosts is not None and hosts > caps.hosts.value:
            raise OverLimit(
                f"the request asks for {hosts} hosts; {caps.hosts.name} allows {caps.hosts.value}"
            )
        if caps.duration is not None and request.duration > caps.duration.value:
            raise OverLimit(
                f"the request lasts {request.duration} s; {caps.duration.name} allows "
                f"{caps.duration.value} s"
            )
        use = self.use(user, now, besides=row.id)
        if not holds:  # held nor reserved: its waiting counts
            use, hosts = Use(0, 0, use.waiting), 0
        over = _over(caps, use, user, hosts, hosts * request.duration)
        if over is not None:
            raise OverLimit(over)


def _over(caps: Effective, use: Use, user: str, hosts: int, host_seconds: int) -> str | None:
    """What the request would go past, in words (None: nothing)."""
    held, reserved, waiting = caps.held, caps.reserved, caps.waiting
    if held is not None and hosts > held.value:
        # More than the cap can never start. Within it, the request waits while the owner's
        # other sessions hold too much (the policy plans it after them), as a batch system
        # keeps a job pending past a per-user limit rather than refusing it.
        return (
            f"{held.name} allows {held.value} hosts held at once{held.note}; the request asks "
            f"for {hosts} ({user} holds {use.held} now), so it could never start"
        )
    if reserved is not None and use.reserved + host_seconds > reserved.value:
        return (
            f"{reserved.name} allows {reserved.value} host-seconds ahead{reserved.note}; "
            f"{user} has {use.reserved} (hosts x time left, over their sessions) and asks "
            f"for {host_seconds} more"
        )
    if waiting is not None and use.waiting + 1 > waiting.value:
        return (
            f"{waiting.name} allows {waiting.value} sessions waiting at once; "
            f"{user} has {use.waiting} waiting"
        )
    return None
