"""The scheduler's calendar: the current time, and what is due when.

Every part of the scheduler that makes something happen later files it here (a job's end, a
reservation's start or end, a node's fault, an arrival, a planned start), and every part reads
the time from here: one clock and one order of events for all of them, so that the same calls
always give the same history. Events are never taken back when plans change: a stale one is
recognised when it comes up (the scheduler tells which are still live) and skipped.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

# Event kinds, in the order they are handled at one time: ends free hosts before anything uses
# them, arrivals are queued after the plan took in this time's changes, starts come last.
END, RESERVATION_END, NODE, RESERVATION_START, ARRIVAL, START = range(6)

Event = tuple[int, int, int, str, int]
"""time, kind, sequence (ties go by filing order), job or reservation or host name, token."""


class Calendar:
    """The time and the events of one scheduler, from ``start``."""

    __slots__ = ("_events", "_now", "_sequence")

    def __init__(self, start: int) -> None:
        self._now = start
        self._events: list[Event] = []
        self._sequence = 0

    @property
    def now(self) -> int:
        return self._now

    def move_to(self, t: int) -> None:
        """The scheduler stands at ``t`` (it handled everything due before)."""
        self._now = t

    def push(self, time: int, kind: int, key: str, token: int = 0) -> None:
        """File an event of ``kind`` about ``key`` at ``time``."""
        self._sequence += 1
        heapq.heappush(self._events, (time, kind, self._sequence, key, token))

    def next_time(self, live: Callable[[Event], bool]) -> int | None:
        """When the first live event is due (stale ones at the front are dropped)."""
        events = self._events
        while events and not live(events[0]):
            heapq.heappop(events)
        return events[0][0] if events else None

    def take_due(self, t: int) -> Iterator[Event]:
        """The events at ``t`` but the starts, taken one at a time: handling one may make the
        next stale, so each is judged only when it comes."""
        events = self._events
        while events and events[0][0] == t and events[0][1] != START:
            yield heapq.heappop(events)

    def take_starts(self) -> list[Event]:
        """The planned starts due by now, stale ones included."""
        events, now = self._events, self._now
        due: list[Event] = []
        while events and events[0][0] <= now and events[0][1] == START:
            due.append(heapq.heappop(events))
        return due
