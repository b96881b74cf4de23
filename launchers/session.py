"""The launch loop: subscribe, select on every view, wait for the start, deploy, send ``done``.

It follows the paper's launcher (§III-B, Fig. 4). Events are read by a thread of their own
through the client's ``follow``, which rides out a lost connection or a restarted daemon and
resumes after the last event seen; the main thread takes them from a queue, at most a second
apart, so that it can redraw the countdown, watch the jobs and notice Ctrl-C.

- A ``change`` is applied to the current view; when the view changed, the selector runs (once
  per distinct view) and the request is sent again only when the selection changed.
- ``placement_failed`` is shown and waited through: the bridge retries by itself.
- ``killed``, ``error``, ``withdrawn`` and an unexpected ``ended`` end the run, exit status 1.
- ``start``: the run directory is written, one job per cluster submitted on the granted hosts,
  and watched until every one finished; then ``done``, and the exit status says whether every
  component succeeded.
- Ctrl-C (or SIGTERM) before the start withdraws; after it, cancels the jobs and sends ``done``.
  A second Ctrl-C stops at once.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TypeVar

from coorm_bridge.core.messages import (
    ChangeEvent,
    EndedEvent,
    Event,
    PlacementFailedEvent,
    StartEvent,
)
from coorm_bridge.core.model import ClusterInfo, Filter, Interconnect, Request
from coorm_bridge.launchers.app import AppSpec
from coorm_bridge.launchers.client import BridgeError, BridgeUnreachable
from coorm_bridge.launchers.deploy import Deployer, DeployError, deployer_for
from coorm_bridge.launchers.deploy.run import Run
from coorm_bridge.launchers.display import Display, clock, request_text, session_page
from coorm_bridge.launchers.rundir import prepare
from coorm_bridge.launchers.selection import CurrentView, Horizons, Selection, SelectorError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
T = TypeVar("T")


class BridgeCalls(Protocol):
    """The calls the loop makes (:class:`~coorm_bridge.launchers.client.BridgeClient`)."""

    def subscribe(
        self, filter: Filter | None = None, name: str | None = None, *, deltas: bool = False
    ) -> Any: ...
    def interconnect(self) -> Interconnect: ...
    def clusters(self) -> list[ClusterInfo]: ...
    def request(self, session: str, request: Request | None = None) -> Any: ...
    def session(self, session: str) -> Any: ...
    def done(self, session: str) -> Any: ...
    def withdraw(self, session: str) -> Any: ...
    def follow(
        self, session: str, after: int = 0, wait: float = 30.0, retry: float = 1.0,
        max_retry: float = 30.0, *, horizon: Callable[[int], int | None] | None = None,
    ) -> Iterator[Event]: ...  # fmt: skip
    def close(self) -> None: ...


@dataclass(frozen=True)
class Reconnecting:
    """The event thread lost the bridge and tries again in ``delay`` seconds."""

    delay: float
    type: str = "reconnecting"


class Interrupts:
    """SIGINT and SIGTERM as a request to stop politely, checked by the loop; a second SIGINT
    raises KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for number in (signal.SIGINT, signal.SIGTERM):
            self._previous[number] = signal.signal(number, self._handle)

    def restore(self) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.requested.is_set() and number == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested.set()


