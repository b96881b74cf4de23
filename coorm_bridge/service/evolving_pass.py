"""The v2 part of each pass: evolving applications' two views, preemptible work, and endings.

The v1 policy places every request held in a batch system (pre-allocations, non-preemptible
requests, announced updates: rows of their own, :mod:`.evolving`), each at its application's
place in the order; the view at the application's own place is its non-preemptible view. Its
preemptible view is its equi-partitioned share (:mod:`coorm_bridge.core.preemptible`) of what
the v1 pass leaves free (``Plan.left``; not the unused hosts of started pre-allocations, which
a borrower could not run jobs on: :meth:`.preemption.HostBook.pool`). A pending preemptible
request starts when its application's share covers it now, on hosts that run nothing; a started
one whose share falls below what it holds is told to give hosts back by then (``preempt``), and
past that deadline it ends (``killed``) and the enactor cancels its owner's jobs on its hosts.
Everything here is written in the pass's transaction and calls no batch system.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from coorm_bridge.core.messages import Allocation, availability_changes
from coorm_bridge.core.model import MAX_TIME
from coorm_bridge.core.policy import Plan
from coorm_bridge.core.preemptible import Outcome, share_cluster
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import ACTIVE, FINAL, PLACED, AppState
from coorm_bridge.core.typed import Relation, RequestType
from coorm_bridge.service import coalloc
from coorm_bridge.service.batchrules import BatchRules
from coorm_bridge.service.enactor import Cancel
from coorm_bridge.service.polling import Poller
from coorm_bridge.service.preemption import HostBook, claim, preemptible_on, to_give
from coorm_bridge.service.recorder import Recorder
from coorm_bridge.store import SessionRow, Store

log = logging.getLogger(__name__)

PA, PRE = RequestType.PRE_ALLOCATION, RequestType.PREEMPTIBLE
_ZERO = Profile.constant(0)


Views = tuple[dict[str, Profile], dict[str, Profile]]


def in_v1_table(row: SessionRow) -> bool:
    """Rows the v1 policy places and holds: v1 sessions, evolving applications' sessions (they
    send no request there: their place gives their non-preemptible view) and the requests held
    in batch systems (not one inside a pre-allocation, which takes nothing more, nor a
    preemptible one, which holds nothing)."""
    typed = row.typed
    return typed is None or (typed.type is not PRE and typed.inside is None)


class EvolvingPass:
    """Computes and tells evolving applications' views each pass; starts, preempts and ends
    the requests the batch systems do not hold."""

    def __init__(
        self,
        *,
        store: Store,
        rules: BatchRules,
        poller: Poller,
        recorder: Recorder,
        grace: int = 0,
    ) -> None:
        self.store = store
        self.rules = rules
        self.poller = poller
        self.recorder = recorder
        self._views: dict[str, Views] = {}
        self._sent: dict[str, Views] = {}
        self._told: dict[str, dict[str, int | None]] = {}
        self._shares: dict[str, dict[str, Profile]] = {}
        self._fresh: dict[str, SessionRow] = {}
        """Rows written during this pass, by id (the pass's lists hold them as they were)."""
        self._named: dict[tuple[str | None, str | None], SessionRow] = {}
        self._followed: set[tuple[str | None, str | None]] = set()
        self.book = HostBook(store=store, poller=poller, grace=grace)
        """The hosts of preemptible work (:mod:`.preemption`)."""
        self.due: list[int] = []
        """When the last pass's decisions need a pass again: deadlines and ends."""
        self.again = False
        """The last pass ended or started requests the batch systems do not hold: the shares
        change, so a pass is due at once."""

    def views_of(self, row: SessionRow) -> Views | None:
        """Both views of the last pass (clipped to what the owner may use)."""
        found = self._views.get(row.id)
        if found is None:
            return None
        shares = self._shares.get(row.id, {})
        pre = {c: shares[c] for c in row.clusters if c in shares}
        return found[0], self.rules.clip(row.owner, pre)

    # -- what the v1 table needs --------------------------------------------------------------

    def index(self, rows: Mapping[str, SessionRow]) -> None:
        """Requests by (application, request id), and those a waiting ``next`` one follows:
        built once per pass so that each request's look-ups cost nothing."""
        self._named = {
            (row.parent, name): row
            for row in rows.values()
            if row.parent is not None and row.name is not None
            for name, _ in coalloc.names(row)
        }
        self._followed = {
            (row.parent, row.typed.related_to)
            for row in rows.values()
            if row.typed is not None
            and row.typed.related_how is Relation.NEXT
            and row.state in PLACED
        }

    def placement(self, row: SessionRow, gap: int = 0) -> tuple[int | None, int | None]:
        """(not_before, ghost) of a request row in the v1 table (after :meth:`index`): a
        ``next`` request is placed no earlier than its related one's end (never while that one
        has not started; ``gap``: the batch system's, :meth:`Adapter.reservation_gap`), and a
        request with a ``next`` one waiting hands its hosts over at done, without a ghost."""
        typed = row.typed
        if typed is None:
            return None, None
        not_before = None
        if typed.related_how is Relation.NEXT and row.state in PLACED:
            related = self._related(row.parent, typed.related_to)
            if related is not None and related.state in FINAL and related.started_at is None:
                not_before = None  # it follows nothing now (withdrawn): placed as any request
            elif related is None or related.started_at is None or related.request is None:
                not_before = MAX_TIME
            else:
                # Its allocation's end as the start told it (a placeholder may end sooner).
                end = related.alloc_end or related.started_at + related.request.duration
                ends = related.done_at if related.done_at is not None else end
                # Done: its placeholder is released first; running: the batch system's gap.
                not_before = ends if related.done_at is not None else ends + gap
        followed = any((row.parent, name) in self._followed for name, _ in coalloc.names(row))
        ghost = 0 if followed else None
        return not_before, ghost

    def _related(self, parent: str | None, name: str | None) -> SessionRow | None:
        """The request a ``next`` one follows: among the active ones, or else ended (done
        without a ghost, it is finished before its update's placeholder has begun, OAR's
        lead, and the update still starts at its done)."""
        found = self._named.get((parent, name))
        if found is not None or parent is None or name is None:
            return found
        ended = coalloc.find(self.store.requests_of(parent), name)
        return None if ended is None else ended[0]

    # -- the session operations' writes -------------------------------------------------------

    def close(self, child: SessionRow, now: int, why: str | None = None) -> SessionRow:
        """End one request: withdrawn if pending; done if held in a batch system (its ghost
        follows); finished at once if it ran inside a pre-allocation or preemptibly (``why``:
        it was killed). Inside :meth:`Recorder.batch`."""
        typed = child.typed
        assert typed is not None
        if child.state in PLACED:
            return self.recorder.end(child, AppState.CANCELLED, now)
        if child.state is not AppState.STARTED:
            return child
        if typed.inside is None and typed.type is not PRE:
            if why is not None:
                return self.recorder.kill(child, why, now)
            if typed.type is PA:
                for inner in self.store.requests_of(child.parent or ""):
                    if inner.typed is not None and inner.typed.inside == child.name:
                        self.close(inner, now, f"its pre-allocation {child.name} ended")
            done = max(now, child.started_at or now)
            return self._write(child, now, state=AppState.FINISH_SENT, done_at=done)
        done_at = max(now, child.started_at or now)
        if why is not None:
            self.recorder.emit_for(child, {"type": "killed", "time": now, "reason": why})
        child = self._write(child, now, state=AppState.FINISHED, done_at=done_at)
        self.recorder.emit_for(child, {"type": "ended", "time": now, "state": child.state})
        return child

    def _write(self, child: SessionRow, now: int, **fields: object) -> SessionRow:
        fresh = self.recorder.update(child, now, **fields)
        self._fresh[fresh.id] = fresh
        return fresh

    def close_all(self, parent: SessionRow, now: int) -> None:
        """Before an application's session ends (done, withdrawn, set aside): each of its
        requests ends (inside the caller's :meth:`Recorder.batch`)."""
        for child in self.store.requests_of(parent.id):
            self.close(child, now)

    def give_back(
        self, child: SessionRow, hosts: int, now: int, chosen: Sequence[str] = ()
    ) -> SessionRow:
        """Keep running on fewer hosts: those the application chose go back, else those a
        preemption named first (a request that needs them may be placed there), then the last."""
        typed, request = child.typed, child.request
        assert typed is not None
        assert request is not None
        named = set(chosen or typed.give_back)
        names = sorted(typed.host_names, key=lambda host: host in named)  # stable: others first
        kept, given = tuple(names[: len(names) - hosts]), set(names[len(names) - hosts :])
        owed = tuple(host for host in typed.give_back if host not in given)
        if len(owed) > len(kept):  # more than it keeps cannot be owed
            owed = owed[: len(kept)]
        left = request.hosts - hosts
        typed = typed.model_copy(
            update={
                "host_names": kept,
                "give_back": owed,
                "preempt_by": typed.preempt_by if owed else None,
            }
        )
        smaller = request.model_copy(update={"nodes": {child.clusters[0]: left}})
        with self.recorder.batch():
            return self.recorder.update(child, now, request=smaller, typed=typed)

    # -- the pass -----------------------------------------------------------------------------

    def run(self, rows: dict[str, SessionRow], plan: Plan, now: int) -> list[tuple[str, Cancel]]:
        """Inside the pass's transaction, after v1's records: returns the cancellations due."""
        self.again, self.due, self._fresh = False, [], {}
        self.book.new_pass()
        parents = {sid: row for sid, row in rows.items() if row.evolving}
        children: dict[str, list[SessionRow]] = {sid: [] for sid in parents}
        for row in list(rows.values()):
            if row.parent is None:
                continue
            if row.parent not in parents:  # its application ended: so does the request
                rows[row.id] = self.close(row, now, None)
                continue
            children[row.parent].append(row)
        cancels: list[tuple[str, Cancel]] = []
        for sid, mine in children.items():
            settled = [self._settle(c, rows, now) for c in mine]
            for old, new in zip(mine, settled, strict=True):
                self.again |= new.state is not old.state
                typed = old.typed
                if typed is not None and typed.type is PRE and new.state is not old.state:
                    # Its time is up: what still runs there goes (its time limit should have).
                    cancel = Cancel(old.clusters[0], typed.host_names, parents[sid].owner)
                    cancels.append((old.id, cancel))
            mine[:] = [c for c in settled if c.state in ACTIVE]
            self.due += [
                c.alloc_end
                for c in mine
                if c.state is AppState.STARTED and c.alloc_end is not None and not in_v1_table(c)
            ]
        cancels += self._preemptible(parents, children, plan, now)
        for sid, parent in parents.items():
            self._tell(parent, [self._fresh.get(c.id, c) for c in children[sid]], plan, now)
        killed = dict(cancels)
        self.book.remember(
            [self._fresh.get(c.id, c) for mine in children.values() for c in mine], killed
        )
        # Asked again at each pass until the jobs are gone (level, not edge): a pass may
        # replace the enactor's intents before it got to one.
        cancels = list({**dict(self.book.cancels()), **killed}.items())
        if cancels:
            self.due.append(now + 1)
        for gone in self._views.keys() - parents.keys():
            self._views.pop(gone, None)
            self._sent.pop(gone, None)
            self._told.pop(gone, None)
        return cancels

    def _settle(self, child: SessionRow, rows: Mapping[str, SessionRow], now: int) -> SessionRow:
        """A request inside a pre-allocation ends with it, or at its own end."""
        typed = child.typed
        if typed is None or child.state is not AppState.STARTED:
            return child
        if typed.inside is not None:
            pa = self._named.get((child.parent, typed.inside))
            pa = None if pa is None else rows.get(pa.id, pa)
            if pa is None or pa.state is not AppState.STARTED:
                return self.close(child, now, f"its pre-allocation {typed.inside} ended")
        if (typed.inside is not None or typed.type is PRE) and (child.alloc_end or 0) <= now:
            return self.close(child, now, f"the allocation ended at {child.alloc_end} without done")
        return child

    def _preemptible(
        self,
        parents: Mapping[str, SessionRow],
        children: dict[str, list[SessionRow]],
        plan: Plan,
        now: int,
    ) -> list[tuple[str, Cancel]]:
        """Each cluster's pool shared among the applications asking for preemptible hosts
        there (:func:`~coorm_bridge.core.preemptible.share_cluster`, in subscription order):
        starts, preemptions, kills past a deadline; and every application's preemptible view
        (its share, or what nobody claims when it asks for nothing there)."""
        pool = self.book.pool(plan, children, now)
        cancels: list[tuple[str, Cancel]] = []
        self._shares = {sid: {} for sid in parents}
        for cluster, free in sorted(pool.items()):
            mine = {sid: preemptible_on(children[sid], cluster) for sid in parents}
            claims = {sid: claim(rows, now) for sid, rows in mine.items() if rows}
            outcomes, unclaimed = share_cluster(free.clamped(0), claims, now)
            idle = self.book.idle(cluster, children, now) if outcomes else []
            for sid in parents:
                outcome = outcomes.get(sid)
                self._shares[sid][cluster] = unclaimed if outcome is None else outcome.share
                if outcome is not None:
                    cancels += self._apply(parents[sid], mine[sid], outcome, idle, now)
        return cancels

    def _apply(
        self,
        parent: SessionRow,
        rows: list[SessionRow],
        outcome: Outcome,
        idle: list[str],
        now: int,
    ) -> list[tuple[str, Cancel]]:
        """One application's outcome on one cluster: a request told to give hosts back and past
        its deadline is killed (its owner's jobs there cancelled); others are told of a new
        deadline; waiting ones start when their share covers them now and hosts are idle."""
        cancels: list[tuple[str, Cancel]] = []
        owed = {p.request: p for p in outcome.preemptions}
        for child in rows:
            typed, name = child.typed, child.name
            assert typed is not None
            if child.state is AppState.STARTED:
                due = owed.get(name or "")
                told = typed.preempt_by
                if due is not None and told is not None and told <= now:
                    why = f"preempted: {len(typed.give_back)} hosts not given back by {told}"
                    self.close(child, now, why)
                    self.again = True
                    cancels.append(
                        (child.id, Cancel(child.clusters[0], typed.host_names, parent.owner))
                    )
                    continue
                deadline = None if due is None else due.deadline
                if deadline is not None and told is not None:
                    # Told once, a deadline never moves later: the request that needs the
                    # hosts may itself be put off (its placeholder refused while the work
                    # runs), and following it would put the preemption off with it.
                    deadline = min(deadline, told)
                give = to_give(typed.host_names, typed.give_back, 0 if due is None else due.hosts)
                if deadline is not None:  # told now, it is checked at the next second
                    self.due.append(max(deadline, now + 1))
                if (typed.preempt_by, typed.give_back) != (deadline, give):
                    new = typed.model_copy(update={"preempt_by": deadline, "give_back": give})
                    self._write(child, now, typed=new)
                    if due is not None:
                        event = {
                            "type": "preempt",
                            "time": now,
                            "hosts": len(give),
                            "deadline": deadline,
                            "host_names": list(give),
                        }
                        self.recorder.emit_for(child, event)
                continue
            start = outcome.starts.get(name or "")
            assert child.request is not None
            if start == now and len(idle) >= child.request.hosts:
                given, idle[:] = idle[: child.request.hosts], idle[child.request.hosts :]
                self._start(child, given, now)
                self.again = True
            elif start != child.estimated_start or child.state is AppState.REQUEST_SENT:
                self._write(child, now, state=AppState.WAITING, estimated_start=start)
        return cancels

    def _start(self, child: SessionRow, hosts: list[str], now: int) -> None:
        typed, request = child.typed, child.request
        assert typed is not None
        assert request is not None
        end = now + request.duration
        typed = typed.model_copy(update={"host_names": tuple(hosts)})
        if child.state is AppState.REQUEST_SENT:
            child = self._write(child, now, state=AppState.WAITING)
        child = self._write(
            child,
            now,
            state=AppState.STARTED,
            started_at=now,
            alloc_end=end,
            estimated_start=now,
            typed=typed,
        )
        allocations = {child.clusters[0]: Allocation(hosts=hosts)}
        self.recorder.emit_for(
            child, {"type": "start", "time": now, "end": end, "allocations": allocations}
        )
        log.info("preemptible request %s of %s started on %s", child.name, child.parent, hosts)

    # -- telling ------------------------------------------------------------------------------

    def _tell(self, parent: SessionRow, rows: list[SessionRow], plan: Plan, now: int) -> None:
        """One change event when either view or a waiting request's estimate changed.

        The preemptible view is told only for the clusters where the application asks for
        preemptible hosts: it is what everyone's requests leave, so it moves with any request
        anywhere, and telling every application every move would cost a pass one event per
        application (``GET /v2/sessions/{id}`` shows all of it)."""
        sent_np, sent_pre = self._sent.get(parent.id, ({}, {}))
        outcome = plan.outcomes.get(parent.id)
        known = self._views.get(parent.id)
        if known is None or outcome is None or outcome.view_changed:
            try:  # at its place in the order: what its next request would be placed in
                placed = plan.view(parent.id)
            except KeyError:
                placed = {}
            np_view = self.rules.clip(parent.owner, placed)
            changes = availability_changes(sent_np, np_view, now)
        else:  # the policy saw nothing before it move: its view is the one told
            np_view, changes = known[0], []
        self._views[parent.id] = (np_view, {})
        told = self._told.setdefault(parent.id, {})
        estimates = {
            name: c.estimated_start
            for c in rows
            if c.state in PLACED and c.name is not None
            for name, _ in coalloc.names(c)
            if told.get(name, -1) != c.estimated_start
        }
        asked = {c.clusters[0] for c in rows if c.typed is not None and c.typed.type is PRE}
        shares = self._shares.get(parent.id, {})
        pre_told = self.rules.clip(parent.owner, {c: shares[c] for c in asked if c in shares})
        pre_changes = availability_changes(sent_pre, pre_told, now)
        if changes or pre_changes or estimates:
            event = {
                "type": "change",
                "time": now,
                "changes": changes,
                "preemptible": pre_changes,
                "estimates": estimates or None,
            }
            self.recorder.emit(parent.id, event)
            told.update(estimates)
            self._sent[parent.id] = (np_view, pre_told)
