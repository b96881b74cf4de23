"""A view's profile from ``now`` on as plain lists, for searches that query it thousands of times.

:class:`~coorm_bridge.core.profile.Profile` answers one query in microseconds through numpy,
an overhead paid on every call; a selector's search asks "when do 37 hosts fit for 2 h on c3"
for each of its candidates. A CAP has tens of steps: walking them in Python is faster, and they
are read once per view. Only what lies from ``now`` on is kept: a request cannot start earlier.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coorm_bridge.core.profile import Profile


class Steps:
    """``values[k]`` free hosts on ``[times[k], times[k + 1])``, the last value forever after."""

    __slots__ = ("times", "values")

    def __init__(self, times: list[int], values: list[int]) -> None:
        self.times = times
        self.values = values

    @classmethod
    def of(cls, profile: Profile, now: int) -> Steps:
        steps = profile.steps(now)
        return cls([t for t, _ in steps], [max(0, v) for _, v in steps])

    def value_at(self, time: int) -> int:
        return self.values[max(0, bisect_right(self.times, time) - 1)]

    def min_over(self, start: int, end: int) -> int:
        """The fewest free hosts over ``[start, end)`` (``end > start``)."""
        k = max(0, bisect_right(self.times, start) - 1)
        j = max(k + 1, bisect_left(self.times, end))
        return min(self.values[k:j])

    def earliest_fit(self, hosts: int, duration: int, after: int) -> int | None:
        """The first start at or after ``after`` with ``hosts`` free for ``duration`` (or None)."""
        times, values = self.times, self.values
        last = len(times) - 1
        start: int | None = None
        for k in range(max(0, bisect_right(times, after) - 1), last + 1):
            if values[k] < hosts:
                start = None
                continue
            if start is None:
                start = max(after, times[k])
            if k == last or times[k + 1] - start >= duration:
                return start
        return None

    def rises(self) -> list[int]:
        """``now`` and every later time when hosts get freed: where a best start can lie."""
        values = self.values
        return [self.times[0]] + [
            t for k, t in enumerate(self.times[1:], 1) if values[k] > values[k - 1]
        ]

    def levels(self, high: int) -> list[int]:
        """The distinct positive host counts this profile takes from ``now`` on, capped at
        ``high``. Any count fits exactly where the smallest level at or above it fits: when more
        hosts never run longer, a search over host counts need only try these."""
        return sorted({min(v, high) for v in self.values if v > 0})


def common_start(demands: Sequence[tuple[Steps, int]], duration: int, after: int) -> int | None:
    """The first ``s >= after`` where every ``(steps, hosts)`` fits for ``duration`` at once.

    Leapfrogs: each cluster's earliest fit from the candidate becomes the new candidate until all
    agree, the way the policy places a multi-cluster request.
    """
    start = after
    while True:
        moved = False
        for steps, hosts in demands:
            fit = steps.earliest_fit(hosts, duration, start)
            if fit is None:
                return None
            if fit > start:
                start, moved = fit, True
        if not moved:
            return start
