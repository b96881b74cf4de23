"""Reconciliation: the batch systems' reservations brought back in line with the store.

After a crash, a restarted controller or a lost message, the store and the batch systems may
disagree. The store is the bridge's word (it is written before any batch-system call), so:
half-made placeholders (REQUESTED) are adopted when the batch system has them, dropped otherwise;
reservations with the bridge's prefix that no session owns are deleted; those a session should
hold but the batch system lost are re-created on the same hosts; times, sizes and hosts that
drifted are put back, or the session is told; placeholders of ended sessions go with the next
enactment. A repair the batch system refuses the bridge itself (no rights) waits for the next
reconciliation: no session is told it lost anything for that.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from coorm_bridge.core.batch import AdapterError, LacksRights, Reservation, ReservationSpec
from coorm_bridge.core.states import HOLDING
from coorm_bridge.placement.placeholders import HELD, RELEASING, REQUESTED, Placeholders
from coorm_bridge.store import PlaceholderRow

log = logging.getLogger(__name__)


class Reconciler:
    """Compares what the batch systems hold with the placeholders' book, and repairs.

    ``lost(session_id, why)`` is told when a started session's placeholder cannot be held as
    promised (the service ends that session)."""

    def __init__(self, book: Placeholders, lost: Callable[[str, str], None]) -> None:
        self.book = book
        self.adapter = book.adapter
        self.store = book.store
        self.lost = lost

    def ours(self, clusters: Iterable[str]) -> dict[str, list[Reservation]]:
        """Per cluster that answers now, the reservations with the bridge's prefix it holds:
        asked now, as the last poll may predate the enactor's latest changes."""
        assert not self.store.in_transaction, "no batch-system call inside a store transaction"
        found: dict[str, list[Reservation]] = {}
        for cluster in clusters:
            try:
                shot = self.adapter.snapshot([cluster]).clusters[cluster]
            except AdapterError:
                continue  # a silent batch system: nothing can be checked there
            found[cluster] = [r for r in shot.reservations if r.name.startswith(self.book.prefix)]
        return found

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
        del done["ok"]
        return dict(done)

    def _reconcile_one(
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
                return self._adopt(placeholder, present)
            return self._verify(placeholder, present, now)
        if placeholder.status is REQUESTED or placeholder.end <= now or not self._owner(sid):
            self.store.delete_placeholder(sid, cluster)
            return "dropped"
        return self._recreate(placeholder, now)

    def _owner(self, session_id: str) -> str | None:
        session = self.store.session(session_id)
        return None if session is None else session.owner

    def _spec(self, placeholder: PlaceholderRow, now: int) -> ReservationSpec:
        """The placeholder as the store has it: on the very hosts the launcher was told."""
        owner = self._owner(placeholder.session_id) or "root"  # a row outlives no session
        return ReservationSpec(
            name=placeholder.name,
            start=max(placeholder.start, now),
            end=placeholder.end,
            hosts=placeholder.hosts,
            host_names=placeholder.host_names,
            users=(owner,),
        )

    def _started(self, placeholder: PlaceholderRow) -> bool:
        session = self.store.session(placeholder.session_id)
        return session is not None and session.state in HOLDING

    @staticmethod
    def _launching(present: Reservation, now: int) -> bool:
        """Begun but not launched yet: its batch system is launching it, and its times may be
        read half-rewritten (OAR shortens a late reservation's walltime, then moves its start,
        in separate statements). Its times are checked at the next reconciliation."""
        return present.launched is False and present.start <= now

    def _verify(self, placeholder: PlaceholderRow, present: Reservation, now: int) -> str:
        """Times, size and hosts as the store says. A waiting session's placeholder may have had
        a host swapped (nobody was told its hosts yet): the batch system's are kept. Anything
        else is put back as it was promised, or the session is told it lost it."""
        same_hosts = not placeholder.host_names or set(present.host_names) == set(
            placeholder.host_names
        )
        same_times = (present.start, present.end) == (placeholder.start, placeholder.end)
        if same_hosts and same_times and present.hosts == placeholder.hosts:
            return "ok"
        if same_hosts and present.hosts == placeholder.hosts and self._launching(present, now):
            return "ok"
        if same_times and present.hosts == placeholder.hosts and not self._started(placeholder):
            self.store.put_placeholder(
                placeholder.model_copy(update={"host_names": present.host_names})
            )
            return "adopted"
        spec = self._spec(placeholder, now).model_copy(update={"start": placeholder.start})
        try:
            handle = self.adapter.update_reservation(placeholder.cluster, spec)
            problem = spec.unmet_by(handle)
        except LacksRights as lacking:
            return self._not_now(placeholder, "restored", lacking)
        except AdapterError as error:
            problem = str(error)
        if problem is None:
            self.book.record(placeholder.session_id, handle, placeholder.status)
            return "repaired"
        return self._lost(
            placeholder, f"it changed in the batch system and was not restored: {problem}"
        )

    def _recreate(self, placeholder: PlaceholderRow, now: int) -> str:
        """A placeholder the batch system lost comes back on the same hosts, or the session is
        told: a started application runs on the hosts it was given, so another host would be a
        promise the bridge cannot keep."""
        spec = self._spec(placeholder, now)
        try:
            handle = self.adapter.create_reservation(placeholder.cluster, spec)
            problem = spec.unmet_by(handle)
        except LacksRights as lacking:
            return self._not_now(placeholder, "re-created", lacking)
        except AdapterError as error:
            problem = str(error)
        else:
            if problem is not None:
                self.adapter.delete_reservation(placeholder.cluster, spec.name)
        if problem is None:
            self.book.record(placeholder.session_id, handle, placeholder.status)
            return "recreated"
        return self._lost(
            placeholder,
            f"the batch system lost it and it could not be re-created on its hosts: {problem}",
        )

    def _not_now(self, placeholder: PlaceholderRow, what: str, lacking: LacksRights) -> str:
        """The bridge itself may not repair it: no session pays for that. It is tried again at
        the next reconciliation, once an admin granted the rights (the bridge's check told them
        already, at ERROR and in health: not repeated here)."""
        log.debug("placeholder %s not %s yet: %s", placeholder.name, what, lacking)
        return "ok"

    def _lost(self, placeholder: PlaceholderRow, why: str) -> str:
        """A placeholder that cannot be held as promised: a started session is told (through
        ``self.lost``), a waiting one is placed again by the next pass."""
        text = f"placeholder {placeholder.name} on {placeholder.cluster}: {why}"
        log.warning("%s", text)
        if self._started(placeholder):
            self.lost(placeholder.session_id, text)
            return "lost"
        self.book.release(placeholder.session_id)
        return "released"

    def _adopt(self, placeholder: PlaceholderRow, present: Reservation) -> str:
        """A placeholder asked for just before a crash: kept if it is what was asked."""
        if present.hosts != placeholder.hosts or len(present.host_names) != present.hosts:
            self.book.release(placeholder.session_id)
            return "released"
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
        return "adopted"
