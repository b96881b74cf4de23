"""CooRM in virtual time: the policy and the launchers' selectors on one event queue.

This is the daemon's loop without its store, HTTP server and batch systems: the same
:class:`~coorm_bridge.core.policy.Policy` plans every pass (at most once per ``interval``, when
a request, a ``done``, an arrival, a start or a ghost's end asks for one), each application's
launcher keeps the view from its change events and runs its selector through the same
:class:`~coorm_bridge.launchers.selectors.memo.Memoized` memo as ``coorm-launch``, and every
message is counted as the HTTP API would carry it (:mod:`.wire`). As in the paper's simulator,
a launcher answers a new view at once, without the simulated time moving, unless it has an
*adaptation delay*: then it answers ``delay`` seconds after the first view it has not answered
yet, with the newest view it holds by then. Like ``coorm-launch`` it sends a new selection only
when it is worth it (:func:`~coorm_bridge.launchers.selection.worth_sending`; ``min_gain``
seconds, as in an application file).

With ``quiet`` (the default, what ``coorm-launch`` and the daemon do), the protocol is the quiet
one (``coorm_bridge.service.quiet``): changed profiles travel as deltas from their first changed
step, and a change that lies wholly past the horizon of the launcher's choice is not sent (the
next one sent carries it). ``quiet=False`` is the protocol before it: whole profiles, every
change. :class:`~coorm_bridge.sim.holds.Holds` counts the reservation calls the daemon would
make for the run's placeholders.

Applications run exactly what their model says for the request they got (:meth:`SimApp.
run_time`) and send ``done``; their hosts then stay held until ``fair_start`` has passed (their
ghost), which the run accounts as idle host-seconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from time import process_time

from coorm_bridge.batchsim import PlatformSpec
from coorm_bridge.core.horizon import unheeded
from coorm_bridge.core.messages import Change, availability_changes
from coorm_bridge.core.model import Request
from coorm_bridge.core.policy import Application, Plan, Policy, PolicyConfig
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.selection import worth_sending
from coorm_bridge.launchers.selectors.memo import Memoized
from coorm_bridge.sim.holds import Holds
from coorm_bridge.sim.resources import infos, interconnect
from coorm_bridge.sim.wire import Wire
from coorm_bridge.sim.workload import SimApp

# Event kinds, in the order they are handled at one time: hosts freed before anyone asks.
_DONE, _ARRIVAL, _ANSWER = range(3)


@dataclass
class AppLife:
    """One application's life in a run."""

    id: str
    kind: str
    arrival: int
    start: int | None = None
    end: int | None = None
    """When it sent ``done`` (its real end, not its walltime)."""
    request: Request | None = None
    requests: int = 0
    """Requests it sent (the first one included)."""
    change_events: int = 0
    """Change events it received (a view change, or a new estimated start alone)."""


@dataclass
class RunResult:
    """What one run measured."""

    outcomes: list[AppLife]
    computed_configurations: int
    cpu_policy_s: float
    cpu_selectors_s: float
    messages: int
    message_bytes: int
    change_events: int
    """Change events the bridge sent, all applications together (a view change, or a new
    estimated start alone): each one a long poll answered."""
    change_bytes: int
    """The part of ``message_bytes`` those change events carried."""
    passes: int
    used_host_seconds: int
    """Hosts times seconds the applications really ran."""
    ghost_host_seconds: int
    """Hosts times seconds held by ghosts (fair-start): idle unless reused by the same owner."""
    unheeded: int = 0
    """View changes not sent: wholly past the horizon of the launcher's choice."""
    estimates_alone: int = 0
    """Of those, the ones that came with a new estimate, told alone."""
    reservation_calls: dict[str, int] = field(default_factory=dict)
    """Reservation create/update/delete calls the daemon would make (:mod:`.holds`)."""

    @property
    def cpu_schedule_s(self) -> float:
        """The paper's scheduling cost: policy and selectors."""
        return self.cpu_policy_s + self.cpu_selectors_s


@dataclass
class _Launcher:
    """The launcher side of one application: its view, its memo, its pending answer."""

    app: SimApp
    memo: Memoized
    outcome: AppLife
    view: dict[str, Profile] = field(default_factory=dict)
    sent: dict[str, Profile] = field(default_factory=dict)
    """The view as the bridge last sent it (what the next change event is relative to)."""
    seq: int = 0
    estimate: int | None = None
    answer_due: bool = False
    sent_at: int = 0
    horizon: int | None = None
    """The horizon of the launcher's decision on ``sent`` (None: not decided on it yet, or any
    change matters)."""


