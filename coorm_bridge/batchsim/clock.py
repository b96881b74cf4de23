"""Simulated time: the same simulator code runs on a virtual clock or on accelerated real time.

Tests and benchmarks want whole days of batch-system activity in milliseconds and the exact same
run every time: :class:`VirtualClock` is a discrete-event clock that only moves when told to.
Demonstrations want a live platform, possibly faster than real time: :class:`WallClock` follows
real time times ``speedup`` and fires callbacks from one background thread. Times are whole Unix
seconds, like everywhere else in coorm-bridge.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Self

from coorm_bridge.batchsim.limits import MAX_SPEEDUP, MAX_TIME, MAX_TIME_TEXT

logger = logging.getLogger(__name__)


class Handle:
    """A scheduled callback; :meth:`cancel` keeps it from firing if it has not fired yet."""

    __slots__ = ("_cancelled", "callback", "time")

    def __init__(self, when: int, callback: Callable[[], None]) -> None:
        self.time = when
        self.callback = callback
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def __repr__(self) -> str:
        state = " cancelled" if self._cancelled else ""
        return f"<Handle at {self.time}{state} {self.callback!r}>"


class Clock(ABC):
    """Platform time for the simulator: read it, wait for it, be called back at a given time."""

    @abstractmethod
    def now(self) -> int:
        """The current platform time, whole Unix seconds."""

    @abstractmethod
    def sleep_until(self, t: int) -> None:
        """Return once platform time has reached ``t`` (at once if it already has)."""

    @abstractmethod
    def call_at(self, t: int, callback: Callable[[], None]) -> Handle:
        """Run ``callback`` once platform time reaches ``t``; a past ``t`` runs it next."""

    def instant(self) -> float:
        """:meth:`now` to the fraction of a second (a virtual clock's time is whole)."""
        return float(self.now())

    def call_later(self, delay: int, callback: Callable[[], None]) -> Handle:
        """:meth:`call_at` ``delay`` seconds from now."""
        return self.call_at(self.now() + delay, callback)

    def close(self) -> None:  # noqa: B027 - optional hook, a virtual clock holds nothing
        """Stop firing callbacks and release resources; the default holds none."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class _Queue:
    """A heap of handles in (time, scheduling order): equal times fire first come, first served."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Handle]] = []
        self._order = itertools.count()

    def push(self, handle: Handle) -> None:
        heapq.heappush(self._heap, (handle.time, next(self._order), handle))

    def peek(self) -> Handle | None:
        """The next live handle, dropping cancelled ones on the way."""
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][2] if self._heap else None

    def pop(self) -> Handle:
        return heapq.heappop(self._heap)[2]


class VirtualClock(Clock):
    """Discrete-event time: it moves only through :meth:`advance_to`, :meth:`step` or sleeping.

    Deterministic: callbacks run in the caller's thread in time order, ties in scheduling order.
    A callback's exception propagates to the caller, with the clock at that callback's time.
    Not thread-safe, and callbacks must not move the clock themselves (they may schedule).
    """

    def __init__(self, start: int) -> None:
        if not 0 <= start <= MAX_TIME:
            raise ValueError(
                f"a clock starts within [0, {MAX_TIME}] ({MAX_TIME_TEXT}), not {start}"
            )
        self._now = start
        self._queue = _Queue()
        self._running = False

    def now(self) -> int:
        return self._now

    def call_at(self, t: int, callback: Callable[[], None]) -> Handle:
        handle = Handle(max(t, self._now), callback)
        self._queue.push(handle)
        return handle

    def next_event_time(self) -> int | None:
        """When the next pending callback is due, or None when nothing is scheduled."""
        handle = self._queue.peek()
        return None if handle is None else handle.time

    def advance_to(self, t: int) -> None:
        """Move to ``t``, running every callback due by then, including ones they schedule."""
        if t < self._now:
            raise ValueError(f"the clock cannot go back from {self._now} to {t}")
        if t > MAX_TIME:
            raise ValueError(f"the clock cannot go past {MAX_TIME} ({MAX_TIME_TEXT}) to {t}")
        if self._running:
            raise RuntimeError("a callback cannot move the virtual clock; schedule instead")
        self._running = True
        try:
            while (handle := self._queue.peek()) is not None and handle.time <= t:
                self._queue.pop()
                self._now = handle.time
                handle.callback()
            self._now = t
        finally:
            self._running = False

    def run_until(self, t: int) -> None:
        """Same as :meth:`advance_to`; reads better in simulation loops."""
        self.advance_to(t)

    def step(self) -> int | None:
        """Advance to the next event and run all that is due then; None when nothing is left."""
        t = self.next_event_time()
        if t is not None:
            self.advance_to(t)
        return t

    def sleep_until(self, t: int) -> None:
        """Advance at once (a virtual sleep takes no real time); a past ``t`` only runs due work."""
        self.advance_to(max(t, self._now))


