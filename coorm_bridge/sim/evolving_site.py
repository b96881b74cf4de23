"""The platform of ``coorm-sim evolving``: one cluster under background load, and the bridge's
placeholders on it.

One cluster runs the mock's local batch scheduler (conservative backfilling, per-host plan)
replaying a stretch of a shipped SWF trace (:mod:`.coupling.background`, the same machinery as
``coalloc``). The AMR code's allocations are the bridge's placeholders: advance reservations
named with the bridge's prefix, held at once at the start the policy computed (the daemon's
``hold_first``) and moved earlier when the policy finds an earlier start. The parameter sweep
holds nothing in the batch system (best-effort work), so the scheduler never sees it.

Every strategy and the baseline replay exactly the same :class:`World`: the only difference
between two runs is what the strategy did, and the background's delay is measured against the
baseline job by job, as ``coalloc`` does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from coorm_bridge.batchsim import LocalScheduler
from coorm_bridge.core.batch import ClusterSnapshot, JobState, Refused, ReservationSpec
from coorm_bridge.core.occupancy import free_profile
from coorm_bridge.core.profile import Profile
from coorm_bridge.sim.coupling.background import TraceSource, segment
from coorm_bridge.sim.coupling.platform import BACKGROUND, BackgroundJob

#: The bridge's placeholder prefix (the daemon's default instance prefix is alike).
PREFIX = "coorm-"
#: Who runs the AMR code (the users its placeholders admit).
OWNER = "amr"
CLUSTER = "alpha"
#: The platform's first second (any fixed time: runs must not depend on the clock).
EPOCH = 1_700_000_000
HOUR = 3600
#: The shipped traces a run may replay, and how (as ``coalloc``'s clusters do).
TRACES = {
    "nasa": TraceSource("nasa", 1, 1.5),
    "lublin": TraceSource("lublin", 2, 0.85),
}


@dataclass(frozen=True)
class World:
    """One seed's input, the same for every strategy and for the baseline."""

    hosts: int
    background: tuple[BackgroundJob, ...]
    start: int
    arrival: int
    """When the AMR code and the parameter sweep arrive."""
    needs: tuple[int, ...]
    """The AMR code's hosts per period (it learns each at the period's start)."""
    peak: int
    period: int
    restart: int
    task: int
    """A sweep task's length (one host each)."""
    window: int
    """The sweep runs tasks that end within this long after its arrival."""

    @property
    def until(self) -> int:
        return self.arrival + self.window


def make_world(
    *,
    seed: int,
    trace: str,
    hosts: int,
    load: float,
    warmup: int,
    tail: int,
    needs: tuple[int, ...],
    peak: int,
    period: int,
    restart: int,
    task: int,
    window: int,
) -> World:
    """The seed's world: its trace stretch and the arrival (random in the 6 h after warm-up)."""
    rng = random.Random(seed)  # noqa: S311 - reproducible, not cryptography
    start = EPOCH
    arrival = start + warmup + rng.randrange(6 * HOUR)
    jobs = segment(TRACES[trace], hosts, rng, start=start, length=arrival - start + tail, load=load)
    return World(
        hosts=hosts,
        background=tuple(jobs),
        start=start,
        arrival=arrival,
        needs=needs,
        peak=peak,
        period=period,
        restart=restart,
        task=task,
        window=window,
    )


@dataclass(frozen=True)
class Held:
    """A placeholder the bridge holds: the reservation's window."""

    name: str
    start: int
    end: int
    hosts: int


