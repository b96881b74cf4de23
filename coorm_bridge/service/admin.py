"""What a site's admins do day to day: list every session, end one by force, drain a cluster
for maintenance and resume it (``coorm-bridge sessions``, ``cancel``, ``drain``, ``resume``).

Rights are the bridge's: an admin is a user named in ``bridge.admins``
(:meth:`.bridge.Bridge.is_admin`), and a session is found through the bridge's ownership check,
so that a user may cancel their own session and an unknown or foreign one looks the same (404).
Like the bridge, nothing here calls a batch system: a cancel ends the session in the store (its
launcher told why, in the same transaction), and the next pass and enactment release its
placeholders and the job runner stops its jobs; a drain is a row in the store that every pass
reads, so a restart keeps it. Each admin action is logged once on ``coorm_bridge.audit``, with
who did it, what and why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.states import FINAL, HOLDING, PLACED, AppState
from coorm_bridge.protocol import AdminSession, DrainInfo, PlaceholderInfo
from coorm_bridge.service.catalogue import Catalogue
from coorm_bridge.service.config import Config
from coorm_bridge.service.due import Due
from coorm_bridge.service.errors import NotAdmin, NotFound
from coorm_bridge.service.passes import session_end
from coorm_bridge.service.recorder import Recorder
from coorm_bridge.store import DrainRow, PlaceholderRow, SessionRow, Store

log = logging.getLogger(__name__)
#: One line per admin action: who, what, why (a site may send it to its own audit trail).
audit = logging.getLogger("coorm_bridge.audit")


class Admin:
    """The admin commands. ``own(user, session)`` and ``is_admin(user)`` are the bridge's
    checks, ``lock`` the bridge's lock, ``due`` asks for a pass, ``wake`` tells the job runner
    there is something to do."""

    def __init__(
        self,
        *,
        config: Config,
        adapter: Adapter,
        store: Store,
        catalogue: Catalogue,
        recorder: Recorder,
        due: Due,
        lock: AbstractContextManager[object],
        own: Callable[[str, str], SessionRow],
        is_admin: Callable[[str], bool],
        wake: Callable[[], None],
    ) -> None:
        self.config = config
        self.adapter = adapter
        self.store = store
        self.catalogue = catalogue
        self.recorder = recorder
        self.due = due
        self.lock = lock
        self.own = own
        self.is_admin = is_admin
        self.wake = wake

    # -- sessions ---------------------------------------------------------------------------

    def sessions(
        self, user: str, owner: str | None = None, state: AppState | None = None
    ) -> list[AdminSession]:
        """Every session (an admin's view), or the caller's own: a user who is not an admin
        and names another owner is refused rather than shown an empty list."""
        if not self.is_admin(user):
            if owner is not None and owner != user:
                raise NotAdmin(f"only admins see other users' sessions; {user} is not one")
            owner = user
        rows = self.store.sessions(
            owner=owner, states=None if state is None else [state], requests=False
        )
        held: dict[str, list[PlaceholderRow]] = {}
        for placeholder in self.store.placeholders():
            held.setdefault(placeholder.session_id, []).append(placeholder)
        fair_start = self.config.policy.fair_start
        return [
            AdminSession(
                session=row.id,
                name=row.name,
                owner=row.owner,
                state=row.state,
                clusters=row.clusters,
                request=row.request,
                estimated_start=row.estimated_start,
                created=row.created,
                started_at=row.started_at,
                done_at=row.done_at,
                end=session_end(row, fair_start),
                placeholders=tuple(_placeholder(p) for p in held.get(row.id, ())),
            )
            for row in rows
        ]

    def cancel(self, user: str, session_id: str, reason: str) -> SessionRow:
        """End a session by force, whatever its state; its launcher gets ``reason``.

        Started (or done): a ``killed`` event, then ``ended`` (finished), as when its
        allocation is taken back. Not started: a ``withdrawn`` event, then ``ended``
        (cancelled), as when the bridge withdraws it. Both are committed before the answer;
        its placeholders go at the next enactment, its jobs at the job runner's next round.
        An ended session is answered as it is: cancelling twice changes nothing."""
        with self.lock:
            row = self.own(user, session_id)
            if row.state in FINAL:
                return row
            why = f"cancelled by {user}: {reason}"
            now = self.adapter.now()
            with self.recorder.batch():
                for job in self.store.jobs(row.id):
                    if job.step != "ended" and not job.cancel:
                        self.store.update_job(job.id, cancel=True)
                if row.state in PLACED:
                    ended = self.recorder.withdraw(row, why, now)
                else:
                    assert row.state in HOLDING
                    ended = self.recorder.kill(row, why, now)
            self.due.trigger()
        self.wake()
        if row.owner != user:
            audit.warning(
                "admin %s cancelled session %s of %s (was %s): %s",
                user,
                row.id,
                row.owner,
                row.state.value,
                reason,
            )
        else:
            log.info("session %s cancelled by its owner %s: %s", row.id, user, reason)
        return ended

    # -- clusters -----------------------------------------------------------------------------

    def drained(self) -> dict[str, DrainRow]:
        return self.store.drained()

    def drain(self, user: str, cluster: str, reason: str | None) -> DrainInfo:
        """No new placeholder on ``cluster`` from the next pass on, until resumed; started
        sessions keep theirs. Written before the answer, so a restart keeps it."""
        self._require_admin(user, "drain")
        if cluster not in {info.name for info in self.catalogue.infos}:
            raise NotFound(f"no cluster {cluster}; clusters: {self._names()}")
        with self.lock:
            row = self.store.drain(
                DrainRow(cluster=cluster, since=self.adapter.now(), by=user, reason=reason)
            )
            self.due.trigger()
        audit.warning("admin %s drained cluster %s: %s", user, cluster, reason or "no reason given")
        return _drain_info(cluster, row)

    def resume(self, user: str, cluster: str) -> DrainInfo:
        """Placeholders may be made on ``cluster`` again; waiting sessions are placed there at
        the next pass."""
        self._require_admin(user, "resume")
        with self.lock:
            known = {info.name for info in self.catalogue.infos}
            if cluster not in known and cluster not in self.store.drained():
                raise NotFound(f"no cluster {cluster}; clusters: {self._names()}")
            was = self.store.resume(cluster)
            self.due.trigger()
        since = "it was not drained" if was is None else f"drained by {was.by} since {was.since}"
        audit.warning("admin %s resumed cluster %s (%s)", user, cluster, since)
        return _drain_info(cluster, None)

    def _require_admin(self, user: str, what: str) -> None:
        if not self.is_admin(user):
            raise NotAdmin(f"only admins {what} clusters; {user} is not in bridge.admins")

    def _names(self) -> str:
        return ", ".join(info.name for info in self.catalogue.infos)


def _placeholder(row: PlaceholderRow) -> PlaceholderInfo:
    return PlaceholderInfo(
        cluster=row.cluster,
        name=row.name,
        status=row.status.value,
        start=row.start,
        end=row.end,
        hosts=row.hosts,
        host_names=row.host_names,
    )


def _drain_info(cluster: str, row: DrainRow | None) -> DrainInfo:
    if row is None:
        return DrainInfo(cluster=cluster, drained=False)
    return DrainInfo(cluster=cluster, drained=True, since=row.since, by=row.by, reason=row.reason)
