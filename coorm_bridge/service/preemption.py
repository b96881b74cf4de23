"""Which hosts preemptible work may use, and which it uses (API v2).

Preemptible requests hold nothing in a batch system: the bridge names their hosts itself, from
the last snapshot (up, running nothing, in no reservation), and remembers them between passes,
so that a new placeholder avoids them (a batch system sees them idle until a job runs there) or
takes first those a preemption named, and so that the owner's jobs on them are not load to the
views. Apart from the pass (:mod:`.evolving_pass`), which decides with it and writes what it
decided.
"""

from __future__ import annotations

from collections.abc import Mapping

from coorm_bridge.core.batch import JobState, NodeState
from coorm_bridge.core.policy import Plan
from coorm_bridge.core.preemptible import Claim, Running, Waiting
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import PLACED, AppState
from coorm_bridge.core.typed import RequestType
from coorm_bridge.service.enactor import Cancel
from coorm_bridge.service.polling import Poller
from coorm_bridge.store import SessionRow, Store

PA, PRE = RequestType.PRE_ALLOCATION, RequestType.PREEMPTIBLE
_ZERO = Profile.constant(0)


class HostBook:
    """The hosts of preemptible work, per cluster, as of the last pass."""

    def __init__(self, *, store: Store, poller: Poller, grace: int = 0) -> None:
        self.store = store
        self.poller = poller
        self.grace = grace
        """Seconds of notice a preemption gives (``[policy] preempt_grace``)."""
        self._preemptible_hosts: dict[str, frozenset[str]] = {}
        """Per cluster, the hosts started preemptible requests use."""
        self._given_back: dict[str, tuple[str, ...]] = {}
        """Per cluster, the hosts preemptions named (theirs to give back by a deadline)."""
        self._reclaimed: dict[str, Cancel] = {}
        """Per killed preemptible request, its cancellation while the last snapshot still shows
        its owner's jobs on its hosts: asked again at each pass until they are gone (a pass
        may replace the enactor's intents before it got to one)."""
        self._pa_hosts: dict[str, tuple[str, ...]] = {}
        """Started pre-allocations' hosts read this pass (a started one's hosts do not change:
        one store read a pass, not one for each time the pass asks)."""

    def new_pass(self) -> None:
        self._pa_hosts.clear()

    def reclaims(self, cluster: str) -> bool:
        """Whether preemptible work uses hosts of ``cluster`` (as of the last pass): started
        requests, or killed ones whose jobs still run there. The bridge takes those hosts back
        itself, so a placeholder refused there drops the batch system's hint ("retry when the
        jobs there end": Slurm's, at their time limit), which would put the placement, and so
        the preemption, off to the work's own end."""
        reclaimed = any(c.cluster == cluster for c in self._reclaimed.values())
        return bool(self._preemptible_hosts.get(cluster)) or reclaimed

    def cancels(self) -> list[tuple[str, Cancel]]:
        """The cancellations still due, by the request killed (see ``_reclaimed``)."""
        return list(self._reclaimed.items())

    def _still_running(self, cancel: Cancel) -> bool:
        jobs = self.poller.owners_jobs_on(cancel.cluster, cancel.owner, cancel.hosts)
        return jobs is None or bool(jobs)

    def unused(self, pa: SessionRow, children: list[SessionRow]) -> list[str]:
        """A started pre-allocation's hosts that no request started inside it uses."""
        hosts = self._pa_hosts.get(pa.id)
        if hosts is None:
            held = self.store.placeholder(pa.id, pa.clusters[0])
            if held is None:
                return []
            hosts = self._pa_hosts[pa.id] = held.host_names
        used = {
            host
            for c in children
            if c.typed is not None and c.typed.inside == pa.name and c.state is AppState.STARTED
            for host in c.typed.host_names
        }
        return [host for host in hosts if host not in used]

    def hosts_for(self, row: SessionRow, cluster: str, hosts: int, start: int) -> tuple[str, ...]:
        """Hosts for a placeholder of ``row`` starting at ``start``, named when preemptible work
        runs on ``cluster`` now: idle ones it does not use, so that the placeholder does not
        land on hosts a preemptible request keeps (the batch system sees them idle when no job
        of its runs there yet). Empty: let the batch system choose (the usual case)."""
        shot = self.poller.status(cluster).snapshot
        if shot is None or start > shot.time + 60:
            return ()
        used = self._preemptible_hosts.get(cluster)
        if not used:
            return ()
        given = self._given_back.get(cluster, ())
        busy = {h for j in shot.jobs if j.state is JobState.RUNNING for h in j.host_names}
        busy |= {h for r in shot.reservations if r.start <= start < r.end for h in r.host_names}
        free = [n.name for n in shot.nodes if n.state is NodeState.UP and n.name not in busy]
        # Those a preemption named first (theirs from the deadline), then idle ones.
        idle = [h for h in given if h in free] + [h for h in free if h not in used]
        return tuple(idle[:hosts]) if len(idle) >= hosts else ()

    def remember(self, rows: list[SessionRow], cancelled: Mapping[str, Cancel]) -> None:
        """Per cluster, the hosts preemptible work uses and those it was told to give back:
        what a new placeholder avoids, or takes first (:meth:`hosts_for`)."""
        used: dict[str, set[str]] = {}
        given: dict[str, list[str]] = {}
        for c in rows:
            if c.typed is None or c.typed.type is not PRE or c.state is not AppState.STARTED:
                continue
            used.setdefault(c.clusters[0], set()).update(c.typed.host_names)
            given.setdefault(c.clusters[0], []).extend(c.typed.give_back)
        self._preemptible_hosts = {cluster: frozenset(h) for cluster, h in used.items()}
        self._given_back = {cluster: tuple(h) for cluster, h in given.items() if h}
        reclaimed = {**self._reclaimed, **cancelled}
        self._reclaimed = {k: c for k, c in reclaimed.items() if self._still_running(c)}

    def hold(
        self, free: dict[str, Profile], rows: Mapping[str, SessionRow], now: int
    ) -> dict[str, Profile]:
        """``free`` beside preemptible work: a started preemptible request's hosts are held
        until it must give them back (a preemption's deadline, or :attr:`grace` from now), so
        that a request needing them is placed no earlier and the work is told that long ahead;
        from then on the owner's jobs there (outside reservations) are load to the batch
        system, not to the views: the bridge takes those hosts back when it must."""
        held = dict(free)
        for row in rows.values():
            typed = row.typed
            if typed is None or typed.type is not PRE or row.state is not AppState.STARTED:
                continue
            cluster = row.clusters[0]
            if cluster not in held:
                continue
            jobs = self.poller.owners_jobs_on(cluster, row.owner, typed.host_names) or []
            ends = {
                host: job.end
                for job in jobs
                if job.state is JobState.RUNNING and job.end is not None
                for host in job.host_names
            }
            given = set(typed.give_back) if typed.preempt_by is not None else set()
            profile = held[cluster]
            for host in typed.host_names:
                until = typed.preempt_by if host in given else now + self.grace
                assert until is not None
                end = ends.get(host, now)  # an idle host is free in the snapshot from now
                if end > until:
                    profile = profile.add(1, until, end)  # the bridge takes it back then
                elif end < until:
                    profile = profile.add(-1, max(end, now), until)
            held[cluster] = profile
        return held

    def pool(
        self, plan: Plan, parents: Mapping[str, list[SessionRow]], now: int
    ) -> dict[str, Profile]:
        """What preemptible work may use per cluster: what the v1 pass leaves free, and the
        hosts started preemptible requests hold until they must give them back (:meth:`hold`
        kept them from the v1 pass until then).

        Not the unused hosts of started pre-allocations, which the slides lend too: a
        borrower's jobs there would have to run inside the pre-allocation's reservation, which
        admits only its owner (Slurm and the mock), so they would wait there until taken back.
        Lending them needs the reservation to admit the borrower first."""
        pool = dict(plan.left)
        for rows in parents.values():
            for row in rows:
                typed = row.typed
                if typed is None or typed.type is not PRE or row.state is not AppState.STARTED:
                    continue
                cluster = row.clusters[0]
                if cluster not in pool:
                    continue
                given = set(typed.give_back) if typed.preempt_by is not None else set()
                for host in typed.host_names:
                    until = typed.preempt_by if host in given else now + self.grace
                    assert until is not None
                    pool[cluster] = pool[cluster].add(1, now, until)
        return pool

    def idle(self, cluster: str, children: Mapping[str, list[SessionRow]], now: int) -> list[str]:
        """Hosts of ``cluster`` that run nothing now and no reservation holds (the last
        snapshot), less those that preemptible requests already use."""
        shot = self.poller.status(cluster).snapshot
        taken = {
            host
            for rows in children.values()
            for c in rows
            if c.typed is not None and c.typed.type is PRE and c.state is AppState.STARTED
            for host in c.typed.host_names
        }
        idle: list[str] = []
        if shot is not None:
            busy = {h for j in shot.jobs if j.state is JobState.RUNNING for h in j.host_names}
            busy |= {h for r in shot.reservations if r.start <= now < r.end for h in r.host_names}
            idle = [n.name for n in shot.nodes if n.state is NodeState.UP and n.name not in busy]
        return [h for h in dict.fromkeys(idle) if h not in taken]


def to_give(hosts: tuple[str, ...], named: tuple[str, ...], count: int) -> tuple[str, ...]:
    """Which ``count`` of ``hosts`` to give back: those named already (the preemption told
    stays as it was), then the last ones."""
    kept = [h for h in named if h in hosts][:count]
    rest = [h for h in reversed(hosts) if h not in kept]
    return tuple(kept + rest[: count - len(kept)])


def preemptible_on(rows: list[SessionRow], cluster: str) -> list[SessionRow]:
    return [
        c for c in rows if c.typed is not None and c.typed.type is PRE and c.clusters == (cluster,)
    ]


def claim(rows: list[SessionRow], now: int) -> Claim:
    """An application's preemptible requests on one cluster, as the core policy reads them."""
    claim = Claim()
    for c in rows:
        assert c.request is not None
        if c.state is AppState.STARTED and c.started_at is not None and c.alloc_end is not None:
            claim.running.append(Running(c.name or "", c.request.hosts, c.started_at, c.alloc_end))
        elif c.state in PLACED:
            claim.waiting.append(Waiting(c.name or "", c.request.hosts, c.request.duration, now))
    return claim