class RunEnded(Exception):
    """The run is over before its end: ``status`` is the exit status, the message why."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


@dataclass
class Launch:
    """One application run through the bridge."""

    app: AppSpec
    selection: Selection
    connect: Callable[..., BridgeCalls]
    """Makes a client of the bridge (``sleep=``: how it waits before reconnecting); the event
    thread has its own, as clients are not shared between threads."""
    display: Display
    interrupts: Interrupts = field(default_factory=Interrupts)
    run_root: Path | None = None
    wait: float = 20.0
    max_retry: float = 5.0
    session: str = ""
    request: Request | None = None
    estimated: int | None = None
    clock: Callable[[], float] = time.time
    """The bridge's time, which selectors are given as ``now``: the host's, but for a mock
    platform run faster than real time (``coorm-sim validate``'s launchers read its clock)."""
    events: queue.Queue[Event | Reconnecting | BaseException] = field(default_factory=queue.Queue)
    horizons: Horizons = field(default_factory=Horizons)
    bridge_url: str | None = None
    """The bridge's URL, to link to the session's page when ``coorm-bridge web`` runs for it."""

    def run(self) -> int:
        """The whole run; its exit status."""
        bridge = self.connect()
        try:
            return self._run(bridge)
        finally:
            bridge.close()
            self.display.note(f"computed configurations: {self.selection.computed}")
            self.display.close()

    def _run(self, bridge: BridgeCalls) -> int:
        subscribed = bridge.subscribe(self.app.subscription_filter, name=self.app.name, deltas=True)
        self.session = subscribed.session
        clusters = {info.name: info for info in subscribed.clusters}
        self.display.note(
            f"session {self.session} at the bridge; clusters: {', '.join(clusters) or 'none'}"
        )
        link = None if self.bridge_url is None else session_page(self.bridge_url, self.session)
        if link is not None:
            self.display.page(self.session, link)
        if not clusters:
            self.display.warn("the filter lets no cluster through: nothing to run on")
            self._withdraw(bridge)
            return EXIT_FAILED
        view = CurrentView(clusters, self._retrying(bridge.interconnect))
        threading.Thread(target=self._follow, name="coorm-events", daemon=True).start()
        try:
            start = self._wait_for_start(bridge, view)
        except RunEnded as ended:
            self.display.warn(str(ended))
            return ended.status
        except (SelectorError, BridgeError) as error:
            self.display.warn(f"{error}; withdrawing")
            self._withdraw(bridge)
            return EXIT_FAILED
        if start is None:
            self.display.note("interrupted before the start: withdrawing")
            self._withdraw(bridge)
            return EXIT_INTERRUPTED
        return self._deploy(bridge, view, start)

    # -- waiting ------------------------------------------------------------------------------

    def _wait_for_start(self, bridge: BridgeCalls, view: CurrentView) -> StartEvent | None:
        state = "subscribed"
        self.display.status(state, None, None)
        while not self.interrupts.requested.is_set():
            item = self._next()
            if item is None:
                self.display.tick()
                continue
            if isinstance(item, Reconnecting):
                self.display.status(
                    "reconnecting", self.request, self.estimated,
                    f"the bridge does not answer; trying again in {item.delay:g} s",
                )  # fmt: skip
                continue
            if isinstance(item, ChangeEvent):
                self.estimated = item.estimated_start
                if view.apply(item):
                    self._select(bridge, view)
                state = "waiting" if self.request is not None else "selecting"
            elif isinstance(item, StartEvent):
                self.horizons.stop()
                return item
            elif isinstance(item, PlacementFailedEvent):
                self.display.warn(
                    f"placement failed: {item.reason}; the bridge tries again at "
                    f"{clock(item.retry_at)}"
                )
                state = "placement failed, retrying"
            else:
                raise RunEnded(EXIT_FAILED, _ending(item))
            self.horizons.decided(item.seq, self.selection.horizon)
            self.display.status(state, self.request, self.estimated)
        return None

    def _select(self, bridge: BridgeCalls, view: CurrentView) -> None:
        request = self.selection.select(view, int(self.clock()), self.request)
        if request is None or request == self.request:
            return
        answer = self._retrying(lambda: bridge.request(self.session, request))
        self.request = request
        self.estimated = answer.estimated_start
        when = "never" if self.estimated is None else clock(self.estimated)
        self.display.note(f"request sent: {request_text(request)}; estimated start {when}")

    # -- running ------------------------------------------------------------------------------

    def _deploy(self, bridge: BridgeCalls, view: CurrentView, start: StartEvent) -> int:
        hosts = "; ".join(
            f"{name}: {len(a.hosts)} hosts in {a.reservation}"
            for name, a in sorted(start.allocations.items())
        )
        self.display.note(f"started until {clock(start.end)}: {hosts}")
        deployers: dict[str, Deployer] = {}
        run: Run | None = None
        status = EXIT_FAILED
        try:
            infos = {info.name: info for info in self._retrying(bridge.clusters)}
            for name in start.allocations:
                info = infos.get(name, view.clusters[name])
                deployers[name] = deployer_for(info, self.connect, self.session)
            with ThreadPoolExecutor(len(deployers)) as pool:  # what prepare asks, at once
                for name, deployer in deployers.items():
                    allocation = start.allocations[name]
                    pool.submit(deployer.warm, allocation.hosts, allocation.reservation)
            directory = prepare(
                self.app,
                self.session,
                start,
                view.clusters,
                {name: d.kind for name, d in deployers.items()},
                address=lambda cluster, host: deployers[cluster].address(host),
                root=self.run_root,
            )
            self.display.note(f"run directory {directory.path}")
            run = Run(directory, deployers, self.display)
            self.display.status("submitting", self.request, start.time)
            run.submit(start)
            status = self._watch(run, start)
        except (DeployError, SelectorError, OSError) as error:
            self.display.warn(f"cannot deploy: {error}")
            if run is not None:
                run.cancel()
        except (RunEnded, BridgeError) as ended:
            self.display.warn(str(ended))
            status = ended.status if isinstance(ended, RunEnded) else EXIT_FAILED
            if run is not None:
                run.cancel()
                run.wait_cancelled(30)
        except Exception as error:  # a bug must still cancel the jobs and release the hosts
            self.display.warn(f"cannot deploy: {error!r}")
            if run is not None:
                run.cancel()
        finally:
            if run is not None:
                run.close()
            else:
                for deployer in deployers.values():
                    deployer.close()
            self._done(bridge)
        return status

    def _watch(self, run: Run, start: StartEvent) -> int:
        interval = self.app.deployment.poll_interval
        next_poll = 0.0
        while True:
            if self.interrupts.requested.is_set():
                self.display.note("interrupted: cancelling the jobs")
                run.cancel()
                run.wait_cancelled(30)
                return EXIT_INTERRUPTED
            if time.monotonic() >= next_poll:
                if run.poll():
                    return run.exit_status()
                next_poll = time.monotonic() + interval
            self.display.status(
                "running", self.request, start.time, f"allocation ends {clock(start.end)}"
            )
            item = self._next(min(1.0, interval))
            if item is not None and item.type in ("killed", "error", "withdrawn", "ended"):
                raise RunEnded(EXIT_FAILED, _ending(item))

    # -- the bridge -------------------------------------------------------------------------

    def _follow(self) -> None:
        feed(
            self.events,
            self.connect,
            self.session,
            wait=self.wait,
            max_retry=self.max_retry,
            horizons=self.horizons,
        )

    def _next(self, timeout: float = 1.0) -> Event | Reconnecting | None:
        """The next event (None after ``timeout`` s without one); the event thread's failure
        is raised here, in the main thread."""
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, BridgeError):
            raise RunEnded(EXIT_FAILED, f"the bridge stopped giving the events: {item}")
        if isinstance(item, BaseException):
            raise item
        return item

    def _retrying(self, call: Callable[[], T]) -> T:
        """``call()``, tried again while the bridge does not answer (a restart), until it
        does or the user interrupts."""
        delay = 1.0
        while True:
            try:
                return call()
            except BridgeError as error:
                if not (isinstance(error, BridgeUnreachable) or error.status >= 500):
                    raise
                if self.interrupts.requested.is_set():
                    raise
                self.display.status("reconnecting", self.request, self.estimated, f"{error.detail}")
                time.sleep(delay)
                delay = min(delay * 2, self.max_retry)

    def _withdraw(self, bridge: BridgeCalls) -> None:
        try:
            self._retrying(lambda: bridge.withdraw(self.session))
            self.display.note(f"session {self.session} withdrawn")
        except BridgeError as error:
            if error.status == 409:  # it started meanwhile: give the hosts back
                self._done(bridge)
            else:
                self.display.warn(f"could not withdraw: {error}")

    def _done(self, bridge: BridgeCalls) -> None:
        try:
            self._retrying(lambda: bridge.done(self.session))
            self.display.note(f"done sent: session {self.session} releases its hosts")
        except BridgeError as error:
            if error.status != 409:  # already over (killed, ended): nothing to release
                self.display.warn(f"could not send done: {error}")


def feed(
    events: queue.Queue[Event | Reconnecting | BaseException],
    connect: Callable[..., Any],
    session: str,
    *,
    wait: float,
    max_retry: float,
    horizons: Horizons | None = None,
) -> None:
    """The event thread: every event of the session, in order, into ``events``; its own client
    (``connect(sleep=...)``), whose pauses between reconnections are told there too, and so is
    its failure, for the main thread to raise. ``horizons``: the main thread's decisions' (each
    poll carries the latest)."""

    def pause(delay: float) -> None:
        events.put(Reconnecting(delay))
        time.sleep(delay)

    try:
        client = connect(sleep=pause)
        try:
            horizon = None if horizons is None else horizons.for_poll
            for event in client.follow(session, wait=wait, max_retry=max_retry, horizon=horizon):
                events.put(event)
        finally:
            client.close()
    except BaseException as error:
        events.put(error)


def _ending(item: Event | Reconnecting) -> str:
    """Why an event ends the run, in a sentence."""
    if isinstance(item, EndedEvent):
        return f"the session ended at the bridge ({item.state.value}) before the application"
    reason = getattr(item, "reason", "")
    return f"{item.type}: {reason}"
