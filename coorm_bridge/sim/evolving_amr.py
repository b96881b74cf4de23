"""How the AMR code asks for its hosts under each strategy of ``coorm-sim evolving``.

Each strategy is a small launcher: it sends typed requests (:mod:`coorm_bridge.core.typed`) to
the run (:class:`Requests`, implemented by :class:`~.evolving_run.Run`), which places them with
the project's CooRMv2 policy and holds them as placeholders; the launcher is told when one
starts, and when the code ends a period (its need may change there).

- :class:`Peak` (a): one rigid non-preemptible request, ``peak`` hosts for the whole
  computation: what a user does today. It never restarts.
- :class:`Resubmit` (b): v1 requests of exactly the hosts needed. When the code must grow, it
  checkpoints, ends its allocation and asks for a larger one, waiting in the queue meanwhile.
  When it may shrink, it asks for the smaller one and keeps computing on the larger until the
  smaller starts, then moves there. A request asks for the computation left (plus a restart):
  the code cannot know how long its need will last.
- :class:`Prealloc` (c): a CooRMv2 pre-allocation of ``peak`` hosts for the computation plus a
  restart per period (a bound on its changes), and non-preemptible requests inside it of exactly
  the hosts needed (spontaneous updates, which start at once), the previous one ended first.

(b) and (c) restart (``restart`` seconds lost) each time the code moves to new hosts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

from coorm_bridge.core.typed import RequestType
from coorm_bridge.sim.amr import Progress

NP, PA = RequestType.NON_PREEMPTIBLE, RequestType.PRE_ALLOCATION


class Requests(Protocol):
    """What a launcher may do (the run does it at the current time)."""

    def send(self, kind: RequestType, hosts: int, duration: int) -> str:
        """A new request; returns its id."""
        ...

    def done(self, request: str) -> None:
        """End a started request (its hosts go back)."""
        ...

    def withdraw(self, request: str) -> None:
        """Drop a request that has not started."""
        ...


class Launcher(ABC):
    """The AMR code's launcher under one strategy; see the module docstring."""

    def __init__(self, amr: Progress, peak: int) -> None:
        self.amr = amr
        self.peak = peak
        self.current: tuple[str, int] | None = None
        """The started request the code runs on, with its hosts."""
        self.pending: tuple[str, int] | None = None
        """The request it waits for, with its hosts."""

    @abstractmethod
    def arrive(self, run: Requests, now: int) -> None:
        """The code arrives: its first requests."""

    @abstractmethod
    def started(self, run: Requests, now: int, request: str) -> None:
        """A request of its started."""

    @abstractmethod
    def period(self, run: Requests, now: int) -> None:
        """A period ended (the next one's need is ``amr.need``), or the run did."""

    def _ask(self, run: Requests, hosts: int, duration: int) -> None:
        """Wait for a request of ``hosts`` (keeping one of that size already waiting)."""
        if self.pending is not None and self.pending[1] == hosts:
            return
        self._drop_pending(run)
        self.pending = (run.send(NP, hosts, duration), hosts)

    def _drop_pending(self, run: Requests) -> None:
        if self.pending is not None:
            run.withdraw(self.pending[0])
            self.pending = None

    def _end_current(self, run: Requests, now: int) -> None:
        if self.current is not None:
            self.amr.stop(now)
            run.done(self.current[0])
            self.current = None


class Peak(Launcher):
    """(a): ``peak`` hosts for the whole computation."""

    def arrive(self, run: Requests, now: int) -> None:
        self.pending = (run.send(NP, self.peak, self.amr.remaining()), self.peak)

    def started(self, run: Requests, now: int, request: str) -> None:
        self.current, self.pending = self.pending, None
        self.amr.start(now)

    def period(self, run: Requests, now: int) -> None:
        if self.amr.finished:
            self._end_current(run, now)


class Resubmit(Launcher):
    """(b): a new v1 request each time the need changes."""

    def arrive(self, run: Requests, now: int) -> None:
        self._ask(run, self.amr.need, self.amr.remaining())

    def started(self, run: Requests, now: int, request: str) -> None:
        assert self.pending is not None
        assert self.pending[0] == request
        self._end_current(run, now)  # a smaller allocation started: move there
        self.current, self.pending = self.pending, None
        self.amr.start(now)

    def period(self, run: Requests, now: int) -> None:
        if self.amr.finished:
            self._drop_pending(run)
            self._end_current(run, now)
            return
        assert self.current is not None
        need, have = self.amr.need, self.current[1]
        if need == have:
            self._drop_pending(run)
            return
        if need > have:  # cannot hold the data: checkpoint, free the hosts, queue again
            self._end_current(run, now)
        self._ask(run, need, self.amr.remaining() + self.amr.restart)


class Prealloc(Launcher):
    """(c): a pre-allocation at the peak, spontaneous updates inside it."""

    def __init__(self, amr: Progress, peak: int) -> None:
        super().__init__(amr, peak)
        self.pa: str | None = None
        self.pa_end = 0

    def arrive(self, run: Requests, now: int) -> None:
        changes = len(self.amr.needs) - 1
        self.pa = run.send(PA, self.peak, self.amr.remaining() + changes * self.amr.restart)

    def started(self, run: Requests, now: int, request: str) -> None:
        if request == self.pa:
            self.pa_end = now + self.amr.remaining() + (len(self.amr.needs) - 1) * self.amr.restart
            self._ask(run, self.amr.need, self.pa_end - now)
            return
        assert self.pending is not None
        assert self.pending[0] == request
        self.current, self.pending = self.pending, None
        self.amr.start(now)

    def period(self, run: Requests, now: int) -> None:
        if self.amr.finished:
            self._end_current(run, now)
            if self.pa is not None:
                run.done(self.pa)
                self.pa = None
            return
        assert self.current is not None
        if self.amr.need != self.current[1]:
            self._end_current(run, now)  # done first: the new one needs its hosts
            self._ask(run, self.amr.need, self.pa_end - now)


#: The strategies, by the name rows carry.
LAUNCHERS: dict[str, type[Launcher]] = {
    "peak": Peak,
    "v1-resubmit": Resubmit,
    "v2": Prealloc,
}