class WallClock(Clock):
    """Real time scaled: platform time is ``origin + (real_now - real_start) * speedup``, up to
    :data:`.limits.MAX_TIME`, where it stops.

    Callbacks run one at a time, in time order, from a single background thread started on the
    first :meth:`call_at`; an exception is logged and the thread goes on. Cancelling races with
    firing: a callback already taken off the queue still runs.
    """

    def __init__(self, speedup: float = 1.0, origin: int | None = None) -> None:
        if not (math.isfinite(speedup) and 0 < speedup <= MAX_SPEEDUP):
            raise ValueError(f"speedup must be a number in (0, {MAX_SPEEDUP:g}], got {speedup}")
        self.speedup = speedup
        self.origin = int(time.time()) if origin is None else origin
        if not 0 <= self.origin <= MAX_TIME:
            raise ValueError(f"origin must be within [0, {MAX_TIME}] ({MAX_TIME_TEXT})")
        self._real_start = time.monotonic()  # immune to NTP steps and manual clock changes
        self._queue = _Queue()
        self._condition = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def thread(self) -> threading.Thread | None:
        """The callback thread, once started (for tests and shutdown checks)."""
        return self._thread

    def now(self) -> int:
        return math.floor(self.instant())

    def instant(self) -> float:
        elapsed = (time.monotonic() - self._real_start) * self.speedup
        return min(float(MAX_TIME), self.origin + elapsed)

    def reading(self) -> tuple[int, float]:
        """Platform time and wall-clock time (Unix seconds) read together: where a restarted
        platform takes its time up from (the wall clock, unlike the monotonic one, is shared
        across processes and restarts)."""
        wall = time.time()
        return self.now(), wall

    def _real_delay(self, t: int) -> float:
        """Real seconds left until platform time ``t``."""
        deadline = self._real_start + (t - self.origin) / self.speedup
        return deadline - time.monotonic()

    def sleep_until(self, t: int) -> None:
        if t > MAX_TIME:
            raise ValueError(
                f"the clock never reaches {t}: it stops at {MAX_TIME} ({MAX_TIME_TEXT})"
            )
        # Float rounding can leave now() one second short at the deadline: loop until it is not.
        while self.now() < t:
            time.sleep(max(self._real_delay(t), 0.0005))

    def call_at(self, t: int, callback: Callable[[], None]) -> Handle:
        handle = Handle(t, callback)
        with self._condition:
            if self._closed:
                raise RuntimeError("the clock is closed")
            self._queue.push(handle)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="coorm-mock-clock", daemon=True
                )
                self._thread.start()
            self._condition.notify()
        return handle

    def _run(self) -> None:
        with self._condition:
            while not self._closed:
                handle = self._queue.peek()
                if handle is None:
                    self._condition.wait()
                    continue
                if self.now() < handle.time:
                    self._condition.wait(max(self._real_delay(handle.time), 0.0005))
                    continue
                self._queue.pop()
                self._condition.release()
                try:
                    handle.callback()
                except Exception:
                    logger.exception("mock clock callback %r failed", handle.callback)
                finally:
                    self._condition.acquire()

    def close(self) -> None:
        """Stop the callback thread and wait for it; pending callbacks are dropped."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
