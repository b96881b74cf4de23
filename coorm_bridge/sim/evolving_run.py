"""One strategy of ``coorm-sim evolving`` on one seed's world, event by event.

The AMR code's requests are placed by the project's CooRMv2 policy
(:func:`coorm_bridge.core.policy_v2.plan`, a pure function of the free hosts the batch system
leaves and the table of typed requests) at each event: a placed request is held at once as a
placeholder at the start the policy gives (:class:`~.evolving_site.Site`), and starts when its
placeholder does; a non-preemptible request the policy starts inside the started
pre-allocation (a spontaneous update) starts at once and holds nothing more. ``fair_start`` is
0: no other bridge application competes for the hosts, so a ghost would only keep them idle.

The parameter sweep (PSA) runs on hosts nobody holds, as best-effort work the batch system does
not see: a host that runs no job and that no reservation holds. A local job or a placeholder
that starts there kills the task at once, without notice. That is all it gets under ``peak`` and
``v1-resubmit`` (a site's best-effort jobs today: it takes every idle host, knowing nothing of
what comes). Under ``v2`` it is a CooRMv2 application of its own asking for preemptible hosts:
its pool is what the policy leaves free plus the pre-allocation's unused hosts
(``PlanV2.pool``, all of it its share as the only such application); it starts a batch of
tasks (one preemptible request) on as many hosts as the pool keeps free for a whole task,
gives hosts back at each preemption's deadline (tasks killed), and is killed at once, like
best-effort work, when a local job takes a host the views did not see coming (a new arrival
backfilled there, a job starting earlier than predicted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coorm_bridge.core.policy_v2 import PlanV2, plan
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.typed import (
    EvolvingApplication,
    RequestRow,
    RequestStatus,
    RequestType,
    TypedRequest,
)
from coorm_bridge.sim.amr import Progress
from coorm_bridge.sim.evolving_amr import LAUNCHERS, Launcher
from coorm_bridge.sim.evolving_ledger import HOUR, Bag, Batch, Ledger, State
from coorm_bridge.sim.evolving_site import CLUSTER, Site, World, background_delay, background_starts

PENDING, STARTED, DONE = RequestStatus.PENDING, RequestStatus.STARTED, RequestStatus.DONE
PA, PRE = RequestType.PRE_ALLOCATION, RequestType.PREEMPTIBLE
AMR, PSA = "amr", "psa"
_ZERO = Profile.constant(0)


@dataclass
class Run:
    """One strategy's run; :meth:`play` does it, :meth:`metrics` says what came of it."""

    world: World
    strategy: str
    record: bool = False
    """Keep :attr:`trace` (for tests): per pass, (time, sweep hosts, idle hosts, lent, held)."""
    site: Site = field(init=False)
    amr: Progress = field(init=False)
    launcher: Launcher = field(init=False)
    bag: Bag = field(init=False)
    ledger: Ledger = field(init=False)
    rows: list[RequestRow] = field(default_factory=list)
    """The AMR code's requests, in the order it sent them."""
    trace: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    _soon: set[int] = field(default_factory=set)
    _rows: dict[str, RequestRow] = field(default_factory=dict)
    _count: int = 0

    def __post_init__(self) -> None:
        world = self.world
        self.site = Site(world)
        self.amr = Progress(world.needs, world.period, world.restart)
        self.launcher = LAUNCHERS[self.strategy](self.amr, world.peak)
        self.bag = Bag(world.task, world.until)
        self.ledger = Ledger(world.arrival)

    @property
    def v2(self) -> bool:
        return self.strategy == "v2"

    # -- what the launcher may do (Requests) ----------------------------------------------------

    def send(self, kind: RequestType, hosts: int, duration: int) -> str:
        self._count += 1
        request = TypedRequest(
            id=f"r{self._count}", cluster=CLUSTER, hosts=hosts, duration=duration, type=kind
        )
        self.rows.append(RequestRow(request=request))
        return request.id

    def done(self, request: str) -> None:
        now = self.site.now
        self._replace(request, status=DONE, done_at=now)
        self.site.release(request)
        # With fair_start 0 a done request holds nothing from now on; the pre-allocation stays
        # while requests inside it are listed (they name it).
        inside = {row.inside for row in self.rows if row.status is not DONE}
        self.rows = [row for row in self.rows if row.status is not DONE or row.id in inside]

    def withdraw(self, request: str) -> None:
        self.rows = [row for row in self.rows if row.id != request]
        self.site.release(request)

    def _replace(self, request: str, **fields: object) -> None:
        self.rows = [
            row.model_copy(update=fields) if row.id == request else row for row in self.rows
        ]

    # -- the run --------------------------------------------------------------------------------

    def play(self) -> Run:
        """Run from the arrival until the code has finished and the sweep's window is over."""
        site, world = self.site, self.world
        site.advance(world.arrival)
        self.launcher.arrive(self, world.arrival)
        while True:
            self._pass(site.now)
            if self.amr.finished and site.now >= world.until:
                break
            site.advance(self._next(site.now))
        return self

    def _pass(self, now: int) -> None:
        """Everything due at ``now``: ended tasks and periods, placements, the sweep."""
        self.bag.complete(now)
        if self.amr.reach(now):
            self.launcher.period(self, now)
        outcome = self._place(now)
        idle = self.site.idle()
        lendable = self._lendable()
        if self.v2:
            assert outcome is not None
            self._preemptible(outcome, now, idle + lendable)
        else:
            self.bag.kill(now, self.bag.hosts - idle)  # best-effort: killed without notice
            self.bag.start(now, idle - self.bag.hosts)
        if self.bag.hosts > idle + lendable:
            raise AssertionError(f"the sweep runs on hosts nobody lent it at {now}")
        lent = min(max(0, self.bag.hosts - idle), lendable)
        held, used = self._held(), self.amr.need if self.amr.running else 0
        self.ledger.record(now, State(held=held, used=used, sweep=self.bag.hosts, lent=lent))
        if self.record:
            self.trace.append((now, self.bag.hosts, idle, lent, held))

    def _next(self, now: int) -> int:
        """The next moment something may change."""
        candidates = [
            self.site.next_event(),
            self.amr.milestone(),
            self.bag.next_end(),
            self.world.until,
            *self._soon,
            *(held.start for held in self.site.held.values()),
        ]
        later = [t for t in candidates if t is not None and t > now]
        if not later:
            raise RuntimeError(f"{self.strategy}: nothing will ever happen after {now}")
        self._soon = {t for t in self._soon if t > now}
        return min(later)

    # -- placing the AMR code's requests --------------------------------------------------------

    def _plan(self, now: int, extra: RequestRow | None = None) -> PlanV2:
        apps = [
            EvolvingApplication(id=AMR, order=0, clusters=(CLUSTER,), requests=tuple(self.rows))
        ]
        if self.v2:
            rows = [self._row_of(batch) for batch in self.bag.running]
            if extra is not None:
                rows.append(extra)
            psa = EvolvingApplication(id=PSA, order=1, clusters=(CLUSTER,), requests=tuple(rows))
            apps.append(psa)
        return plan(self.site.capacity(), apps, now, fair_start=0)

    def _row_of(self, batch: Batch) -> RequestRow:
        """A started batch of sweep tasks as the policy reads it (kept while it holds as many
        hosts: rows are immutable)."""
        row = self._rows.get(batch.id)
        if row is None or row.held != batch.hosts:
            row = self._rows[batch.id] = _running_row(batch, self.bag.task)
        return row

    def _place(self, now: int) -> PlanV2 | None:
        """Plan until nothing more starts or moves now; the last plan (None: nothing to plan
        this pass, as with only started requests and no sweep in the table)."""
        last: PlanV2 | None = None
        for _ in range(16):
            if not self.v2 and all(row.status is not PENDING for row in self.rows):
                return last
            last = self._plan(now)
            if not self._apply(last, now):
                return last
        raise RuntimeError(f"{self.strategy}: placement does not settle at {now}")

    def _apply(self, outcome: PlanV2, now: int) -> bool:
        """Hold, move or start the pending requests as the plan says; whether anything did."""
        changed = False
        decided = outcome.decisions[AMR]
        for row in list(self.rows):
            decision = decided.get(row.id)
            if row.status is not PENDING or decision is None or decision.estimated_start is None:
                continue
            if decision.inside is not None:  # a spontaneous update: starts at once, inside
                self._start(row.id, now, decision.inside)
                changed = True
                continue
            if self.v2 and row.request.type is not PA:
                raise AssertionError(f"{row.id} did not fit in the pre-allocation at {now}")
            before = self.site.held.get(row.id)
            r = row.request
            hint = self.site.hold(row.id, decision.estimated_start, r.duration, r.hosts)
            if hint is not None:
                self._soon.add(hint)
            held = self.site.held.get(row.id)
            changed |= held != before
            if held is not None and held.start <= now:
                self._start(row.id, held.start, None)
                changed = True
        return changed

    def _start(self, request: str, at: int, inside: str | None) -> None:
        row = next(row for row in self.rows if row.id == request)
        self._replace(request, status=STARTED, started_at=at, held=row.request.hosts, inside=inside)
        self.launcher.started(self, self.site.now, request)

    def _held(self) -> int:
        """Hosts the code's started allocations hold (a request inside a pre-allocation takes
        nothing more)."""
        return sum(
            row.request.hosts for row in self.rows if row.status is STARTED and row.inside is None
        )

    def _lendable(self) -> int:
        """The started pre-allocation's hosts that no request inside it uses."""
        lend = 0
        for pa in self.rows:
            if pa.request.type is PA and pa.status is STARTED:
                inside = sum(
                    r.request.hosts for r in self.rows if r.inside == pa.id and r.status is STARTED
                )
                lend += pa.request.hosts - inside
        return lend

    # -- the sweep under v2 ---------------------------------------------------------------------

    def _preemptible(self, outcome: PlanV2, now: int, room: int) -> None:
        """Preemptions due, kills past what the hosts allow (``room``), a new batch."""
        bag = self.bag
        for told in outcome.preemptions.get(PSA, ()):
            if told.deadline <= now:
                bag.kill(now, told.hosts, told.request)
            else:
                self._soon.add(told.deadline)
        bag.kill(now, bag.hosts - room)  # a host taken that no view foresaw
        if not bag.can_start(now):
            return
        running = _ZERO
        for each in bag.running:
            running = running.add(each.hosts, now, each.end)
        free = (outcome.pool[CLUSTER] - running).min_over(now, now + bag.task)
        hosts = min(free, room - bag.hosts)
        if hosts <= 0:
            return
        ask = TypedRequest(
            id=bag.next_id(), cluster=CLUSTER, hosts=hosts, duration=bag.task, type=PRE
        )
        again = self._plan(now, RequestRow(request=ask))
        decision = again.decisions[PSA].get(ask.id)
        if decision is None or not decision.starts_now:
            return
        batch = bag.start(now, hosts)
        assert batch is not None
        assert batch.id == ask.id
        for told in again.preemptions.get(PSA, ()):
            self._soon.add(max(now + 1, told.deadline))

    # -- what came of it -----------------------------------------------------------------------

    def metrics(self, base: dict[str, tuple[int, int]]) -> dict[str, float | int]:
        """The run's figures (hours and node-hours), the background's delay against ``base``."""
        amr, world, ledger, bag = self.amr, self.world, self.ledger, self.bag
        assert amr.first is not None
        assert amr.end is not None
        computing = len(world.needs) * world.period + amr.restarts * world.restart
        return {
            "start_h": (amr.first - world.arrival) / HOUR,
            "end_h": (amr.end - world.arrival) / HOUR,
            "wait_h": (amr.end - world.arrival - computing) / HOUR,
            "restarts": amr.restarts,
            "held_node_h": ledger.held_s / HOUR,
            "amr_unused_node_h": ledger.unused_s / HOUR,
            "idle_held_node_h": ledger.idle_held_s / HOUR,
            "psa_tasks": bag.completed,
            "psa_node_h": bag.completed * bag.task / HOUR,
            "psa_lent_node_h": ledger.lent_s / HOUR,
            "psa_killed": bag.killed,
            "psa_lost_node_h": bag.lost_s / HOUR,
            **background_delay(base, background_starts(self.site)),
        }


def _running_row(batch: Batch, duration: int) -> RequestRow:
    typed = TypedRequest(
        id=batch.id, cluster=CLUSTER, hosts=batch.asked, duration=duration, type=PRE
    )
    return RequestRow(request=typed, status=STARTED, started_at=batch.start, held=batch.hosts)


def run(world: World, strategy: str, *, record: bool = False) -> Run:
    """Play ``strategy`` on ``world``."""
    return Run(world, strategy, record=record).play()
