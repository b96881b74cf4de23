"""The placeholders' book: each session's reservations, held, moved, shrunk to a ghost, released.

The policy decides where and when an application runs; this module makes it hold in the batch
systems. Every change goes through the store first (a row in state REQUESTED before the batch
system is asked, RELEASING before a deletion), so that after a crash reconciliation
(:mod:`coorm_bridge.placement.reconcile`) knows what may exist.

Not thread-safe on its own: the bridge calls it under its lock. It calls batch systems, so never
from inside a store transaction (asserted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import (
    AdapterError,
    Refused,
    ReservationHandle,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.typed import Relation
from coorm_bridge.placement.coallocation import CoAllocationFailed, hold, placeholder_name
from coorm_bridge.store import Store
from coorm_bridge.store.rows import PlaceholderRow, PlaceholderStatus, SessionRow

log = logging.getLogger(__name__)

HELD = PlaceholderStatus.HELD
GHOST = PlaceholderStatus.GHOST
REQUESTED = PlaceholderStatus.REQUESTED
RELEASING = PlaceholderStatus.RELEASING


class Placeholders:
    """Holds, moves, shrinks and releases one session's placeholders on every cluster."""

    def __init__(self, adapter: Adapter, store: Store, prefix: str) -> None:
        self.adapter = adapter
        self.store = store
        self.prefix = prefix
        self.choose: Callable[[SessionRow, str, int, int], tuple[str, ...]] | None = None
        """Hosts to name for a new placeholder (row, cluster, hosts, start), or none: set by the
        composition root so that placeholders avoid hosts that preemptible work uses (API v2)."""
        self.reclaimed: Callable[[str], bool] | None = None
        """Whether preemptible work (API v2) uses hosts of a cluster now: set by the composition
        root. The bridge takes those hosts back itself (its jobs there are cancelled past the
        preemption's deadline), so a refusal's hint "retry when the jobs there end" (Slurm's,
        at their time limit) is dropped there: followed, it put the placement and so the
        preemption off until then, and the preempting session waited for the work it preempts."""

    # -- holding ------------------------------------------------------------------------------

    def ensure(self, row: SessionRow, start: int, now: int) -> dict[str, PlaceholderRow]:
        """Make ``row``'s placeholders hold its request over ``[start, start + duration)``.

        Existing placeholders are updated in place when they all exist (a batch system never sees
        a gap it could backfill); one that has begun, or begins within the adapter's lead, keeps
        its start and end (it cannot move; :meth:`stretch` lengthens it once its session
        starts, rather than at every look while it waits: OAR re-submits a container it has
        not launched yet to change it, and would never launch it). A move the batch system
        refuses or does not answer keeps them where they were (CoAllocationFailed, to be tried
        again). Otherwise (some missing, or one gone), everything is released and reserved again
        on every cluster at once. Raises :class:`CoAllocationFailed` when nothing could be held.
        """
        assert row.request is not None
        assert not self.store.in_transaction, "no batch-system call inside a store transaction"
        nodes = row.request.nodes
        # A batch system that places a reservation only at its next pass (OAR) moves one that
        # starts now to when it got to it: hold from when it will have, on every cluster alike.
        start = max(start, now + self.adapter.reservation_lead())
        end = start + row.request.duration
        current = {p.cluster: p for p in self.store.placeholders(row.id)}
        usable = set(current) == set(nodes) and all(p.status is HELD for p in current.values())
        if usable:
            try:
                return self._update(row, current, start, end, now)
            except (Refused, Unavailable) as error:
                # Keep what is held until a move succeeds: released, the hosts would be the
                # local scheduler's to backfill while the bridge tries again.
                cluster = error.cluster or ""
                hint = None if self._reclaims(cluster) else getattr(error, "retry_after", None)
                raise CoAllocationFailed(
                    f"placeholders kept where they were, not moved: {error}",
                    retry_after={cluster: hint} if hint is not None else None,
                    unavailable=(cluster,) if isinstance(error, Unavailable) else (),
                ) from error
            except AdapterError as error:
                log.info("session %s: moving its placeholders failed (%s)", row.id, error)
        self.release(row.id)
        try:
            return self._create(row, nodes, start, end)
        except CoAllocationFailed as failed:
            for cluster in [c for c in failed.retry_after if self._reclaims(c)]:
                del failed.retry_after[cluster]
            raise

    def _reclaims(self, cluster: str) -> bool:
        return self.reclaimed is not None and self.reclaimed(cluster)

    def _update(
        self,
        row: SessionRow,
        current: Mapping[str, PlaceholderRow],
        start: int,
        end: int,
        now: int,
    ) -> dict[str, PlaceholderRow]:
        assert row.request is not None
        held: dict[str, PlaceholderRow] = {}
        for cluster, old in sorted(current.items()):
            # Begun, or too close to move: a start within the lead would be OAR's, not ours.
            fixed = old.start <= now + self.adapter.reservation_lead()
            want_start = old.start if fixed else start
            want_end = max(old.end, old.start + row.request.duration) if fixed else end
            hosts = row.request.nodes[cluster]
            if (old.start, old.end, old.hosts) == (want_start, want_end, hosts):
                held[cluster] = old
                continue
            spec = ReservationSpec(
                name=old.name, start=want_start, end=want_end, hosts=hosts, users=(row.owner,),
                host_names=self._kept(row, old, hosts),
            )  # fmt: skip
            handle = self.adapter.update_reservation(cluster, spec)
            problem = spec.unmet_by(handle)
            if problem is not None:
                raise AdapterError(f"{cluster} made {problem}")
            held[cluster] = self.record(row.id, handle, HELD)
        return held

    def _create(
        self, row: SessionRow, nodes: Mapping[str, int], start: int, end: int
    ) -> dict[str, PlaceholderRow]:
        # Write-ahead: a crash between the batch system's answer and ours leaves a REQUESTED
        # row that reconciliation adopts or drops, never an unknown reservation.
        with self.store.transaction():
            for cluster, hosts in nodes.items():
                name = placeholder_name(self.prefix, row.id, cluster)
                self.store.put_placeholder(
                    PlaceholderRow(
                        session_id=row.id,
                        cluster=cluster,
                        name=name,
                        start=start,
                        end=end,
                        hosts=hosts,
                        status=REQUESTED,
                    )
                )
        try:
            handles = hold(
                self.adapter,
                prefix=self.prefix,
                session_id=row.id,
                owner=row.owner,
                nodes=nodes,
                start=start,
                end=end,
                host_names=self._taken_over(row) or self._chosen(row, nodes, start),
            )
        except CoAllocationFailed as failed:
            leftovers = {cluster for cluster, _ in failed.leftovers}
            with self.store.transaction():
                for cluster in nodes:
                    if cluster in leftovers:
                        self.mark(row.id, cluster, RELEASING)
                    else:
                        self.store.delete_placeholder(row.id, cluster)
            raise
        with self.store.transaction():
            return {c: self.record(row.id, h, HELD) for c, h in handles.items()}

    def _chosen(
        self, row: SessionRow, nodes: Mapping[str, int], start: int
    ) -> dict[str, tuple[str, ...]]:
        if self.choose is None:
            return {}
        named = {
            cluster: self.choose(row, cluster, hosts, start) for cluster, hosts in nodes.items()
        }
        return {cluster: names for cluster, names in named.items() if names}

    def _taken_over(self, row: SessionRow) -> dict[str, tuple[str, ...]]:
        """An announced update (API v2: a ``next`` request) is held on its related request's
        hosts as far as they cover it; a larger one on any hosts."""
        typed, request = row.typed, row.request
        if typed is None or request is None or typed.related_how is not Relation.NEXT:
            return {}
        for sibling in self.store.requests_of(row.parent or ""):
            members = () if sibling.typed is None else sibling.typed.members
            if typed.related_to in (sibling.name, *(name for name, _ in members)):
                cluster = row.clusters[0]
                held = self.store.placeholder(sibling.id, cluster)
                hosts = request.nodes[cluster]
                if held is not None and len(held.host_names) >= hosts:
                    return {cluster: held.host_names[:hosts]}
        return {}

    @staticmethod
    def _kept(row: SessionRow, old: PlaceholderRow, hosts: int) -> tuple[str, ...]:
        """The hosts an announced update's placeholder keeps when it moves: those it took over
        from its related request (OAR re-submits a container to move it, and one asked by
        count only lands on any free hosts: elsewhere while the related one still runs)."""
        typed = row.typed
        if typed is None or typed.related_how is not Relation.NEXT:
            return ()
        return old.host_names if len(old.host_names) == hosts else ()

    def record(
        self, session_id: str, handle: ReservationHandle, status: PlaceholderStatus
    ) -> PlaceholderRow:
        placeholder = PlaceholderRow(
            session_id=session_id,
            cluster=handle.cluster,
            name=handle.name,
            start=handle.start,
            end=handle.end,
            hosts=len(handle.host_names),
            host_names=handle.host_names,
            status=status,
        )
        self.store.put_placeholder(placeholder)
        return placeholder

    def mark(self, session_id: str, cluster: str, status: PlaceholderStatus) -> None:
        old = self.store.placeholder(session_id, cluster)
        if old is not None:
            self.store.put_placeholder(old.model_copy(update={"status": status}))

    def confirm(
        self, row: SessionRow, held: Mapping[str, PlaceholderRow], now: int
    ) -> tuple[dict[str, PlaceholderRow], list[str]]:
        """Read each placeholder back from its batch system before a launcher is told its hosts:
        a batch system may have swapped a host that went down. The hosts recorded (and told) are
        the batch system's; a placeholder gone, shrunk or moved is a failed start (tried again).

        Also returns, per placeholder that has not begun yet (held from the adapter's lead on,
        or not launched by its batch system yet), why: a launcher told to start then would
        submit jobs that wait for it, and its components would not start together.
        """
        assert not self.store.in_transaction, "no batch-system call inside a store transaction"
        confirmed: dict[str, PlaceholderRow] = {}
        unbegun: list[str] = []
        for cluster, placeholder in sorted(held.items()):
            kept = placeholder
            try:
                made = self.adapter.reservation(cluster, kept.name)
            except AdapterError as error:
                raise CoAllocationFailed(
                    f"{cluster}: placeholder {kept.name} could not be read back: {error}",
                    unavailable=(cluster,),
                ) from error
            asked = ReservationSpec(
                name=kept.name, start=kept.start, end=kept.end, hosts=kept.hosts, users=("x",)
            )
            problem = "gone" if made is None else asked.unmet_by(made)
            if made is None or problem is not None:
                raise CoAllocationFailed(f"{cluster}: placeholder {kept.name} is {problem}")
            if not made.begun(now):
                when = (
                    "its batch system has not launched it yet"
                    if made.start <= now
                    else (f"it begins at {made.start}")
                )
                unbegun.append(f"{cluster}: placeholder {kept.name} not begun ({when})")
            if set(made.host_names) != set(kept.host_names):
                log.info("%s: %s now holds %s", cluster, kept.name, ", ".join(made.host_names))
                kept = kept.model_copy(update={"host_names": made.host_names})
                self.store.put_placeholder(kept)
            confirmed[cluster] = kept
        return confirmed, unbegun

    def stretch(
        self, row: SessionRow, held: Mapping[str, PlaceholderRow], until: int
    ) -> dict[str, PlaceholderRow]:
        """At its start, lengthen the placeholders that end before ``until`` (the session
        starts later than they began: a job of someone else's overran, or OAR launched them
        late). One the batch system will not lengthen keeps its end: the allocation then ends
        with it (the start event says so)."""
        assert not self.store.in_transaction, "no batch-system call inside a store transaction"
        stretched = dict(held)
        for cluster, old in sorted(held.items()):
            if old.end >= until:
                continue
            spec = ReservationSpec(
                name=old.name, start=old.start, end=until, hosts=old.hosts,
                host_names=old.host_names, users=(row.owner,),
            )  # fmt: skip
            try:
                handle = self.adapter.update_reservation(cluster, spec)
            except AdapterError as error:
                log.info("%s: %s kept its end %d, not %d: %s", cluster, old.name, old.end, until,
                         error)  # fmt: skip
                continue
            if spec.unmet_by(handle) is None:
                stretched[cluster] = self.record(row.id, handle, HELD)
        return stretched

    # -- ghosts and release -------------------------------------------------------------------

    def shrink(self, row: SessionRow, until: int) -> list[str]:
        """Done: keep the hosts only until ``until`` (the ghost), so that the local scheduler
        cannot backfill them before older applications had ``fair_start`` to adapt. Returns the
        clusters where it must be tried again."""
        assert not self.store.in_transaction, "no batch-system call inside a store transaction"
        left: list[str] = []
        for old in self.store.placeholders(row.id):
            if old.status is not HELD or old.end <= until:
                if old.status is HELD:
                    self.mark(row.id, old.cluster, GHOST)
                continue
            spec = ReservationSpec(
                name=old.name,
                start=old.start,
                # Done before its placeholder began (held from the adapter's reservation lead
                # on): the shortest reservation there is, released when the ghost expires.
                end=max(until, old.start + 1),
                hosts=old.hosts,
                host_names=old.host_names,
                users=(row.owner,),
            )
            try:
                handle = self.adapter.update_reservation(old.cluster, spec)
            except AdapterError as error:
                # Holding a little longer than fair_start is harmless: tried again later.
                log.info("ghost of %s on %s not shrunk yet: %s", row.id, old.cluster, error)
                left.append(old.cluster)
                continue
            self.record(row.id, handle, GHOST)
        return left

    def release(
        self, session_id: str, inside: Callable[[str, str], Iterable[str]] | None = None
    ) -> list[str]:
        """Delete every placeholder of a session; returns the clusters where it must be retried
        (a batch system that refused, say because a job still runs inside, or did not answer).

        ``inside(cluster, name)`` names the jobs still in a placeholder: they are cancelled
        first, since the session they belonged to is over (killed, say, after a host went down
        on another cluster) and a batch system refuses to delete a reservation in use."""
        assert not self.store.in_transaction, "no batch-system call inside a store transaction"
        left = []
        for old in self.store.placeholders(session_id):
            self.mark(session_id, old.cluster, RELEASING)
            try:
                for job in inside(old.cluster, old.name) if inside is not None else ():
                    log.info("cancelling job %s left in %s on %s", job, old.name, old.cluster)
                    self.adapter.cancel(old.cluster, job)
                self.adapter.delete_reservation(old.cluster, old.name)
            except AdapterError as error:
                log.info("placeholder %s on %s not deleted yet: %s", old.name, old.cluster, error)
                left.append(old.cluster)
                continue
            self.store.delete_placeholder(session_id, old.cluster)
        return left
