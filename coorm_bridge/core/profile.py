"""Profile: hosts over time as an immutable step function (the paper's CAP).

One type serves occupancy (busy hosts) and availability (free hosts). A profile is a value ``v0``
that holds from the distant past up to the first breakpoint, then ``v_i`` on ``[t_i, t_{i+1})``,
the last value lasting forever. The form is canonical (no breakpoint repeats the value before it),
so equal step functions compare and hash equal whatever operations built them; the policy relies
on that to tell which views changed and to memoize.

Profiles are immutable: every operation returns a new profile and leaves unchanged ones shared.
A view over 64 clusters is therefore 64 references, and reserving on two clusters copies two
arrays, which is what lets a policy pass over 10,000 applications stay well under a second.
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

#: Internal stand-in for "forever" (far beyond any Unix time, far below int64 overflow).
FOREVER = 2**62

_EMPTY: IntArray = np.zeros(0, dtype=np.int64)
_EMPTY.flags.writeable = False
#: Up to this many values moved by :meth:`Profile.add` are moved one by one, more by numpy.
_SHORT = 16


class OverAllocation(ValueError):
    """A reservation would take more hosts than the profile has free."""


def _whole(numbers: Sequence[int], what: str) -> IntArray:
    array = np.array(numbers)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind not in "iu":
        raise TypeError(f"profile {what} must be whole numbers, got {array.dtype}")
    return array.astype(np.int64)


def _owned(array: IntArray) -> IntArray:
    """Freeze an array the profile owns (views of frozen arrays are frozen already)."""
    if not array.size:
        return _EMPTY
    if array.flags.writeable:
        array.flags.writeable = False
    return array


class Profile:
    """A step function of whole hosts over whole seconds; see the module docstring."""

    __slots__ = ("_hash", "_steps", "_t", "_ta", "_v", "_v0", "_va")

    def __init__(
        self, initial: int = 0, times: Sequence[int] = (), values: Sequence[int] = ()
    ) -> None:
        """Build from breakpoints; ``values[i]`` holds from ``times[i]`` (strictly increasing).

        Whole numbers only: a fractional second or host would otherwise be silently truncated.
        """
        t = _whole(times, "breakpoint times")
        v = _whole(values, "values")
        if t.shape != v.shape or t.ndim != 1:
            raise ValueError("a profile needs as many values as breakpoints")
        if t.size > 1 and not bool(np.all(np.diff(t) > 0)):
            raise ValueError("profile breakpoints must strictly increase")
        self._init(operator.index(initial), t, v)

    def _init(self, v0: int, t: IntArray, v: IntArray, canonical: bool = False) -> None:
        """Take ownership of ``t`` and ``v`` (fresh arrays, or views of frozen ones)."""
        if v.size and not canonical:
            keep = v != np.concatenate(([v0], v[:-1]))
            if not bool(keep.all()):
                t, v = t[keep], v[keep]
        self._v0 = v0
        self._t = _owned(t)
        self._v = _owned(v)
        self._hash: int | None = None
        self._steps: tuple[int, tuple[tuple[int, int], ...]] | None = None
        self._ta: array[int] | None = None
        self._va: array[int] | None = None

    @classmethod
    def _raw(cls, v0: int, t: IntArray, v: IntArray, canonical: bool = False) -> Profile:
        profile = cls.__new__(cls)
        profile._init(v0, t, v, canonical)
        return profile

    @classmethod
    def _of_arrays(cls, v0: int, t: array[int], v: array[int]) -> Profile:
        """A canonical profile over ``t`` and ``v``, which it keeps: never changed afterwards
        (the numpy arrays are read-only views of them)."""
        profile = cls.__new__(cls)
        profile._v0, profile._ta, profile._va, profile._hash = v0, t, v, None
        profile._steps = None
        if t:
            profile._t = np.frombuffer(memoryview(t).toreadonly(), np.int64)
            profile._v = np.frombuffer(memoryview(v).toreadonly(), np.int64)
        else:
            profile._t = profile._v = _EMPTY
        return profile

    def _arrays(self) -> tuple[array[int], array[int]]:
        """The breakpoints as arrays of the standard library, whose copies, inserts and reads
        cost a fraction of numpy's for the few hundred steps of a profile."""
        t, v = self._ta, self._va
        if t is None or v is None:
            t = self._ta = array("q", self._t.tobytes())
            v = self._va = array("q", self._v.tobytes())
        return t, v

    # -- construction and JSON form ---------------------------------------------------------

    @classmethod
    def constant(cls, hosts: int) -> Profile:
        return cls._raw(int(hosts), _EMPTY, _EMPTY)

    @classmethod
    def from_steps(cls, steps: Sequence[tuple[int, int]] | Sequence[Sequence[int]]) -> Profile:
        """From the JSON form ``[[t0, n0], [t1, n1], ...]``; ``n0`` also stands before ``t0``."""
        if not steps:
            raise ValueError("a profile has at least one step")
        if len(steps) > 1 and steps[0][0] >= steps[1][0]:
            raise ValueError("profile step times must strictly increase")
        times = [step[0] for step in steps[1:]]
        values = [step[1] for step in steps[1:]]
        return cls(operator.index(steps[0][1]), times, values)

    @classmethod
    def from_intervals(
        cls,
        capacity: int,
        intervals: Iterable[tuple[int, int | None, int]],
    ) -> Profile:
        """``capacity`` minus each ``(start, end, hosts)`` (``end=None``: forever), in one sweep.

        Unchecked, like :meth:`add`: building a cluster's profile from 10,000 jobs is one sort
        instead of 10,000 copies.
        """
        rows = [(s, e, h) for s, e, h in intervals if h and (e is None or e > s)]
        if not rows:
            return cls.constant(capacity)
        starts = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        hosts = np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows))
        bounded = [(r[1], r[2]) for r in rows if r[1] is not None]
        ends = np.fromiter((b[0] for b in bounded), dtype=np.int64, count=len(bounded))
        freed = np.fromiter((b[1] for b in bounded), dtype=np.int64, count=len(bounded))
        times, where = np.unique(np.concatenate((starts, ends)), return_inverse=True)
        deltas = np.bincount(where, weights=np.concatenate((-hosts, freed)), minlength=times.size)
        values = capacity + np.cumsum(deltas.astype(np.int64))
        return cls._raw(int(capacity), times, values)

    def steps(self, origin: int) -> list[tuple[int, int]]:
        """The JSON form seen from ``origin``: ``[[origin, value there], later breakpoints...]``.

        The last one asked is kept: a view's profiles are read from the same ``now`` by the
        memo's key, the selector and the change events, once per application behind."""
        last = self._steps
        if last is not None and last[0] == origin:
            return list(last[1])
        k = int(np.searchsorted(self._t, origin, side="right"))
        head = [(int(origin), self.value_at(origin))]
        found = head + list(zip(self._t[k:].tolist(), self._v[k:].tolist(), strict=True))
        self._steps = (origin, tuple(found))
        return found

    # -- reading ----------------------------------------------------------------------------

    @property
    def initial(self) -> int:
        return self._v0

    @property
    def final(self) -> int:
        """The value that lasts forever after the last breakpoint."""
        return int(self._v[-1]) if self._v.size else self._v0

    @property
    def breakpoints(self) -> list[int]:
        return [int(t) for t in self._t]

    def __len__(self) -> int:
        return int(self._t.size)

    def value_at(self, time: int) -> int:
        k = int(np.searchsorted(self._t, time, side="right"))
        return int(self._v[k - 1]) if k else self._v0

    def values_at(self, times: IntArray) -> IntArray:
        full = np.concatenate(([self._v0], self._v)).astype(np.int64)
        return full[np.searchsorted(self._t, times, side="right")]

    def min_over(self, start: int, end: int | None) -> int:
        """The fewest hosts over ``[start, end)`` (``end=None``: forever)."""
        if end is not None and end <= start:
            raise ValueError(f"empty interval [{start}, {end})")
        i = int(np.searchsorted(self._t, start, side="right"))
        j = self._t.size if end is None else int(np.searchsorted(self._t, end, side="left"))
        low = self.value_at(start)
        return min(low, int(self._v[i:j].min())) if j > i else low

    def max_value(self) -> int:
        return max(self._v0, int(self._v.max())) if self._v.size else self._v0

    def min_value(self) -> int:
        return min(self._v0, int(self._v.min())) if self._v.size else self._v0

    # -- changing (each returns a new profile) ------------------------------------------------

    def add(self, delta: int, start: int, end: int | None = None) -> Profile:
        """Add ``delta`` hosts over ``[start, end)``, unchecked (``end=None``: forever)."""
        if delta == 0 or (end is not None and end <= start):
            return self
        t, v = self._arrays()
        v0, n = self._v0, len(t)
        i = bisect_left(t, start)
        j = n if end is None else bisect_left(t, end, i)
        has_start = i < n and t[i] == start
        has_end = end is None or (j < n and t[j] == end)
        before = v[i - 1] if i else v0
        last = v[j - 1] if j else v0  # the value just before ``end``
        # Values inside [start, end) all move by delta, so only the two edges can repeat a value.
        drop_start = has_start and v[i] + delta == before
        drop_end = end is not None and has_end and v[j] == last + delta
        new_t = t if has_start and has_end and not (drop_start or drop_end) else t[:]
        new_v = v[:]
        if j - i > _SHORT:
            moved = np.frombuffer(new_v, np.int64)
            moved[i:j] += delta
            del moved  # releases the buffer: the array may grow again
        else:
            for k in range(i, j):
                new_v[k] += delta
        if end is not None and not has_end:
            new_t.insert(j, end)
            new_v.insert(j, last)
        elif drop_end:
            del new_t[j], new_v[j]
        if not has_start:
            new_t.insert(i, start)
            new_v.insert(i, before + delta)
        elif drop_start:
            del new_t[i], new_v[i]
        return Profile._of_arrays(v0, new_t, new_v)

    def reserve(self, hosts: int, start: int, end: int | None = None) -> Profile:
        """Take ``hosts`` free hosts over ``[start, end)``; refuses to go below zero."""
        if hosts < 0:
            raise ValueError(f"cannot reserve a negative host count ({hosts})")
        if hosts and (end is None or end > start):
            free = self.min_over(start, end)
            if free < hosts:
                raise OverAllocation(
                    f"{hosts} hosts asked over [{start}, {end}) but only {free} are free"
                )
        return self.add(-hosts, start, end)

    def release(self, hosts: int, start: int, end: int | None = None) -> Profile:
        """Give back ``hosts`` hosts over ``[start, end)``."""
        if hosts < 0:
            raise ValueError(f"cannot release a negative host count ({hosts})")
        return self.add(hosts, start, end)

    def clamped(self, low: int = 0, high: int | None = None) -> Profile:
        """Bounded pointwise, for occupancy read from batch systems that over-commit."""
        hi = FOREVER if high is None else high
        return Profile._raw(min(max(self._v0, low), hi), self._t, np.clip(self._v, low, hi))

    def truncated(self, start: int | None = None, end: int | None = None) -> Profile:
        """Forget what happens before ``start`` and after ``end``.

        The value at ``start`` then also stands before it, and the value at ``end`` lasts forever:
        ``p.truncated(now) == q.truncated(now)`` says two profiles agree from ``now`` on.
        """
        if start is not None and end is not None and end < start:
            raise ValueError(f"cannot truncate to [{start}, {end}]: it ends before it starts")
        t, v, v0 = self._t, self._v, self._v0
        lo = 0 if start is None else int(np.searchsorted(t, start, side="right"))
        hi = t.size if end is None else int(np.searchsorted(t, end, side="right"))
        if lo == 0 and hi == t.size:
            return self
        if lo:
            v0 = int(v[lo - 1])
        return Profile._raw(v0, t[lo : max(lo, hi)], v[lo : max(lo, hi)], canonical=True)

    def __add__(self, other: Profile) -> Profile:
        return self._combine(other, 1)

    def __sub__(self, other: Profile) -> Profile:
        return self._combine(other, -1)

    def complement(self, capacity: int) -> Profile:
        """``capacity - self``: turns an occupancy into an availability and back."""
        return Profile._raw(capacity - self._v0, self._t, capacity - self._v, canonical=True)

    def _combine(self, other: Profile, sign: int) -> Profile:
        times = np.union1d(self._t, other._t)
        values = self.values_at(times) + sign * other.values_at(times)
        return Profile._raw(self._v0 + sign * other._v0, times, values)

    # -- searching ----------------------------------------------------------------------------

    def fitting_starts(self, hosts: int, duration: int, after: int) -> tuple[IntArray, IntArray]:
        """All starts ``s >= after`` with ``hosts`` free on ``[s, s + duration)``.

        Returned as closed intervals ``[lows[k], highs[k]]``, increasing and disjoint; a high of
        ``FOREVER`` or more means "any later start too".
        """
        t, v = self._t, self._v
        k = int(t.searchsorted(after, side="right"))
        m = t.size - k
        ok = np.empty(m + 1, dtype=bool)
        ok[0] = (int(v[k - 1]) if k else self._v0) >= hosts
        np.greater_equal(v[k:], hosts, out=ok[1:])
        firsts = ok.copy()
        firsts[1:] &= ~ok[:-1]
        lasts = ok
        lasts[:-1] &= ~ok[1:]
        edges = np.empty(m + 2, dtype=np.int64)
        edges[0], edges[1 : m + 1], edges[m + 1] = after, t[k:], FOREVER + duration
        lows = edges[firsts.nonzero()[0]]
        highs = edges[lasts.nonzero()[0] + 1] - duration
        long_enough = highs >= lows
        return lows[long_enough], highs[long_enough]

    def _runs(self, hosts: int, after: int) -> list[int]:
        """The runs of steps with ``hosts`` free from ``after`` on, as their bounds: ``[start,
        end, start, end, ...]``, an odd count when the last run lasts forever. Few numpy calls
        (a policy pass runs one per cluster per request): only the times where the answer
        flips leave numpy."""
        t, v, times = self._t, self._v, self._ta
        k = (
            int(t.searchsorted(after, side="right"))
            if times is None
            else bisect_right(times, after)
        )
        ok = v[k - 1 :] >= hosts if k else np.concatenate(((self._v0 >= hosts,), v >= hosts))
        flips: list[int] = t[k:][(ok[1:] != ok[:-1]).nonzero()[0]].tolist()
        return [after, *flips] if ok[0] else flips

    def earliest_fit(self, hosts: int, duration: int, after: int) -> int | None:
        """The first start at or after ``after`` that fits ``hosts`` for ``duration`` (or None)."""
        lows, _ = self.fitting_starts(hosts, duration, after)
        return int(lows[0]) if lows.size else None

    # -- identity -----------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Profile):
            return NotImplemented
        return (
            self._v0 == other._v0
            and self._t.size == other._t.size
            and hash(self) == hash(other)
            and bool(np.array_equal(self._t, other._t))
            and bool(np.array_equal(self._v, other._v))
        )

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self._v0, self._t.tobytes(), self._v.tobytes()))
        return self._hash

    def __repr__(self) -> str:
        steps = zip(self._t.tolist(), self._v.tolist(), strict=True)
        pairs = ", ".join(f"{t}: {v}" for t, v in steps)
        return f"Profile({self._v0}{', ' if pairs else ''}{pairs})"