class Engine:
    """One simulated run of a workload on a platform; see the module docstring."""

    def __init__(
        self,
        platform: PlatformSpec,
        apps: list[SimApp],
        *,
        fair_start: int = 5,
        interval: float = 1.0,
        delays: Mapping[str, int] | None = None,
        min_gain: int = 0,
        quiet: bool = True,
    ) -> None:
        self.clusters = infos(platform)
        self.interconnect = interconnect(platform)
        self.policy = Policy(PolicyConfig(interval=interval, fair_start=fair_start))
        self.interval = max(1, round(interval))
        self.fair_start = fair_start
        self.free = {name: Profile.constant(info.hosts) for name, info in self.clusters.items()}
        names = {spec.name: spec.host_names() for spec in platform.clusters}
        self.wire = Wire(tuple(self.clusters.values()), self.interconnect, names)
        self.delays = dict(delays or {})
        self.min_gain = min_gain
        self.quiet = quiet
        self.holds = Holds()
        self._unheeded = 0
        self._estimates_alone = 0
        self._estimated: set[str] = set()
        self.apps = apps
        self._launchers: dict[str, _Launcher] = {}
        self._orders: dict[str, int] = {}
        self._table: dict[str, Application] = {}
        self._events: list[tuple[int, int, int, str]] = []
        self._wants: list[int] = []
        self._sequence = 0
        self._last_pass: int | None = None
        self._cpu_selectors = 0.0
        self._cpu_policy = 0.0
        self._used = 0
        self._ghost = 0

    def run(self) -> RunResult:
        """Every application from its arrival to its end."""
        for order, app in enumerate(self.apps):
            self._push(app.arrival, _ARRIVAL, app.id)
            self._launchers[app.id] = _Launcher(
                app, Memoized(app.selector), AppLife(app.id, app.kind.value, app.arrival)
            )
            self._orders[app.id] = order
        while True:
            event_at = self._events[0][0] if self._events else None
            pass_at = self._pass_time()
            if event_at is None and pass_at is None:
                break
            if event_at is not None and (pass_at is None or event_at <= pass_at):
                now, kind, _, app_id = heapq.heappop(self._events)
                self._handle(now, kind, app_id)
            else:
                assert pass_at is not None
                while self._wants and self._wants[0] <= pass_at:
                    heapq.heappop(self._wants)
                self._pass(pass_at)
        outcomes = [self._launchers[app.id].outcome for app in self.apps]
        return RunResult(
            outcomes=outcomes,
            computed_configurations=sum(x.memo.computed for x in self._launchers.values()),
            cpu_policy_s=self._cpu_policy,
            cpu_selectors_s=self._cpu_selectors,
            messages=self.wire.messages,
            message_bytes=self.wire.bytes,
            change_events=self.wire.change_events,
            change_bytes=self.wire.change_bytes,
            passes=self.policy.counters.passes,
            used_host_seconds=self._used,
            ghost_host_seconds=self._ghost,
            unheeded=self._unheeded,
            estimates_alone=self._estimates_alone,
            reservation_calls=dict(self.holds.calls),
        )

    # -- the launchers' side ------------------------------------------------------------------

    def _handle(self, now: int, kind: int, app_id: str) -> None:
        launcher = self._launchers[app_id]
        if kind == _ARRIVAL:
            self.wire.subscribe(app_id, app_id)
            self._table[app_id] = Application(
                id=app_id, order=self._orders[app_id], clusters=tuple(self.clusters)
            )
            self._want(now)
        elif kind == _ANSWER:
            launcher.answer_due = False
            self._answer(launcher, now)
        else:  # done
            app = self._table[app_id]
            self.wire.done(app_id)
            self._table[app_id] = app.model_copy(
                update={"state": AppState.FINISH_SENT, "done_at": now}
            )
            launcher.outcome.end = now
            self._want(now)

    def _receive(self, launcher: _Launcher, view: dict[str, Profile], now: int) -> None:
        """A change event reached the launcher: answer now, or after its adaptation delay."""
        launcher.view = view
        delay = self.delays.get(launcher.app.id, 0)
        if delay <= 0:
            self._answer(launcher, now)
        elif not launcher.answer_due:
            launcher.answer_due = True
            self._push(now + delay, _ANSWER, launcher.app.id)

    def _answer(self, launcher: _Launcher, now: int) -> None:
        """Run the selector on the newest view; send the request when it differs."""
        app_id = launcher.app.id
        app = self._table.get(app_id)
        if app is None or app.state not in (
            AppState.SUBMITTED,
            AppState.REQUEST_SENT,
            AppState.WAITING,
        ):
            return
        began = process_time()
        choice = launcher.memo.choose(self.clusters, self.interconnect, launcher.view, now)
        request = choice.request
        send = worth_sending(launcher.view, app.request, request, now, self.min_gain)
        self._cpu_selectors += process_time() - began
        # As Selection: the horizon holds for the request left in force if it is the choice.
        kept = send or request == app.request
        launcher.horizon = choice.horizon if kept and launcher.view is launcher.sent else None
        if not send:
            return
        assert request is not None
        launcher.outcome.requests += 1
        self._table[app_id] = app.model_copy(
            update={"state": AppState.REQUEST_SENT, "request": request}
        )
        self.wire.request(app_id, request, launcher.estimate)
        self._want(now)

    # -- the bridge's side --------------------------------------------------------------------

    def _pass(self, now: int) -> None:
        began = process_time()
        plan = self.policy.plan(self.free, self._table.values(), now)
        self._cpu_policy += process_time() - began
        self._last_pass = now
        self.holds.after_pass(plan, self._table, now)
        self._estimated.clear()
        for app_id, outcome in plan.outcomes.items():
            self._settle(app_id, outcome.state, plan, now)
        for app_id in plan.changed:
            self._notify(app_id, plan, now)
        for due in self._due(plan, now):
            self._want(due)

    def _settle(self, app_id: str, state: AppState, plan: Plan, now: int) -> None:
        app = self._table[app_id]
        launcher = self._launchers[app_id]
        if state is AppState.FINISHED:
            assert app.request is not None
            assert app.done_at is not None
            assert app.started_at is not None
            held_until = min(app.done_at + self.fair_start, app.started_at + app.request.duration)
            hosts = sum(app.request.nodes.values())
            self._ghost += hosts * (held_until - app.done_at)
            del self._table[app_id]
        elif state is AppState.STARTED and app.state is not AppState.STARTED:
            assert app.request is not None
            self._table[app_id] = app.model_copy(update={"state": state, "started_at": now})
            launcher.seq += 1
            self.wire.start(launcher.seq, now, app_id, app.request)
            launcher.outcome.start, launcher.outcome.request = now, app.request
            run = launcher.app.run_time(app.request.duration)
            self._used += run * sum(app.request.nodes.values())
            self._push(now + run, _DONE, app_id)
        elif state is not app.state:
            self._table[app_id] = app.model_copy(update={"state": state})
        estimate = plan.outcomes[app_id].estimated_start
        if state is AppState.WAITING and estimate != launcher.estimate:
            launcher.estimate = estimate
            self._estimated.add(app_id)
            if app_id not in plan.changed:  # the bridge tells a new estimate alone too
                self._tell(launcher, now, [], estimate)

    def _notify(self, app_id: str, plan: Plan, now: int) -> None:
        """A change event with the clusters whose part of the view changed since last sent;
        quiet, none when they all lie past the horizon of the launcher's choice (a new estimate
        is still told)."""
        launcher = self._launchers[app_id]
        view = plan.view(app_id)
        estimate = plan.outcomes[app_id].estimated_start
        request = self._table[app_id].request
        if self.quiet and unheeded(
            launcher.sent, launcher.sent_at, view, request, launcher.horizon, now
        ):
            self._unheeded += 1
            if app_id in self._estimated:
                self._estimates_alone += 1
                self._tell(launcher, now, [], estimate)
            return
        changes = availability_changes(launcher.sent, view, now, deltas=self.quiet)
        launcher.sent, launcher.sent_at = view, now
        launcher.horizon = None
        self._tell(launcher, now, changes, estimate)
        self._receive(launcher, view, now)

    def _tell(
        self, launcher: _Launcher, now: int, changes: list[Change], estimate: int | None
    ) -> None:
        launcher.seq += 1
        launcher.outcome.change_events += 1
        self.wire.change(launcher.seq, now, changes, estimate)

    def _due(self, plan: Plan, now: int) -> list[int]:
        """When a pass has work even if nothing is sent: a start or a ghost's end."""
        times = [o.estimated_start for o in plan.outcomes.values() if o.estimated_start]
        times += [o.hold_until for o in plan.outcomes.values() if o.hold_until]
        later = [t for t in times if t is not None and t > now]
        return [min(later)] if later else []

    # -- queues -------------------------------------------------------------------------------

    def _push(self, time: int, kind: int, app_id: str) -> None:
        self._sequence += 1
        heapq.heappush(self._events, (time, kind, self._sequence, app_id))

    def _want(self, time: int) -> None:
        heapq.heappush(self._wants, time)

    def _pass_time(self) -> int | None:
        if not self._wants:
            return None
        wanted = self._wants[0]
        if self._last_pass is None:
            return wanted
        return max(wanted, self._last_pass + self.interval)