class Site:
    """The cluster of one run: its scheduler with the background queued as future arrivals."""

    def __init__(self, world: World) -> None:
        self.world = world
        names = [f"{CLUSTER}-{i}" for i in range(world.hosts)]
        self.scheduler = LocalScheduler(CLUSTER, names, start=world.start)
        for job in world.background:
            self.scheduler.submit(job.spec, at=job.at)
        self.held: dict[str, Held] = {}
        """Placeholders by the request they hold for."""
        self._shot: ClusterSnapshot | None = None
        self._capacity: dict[str, Profile] | None = None

    @property
    def now(self) -> int:
        return self.scheduler.now

    def advance(self, until: int) -> None:
        """Move to ``until``; the snapshot is taken again only if the scheduler changed (between
        its events nothing moves: pending jobs keep their predicted starts)."""
        due = self.scheduler.next_event_time()
        self.scheduler.advance(until)
        if due is not None and due <= until:
            self._changed()

    def _changed(self) -> None:
        self._shot = self._capacity = None

    def next_event(self) -> int | None:
        return self.scheduler.next_event_time()

    def finish(self) -> None:
        """Run until nothing is left: every background job has started and ended."""
        while (t := self.scheduler.next_event_time()) is not None:
            self.scheduler.advance(t)

    def snapshot(self) -> ClusterSnapshot:
        """The scheduler's state now (taken again only once something changed)."""
        if self._shot is None:
            self._shot = self.scheduler.snapshot()
        return self._shot

    def capacity(self) -> dict[str, Profile]:
        """The policy's input: hosts the batch system leaves free over time, the bridge's own
        placeholders not counted (the policy accounts for the requests they hold)."""
        if self._capacity is None:
            self._capacity = {CLUSTER: free_profile(self.snapshot(), PREFIX)}
        return self._capacity

    def idle(self) -> int:
        """Hosts that run no job and that no reservation holds now: where best-effort work
        may run without anyone's leave."""
        shot = self.snapshot()
        now = self.now
        busy = sum(
            job.hosts
            for job in shot.jobs
            if job.state is JobState.RUNNING and job.reservation is None
        )
        busy += sum(r.hosts for r in shot.reservations if r.start <= now < r.end)
        return len(shot.nodes) - busy

    def hold(self, request: str, start: int, duration: int, hosts: int) -> int | None:
        """Hold (or move earlier) the placeholder of ``request`` at ``start``; returns the
        batch system's hint when it refuses (the placeholder, if any, stays as it was)."""
        held = self.held.get(request)
        if held is not None and held.start <= start:
            return None  # the placeholder is the promise: never moved later
        name = f"{PREFIX}{request}"
        spec = ReservationSpec(
            name=name, start=start, end=start + duration, hosts=hosts, users=(OWNER,)
        )
        try:
            if held is None:
                self.scheduler.create_reservation(spec)
            else:
                self.scheduler.update_reservation(spec)
        except Refused as refusal:
            return refusal.retry_after
        self.held[request] = Held(name, start, start + duration, hosts)
        self._changed()
        return None

    def release(self, request: str) -> None:
        """The request is done or withdrawn: its placeholder goes at once."""
        held = self.held.pop(request, None)
        if held is not None and held.end > self.now:
            self.scheduler.delete_reservation(held.name)
            self._changed()


def background_starts(site: Site) -> dict[str, tuple[int, int]]:
    """Each background job's ``(start, hosts)`` on a site run to its end."""
    site.finish()
    return {
        record.id: (record.start, record.hosts)
        for record in site.scheduler.records()
        if record.id.startswith(BACKGROUND) and record.start is not None
    }


def baseline(world: World) -> dict[str, tuple[int, int]]:
    """The background without the AMR code and the sweep."""
    return background_starts(Site(world))


def background_delay(
    base: dict[str, tuple[int, int]], now: dict[str, tuple[int, int]]
) -> dict[str, float | int]:
    """Background jobs started later than in the baseline: how many, and node-hours of delay
    (jobs started earlier are not netted: an advance for one user does not repay another's
    wait)."""
    delayed = 0
    node_s = 0
    for key, (before, hosts) in base.items():
        after = now.get(key, (before, hosts))[0]
        if after > before:
            delayed += 1
            node_s += hosts * (after - before)
    return {"bg_delayed_jobs": delayed, "bg_delay_node_h": node_s / HOUR}