def earliest_start(
    profiles: Mapping[str, Profile], nodes: Mapping[str, int], duration: int, after: int
) -> int | None:
    """The first ``s >= after`` where every cluster of ``nodes`` fits for ``duration`` at once.

    None when the request never fits (more hosts than a cluster ever has, or an unknown cluster).
    """
    if any(cluster not in profiles for cluster in nodes):
        return None
    return earliest_common_start(
        ((profiles[cluster], hosts) for cluster, hosts in nodes.items()), duration, after
    )


def earliest_common_start(
    demands: Iterable[tuple[Profile, int]], duration: int, after: int
) -> int | None:
    """:func:`earliest_start` over ``(profile, hosts)`` pairs."""
    runs = [(profile._runs(hosts, after), duration) for profile, hosts in demands]
    if not runs:
        raise ValueError("a request names at least one cluster")
    return _joint_fit(runs, after)


def earliest_joint_start(demands: Iterable[tuple[Profile, int, int]], after: int) -> int | None:
    """The first ``s >= after`` where each ``(profile, hosts, duration)`` fits from ``s`` on
    (co-allocated v2 requests may last differently).

    Leapfrogs: each profile's first fit from the candidate becomes the new candidate until all
    agree. The candidate only moves forward, so the cost is linear in the runs looked at.
    """
    runs = [(profile._runs(hosts, after), duration) for profile, hosts, duration in demands]
    if not runs:
        raise ValueError("a request names at least one cluster")
    return _joint_fit(runs, after)


def _joint_fit(runs: Sequence[tuple[list[int], int]], after: int) -> int | None:
    """:func:`earliest_joint_start` over each profile's :meth:`Profile._runs`."""
    if len(runs) == 1:
        return _fit_from(runs[0][0], after, runs[0][1])
    start = after
    while True:
        moved = False
        for bounds, duration in runs:
            fit = _fit_from(bounds, start, duration)
            if fit is None:
                return None
            if fit != start:
                start, moved = fit, True
        if not moved:
            return start


def _fit_from(bounds: list[int], start: int, duration: int) -> int | None:
    """The first ``s >= start`` in a run of ``bounds`` (:meth:`Profile._runs`) lasting
    ``duration`` from ``s`` on."""
    x = bisect_right(bounds, start)
    size = len(bounds)
    if not x % 2:  # between runs: the next one
        if x == size:
            return None
        start = bounds[x]
        x += 1
    while x < size:  # ``start`` lies in the run that ends at bounds[x]
        if bounds[x] - start >= duration:
            return start
        if x + 1 == size:
            return None
        start = bounds[x + 1]
        x += 2
    return start  # in the last run, which lasts forever
