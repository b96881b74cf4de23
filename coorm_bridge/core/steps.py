"""Free hosts over time from ``now`` on, as plain lists: for searches that ask thousands of times.

:class:`~coorm_bridge.core.profile.Profile` answers one query in microseconds through numpy, an
overhead paid on every call; a selector's search asks "when do 37 hosts fit for 2 h on c3" for
each of its candidates, and the batch adapter plans thousands of pending jobs one after the
other. A CAP has tens to hundreds of steps: walking them in Python is faster, and they are read
once. One set of rules, the same as a Profile's from ``now`` on: ``values[k]`` free hosts on
``[times[k], times[k + 1])``, the last value forever after; fewer than none (over-commitment)
counts as none; neighbouring steps of equal value are merged; a start never lies before
``now`` (the first time), a request cannot start earlier.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coorm_bridge.core.profile import Profile


class Steps:
    """A step function of free hosts from ``times[0]`` on; :meth:`take` plans in place."""

    __slots__ = ("times", "values")

    def __init__(self, times: list[int], values: list[int]) -> None:
        if not times or len(times) != len(values):
            raise ValueError("a step function needs as many values as times, at least one")
        if any(b <= a for a, b in pairwise(times)):
            raise ValueError("a step function's times must increase")
        self.times = times
        self.values = [max(0, v) for v in values]
        self._merge_all()

    @classmethod
    def of(cls, profile: Profile, now: int) -> Steps:
        """``profile`` from ``now`` on."""
        steps = profile.steps(now)
        return cls([t for t, _ in steps], [v for _, v in steps])

    @property
    def now(self) -> int:
        return self.times[0]

    def value_at(self, time: int) -> int:
        """Free hosts at ``time`` (before ``now``: as at ``now``)."""
        return self.values[max(0, bisect_right(self.times, time) - 1)]

    def min_over(self, start: int, end: int) -> int:
        """The fewest free hosts over ``[start, end)`` (``end > start``)."""
        if end <= start:
            raise ValueError(f"empty interval [{start}, {end})")
        k = max(0, bisect_right(self.times, start) - 1)
        j = max(k + 1, bisect_left(self.times, end))
        return min(self.values[k:j])

    def earliest_fit(self, hosts: int, duration: int, after: int | None = None) -> int | None:
        """The first start at or after ``after`` (and ``now``) with ``hosts`` free for
        ``duration``; None when that never happens."""
        times, values = self.times, self.values
        start = times[0] if after is None else max(after, times[0])
        k = bisect_right(times, start) - 1
        last = len(times) - 1
        while True:
            while values[k] < hosts:
                if k == last:
                    return None  # never enough hosts again
                k += 1
                start = times[k]
            end = start + duration
            j = k + 1
            while j <= last and times[j] < end and values[j] >= hosts:
                j += 1
            if j > last or times[j] >= end:
                return start
            k, start = j, times[j]

    def take(self, hosts: int, start: int, end: int) -> None:
        """``hosts`` fewer over ``[start, end)`` (``now <= start < end``): planned in place,
        equal neighbours merged. Over-commitment is the caller's to avoid (it reads as none)."""
        if not self.times[0] <= start < end:
            raise ValueError(f"cannot take [{start}, {end}) from a function from {self.now}")
        times, values = self.times, self.values
        i = bisect_left(times, start)
        if i == len(times) or times[i] != start:
            times.insert(i, start)
            values.insert(i, values[i - 1])
        j = bisect_left(times, end, i)
        if j == len(times) or times[j] != end:
            times.insert(j, end)
            values.insert(j, values[j - 1])
        for k in range(i, j):
            values[k] = max(0, values[k] - hosts)
        self._merge_all(max(1, i), j + 1)

    def rises(self) -> list[int]:
        """``now`` and every later time when hosts get freed: where a best start can lie."""
        values = self.values
        return [self.times[0]] + [
            t for k, t in enumerate(self.times[1:], 1) if values[k] > values[k - 1]
        ]

    def levels(self, high: int, before: int | None = None) -> list[int]:
        """The distinct positive host counts taken from ``now`` on (and before ``before``),
        capped at ``high``. Any count fits exactly where the smallest level at or above it
        fits: when more hosts never run longer, a search over host counts need only try these."""
        values = self.values
        if before is not None:
            values = values[: bisect_left(self.times, before)]
        return sorted({min(v, high) for v in values if v > 0})

    def pairs(self) -> list[tuple[int, int]]:
        return list(zip(self.times, self.values, strict=True))

    def _merge_all(self, first: int = 1, stop: int | None = None) -> None:
        """Steps ``first`` to ``stop`` merged into the one before when of equal value."""
        times, values = self.times, self.values
        k, stop = first, len(times) if stop is None else min(stop, len(times))
        while k < stop:
            if values[k] == values[k - 1]:
                del times[k], values[k]
                stop -= 1
            else:
                k += 1


def common_start(demands: Sequence[tuple[Steps, int]], duration: int, after: int) -> int | None:
    """The first ``s >= after`` where every ``(steps, hosts)`` fits for ``duration`` at once.

    Leapfrogs: each cluster's earliest fit from the candidate becomes the new candidate until
    all agree, the way the policy places a multi-cluster request.
    """
    start = after
    while True:
        moved = False
        for steps, hosts in demands:
            fit = steps.earliest_fit(hosts, duration, start)
            if fit is None:
                return None
            if fit != start:
                start, moved = fit, True
        if not moved:
            return start
