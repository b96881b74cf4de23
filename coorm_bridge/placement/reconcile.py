"""Reconciliation: the batch systems' reservations brought back in line with the store.

After a crash, a restarted controller or a lost message, the store and the batch systems may
disagree. The store is the bridge's word (it is written before any batch-system call), so:
half-made placeholders (REQUESTED) are adopted when the batch system has them, dropped otherwise;
reservations with the bridge's prefix that no session owns are deleted; those a session should
hold but the batch system lost are re-created; placeholders of ended sessions are released.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping

from coorm_bridge.adapters.base import AdapterError, Reservation, ReservationSpec
from coorm_bridge.core.states import FINAL
from coorm_bridge.placement.placeholders import HELD, RELEASING, REQUESTED, Placeholders
from coorm_bridge.store import PlaceholderRow

log = logging.getLogger(__name__)


class Reconciler:
    """Compares what the batch systems hold with the placeholders' book, and repairs."""

    def __init__(self, book: Placeholders) -> None:
        self.book = book
        self.adapter = book.adapter
        self.store = book.store

    def reconcile(self, ours: Mapping[str, list[Reservation]], now: int) -> dict[str, int]:
        """Bring the batch systems in line with the store; ``ours`` maps each cluster that
        answered to the reservations with the bridge's prefix it holds now.

        Returns counts of what was done (deleted orphans, re-created, adopted, dropped).
        """
        assert not self.store.in_transaction, "no batch-system call inside a store transaction"
        done: Counter[str] = Counter()
        rows = self.store.placeholders()
        known = {(p.cluster, p.name) for p in rows}
        for cluster, reservations in ours.items():
            for reservation in reservations:
                if (cluster, reservation.name) not in known:
                    try:
                        self.adapter.delete_reservation(cluster, reservation.name)
                        done["orphans"] += 1
                    except AdapterError as error:
                        log.info(
                            "orphan %s on %s not deleted yet: %s", reservation.name, cluster, error
                        )
        for placeholder in rows:
            if placeholder.cluster not in ours:
                continue  # that batch system is silent: nothing can be checked there
            present = {r.name: r for r in ours[placeholder.cluster]}
            done[self._reconcile_one(placeholder, present.get(placeholder.name), now)] += 1
        for row in self.store.sessions(states=FINAL):
            if self.store.placeholders(row.id):
                self.book.release(row.id)
                done["released"] += 1
        del done["ok"]
        return dict(done)

    def _reconcile_one(  # noqa: PLR0911 - one return per case of the reconciliation
        self, placeholder: PlaceholderRow, present: Reservation | None, now: int
    ) -> str:
        sid, cluster = placeholder.session_id, placeholder.cluster
        if placeholder.status is RELEASING:
            if present is None:
                self.store.delete_placeholder(sid, cluster)
                return "dropped"
            self.book.release(sid)
            return "released"
        if present is not None:
            if placeholder.status is REQUESTED:
                self._adopt(placeholder, present)
                return "adopted"
            return "ok"
        if placeholder.status is REQUESTED or placeholder.end <= now:
            self.store.delete_placeholder(sid, cluster)
            return "dropped"
        session = self.store.session(sid)
        owner = session.owner if session is not None else sid
        spec = ReservationSpec(
            name=placeholder.name,
            start=max(placeholder.start, now),
            end=placeholder.end,
            hosts=placeholder.hosts,
            users=(owner,),
        )
        try:
            handle = self.adapter.create_reservation(cluster, spec)
        except AdapterError as error:
            log.warning(
                "placeholder %s lost on %s and not re-created: %s", placeholder.name, cluster, error
            )
            return "ok"
        self.book.record(sid, handle, placeholder.status)
        return "recreated"

    def _adopt(self, placeholder: PlaceholderRow, present: Reservation) -> None:
        if present.hosts != placeholder.hosts or len(present.host_names) != present.hosts:
            self.book.release(placeholder.session_id)
            return
        self.store.put_placeholder(
            placeholder.model_copy(
                update={
                    "start": present.start,
                    "end": present.end,
                    "host_names": present.host_names,
                    "status": HELD,
                }
            )
        )
