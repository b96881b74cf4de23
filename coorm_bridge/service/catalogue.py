"""Cluster properties and links as they change: CHANGE events of kind ``info`` and ``interconnect``.

The paper's CHANGE message covers three kinds of news: availability (every pass computes it),
a cluster's properties (CINFO: hosts, cores, RAM, speed after an upgrade) and the links between
clusters (ICINFO). The bridge re-reads the last two from its adapter now and then
(:class:`Catalogue`, with each reconciliation); :func:`catalogue_changes` says what changed, per
cluster, so that each session is told about the clusters it sees.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import AdapterError, Unavailable
from coorm_bridge.core.messages import Change, ChangeKind
from coorm_bridge.core.model import ClusterInfo, Interconnect, Link
from coorm_bridge.core.states import ACTIVE
from coorm_bridge.service.recorder import Recorder
from coorm_bridge.store import Store

log = logging.getLogger(__name__)

#: The store's meta key of the clusters' properties and links as last read (JSON).
REMEMBERED = "catalogue"


class Remembered(BaseModel):
    """What the store keeps of the last catalogue read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    infos: tuple[ClusterInfo, ...]
    interconnect: Interconnect


@dataclass(frozen=True)
class FirstRead:
    """The catalogue a daemon starts with (:func:`first_read`): ``unread`` maps each cluster
    whose properties the batch system did not give this time to why."""

    infos: list[ClusterInfo]
    interconnect: Interconnect
    clusters: list[str]
    unread: dict[str, str]


def first_read(adapter: Adapter, store: Store) -> FirstRead:
    """The clusters' properties at start, kept in the store for the next start. When the batch
    system does not answer (Unavailable) and the adapter knows its clusters' names without it
    (:meth:`Adapter.configured`), the daemon starts all the same: each cluster with its
    properties as last read, a cluster never read left out until it answers; any other failure
    (or a batch system whose clusters only it can name) raises, and the start stops."""
    try:
        infos, interconnect = adapter.clusters(), adapter.interconnect()
    except Unavailable as error:
        names = adapter.configured()
        if not names:
            raise
        why = str(error)
        remembered = _remembered(store)
        known = {} if remembered is None else {info.name: info for info in remembered.infos}
        infos = [known[name] for name in names if name in known]
        try:
            interconnect = adapter.interconnect()
        except AdapterError:
            interconnect = Interconnect() if remembered is None else remembered.interconnect
        log.warning(
            "the batch system does not answer at start (%s): serving %s, the properties of %s "
            "as last read, and reading them again once it answers",
            why,
            ", ".join(names),
            ", ".join(info.name for info in infos) or "none",
        )
        return FirstRead(infos, interconnect, names, dict.fromkeys(names, why))
    remember(store, infos, interconnect)
    return FirstRead(infos, interconnect, [info.name for info in infos], {})


def remember(store: Store, infos: Iterable[ClusterInfo], interconnect: Interconnect) -> None:
    """Keep the catalogue as read for a start whose batch system does not answer."""
    kept = Remembered(infos=tuple(infos), interconnect=interconnect)
    if store.meta(REMEMBERED) != (text := kept.model_dump_json()):
        store.put_meta(REMEMBERED, text)


def _remembered(store: Store) -> Remembered | None:
    text = store.meta(REMEMBERED)
    if text is None:
        return None
    try:
        return Remembered.model_validate_json(text)
    except ValidationError as error:  # written by another version: only a fallback
        log.warning("the clusters' properties kept from a previous run are unusable: %s", error)
        return None


class Catalogue:
    """The clusters' properties and links as last read: what ``/v1/clusters`` and
    ``/v1/interconnect`` show, what a subscription's filter selects from and a job is checked
    against. Read at start (:func:`first_read`), then again by :meth:`refresh`.

    ``lock`` is the bridge's lock (the news is written with every active session's events),
    ``trigger`` asks for a pass; ``unread``: the clusters whose properties the batch system
    did not give at start, and why (shown in health until :meth:`refresh` reads them; one
    never read before is not in ``infos`` until then)."""

    def __init__(
        self,
        *,
        adapter: Adapter,
        store: Store,
        recorder: Recorder,
        lock: AbstractContextManager[object],
        trigger: Callable[[], None],
        infos: list[ClusterInfo],
        interconnect: Interconnect,
        unread: Mapping[str, str] | None = None,
    ) -> None:
        self.adapter = adapter
        self.store = store
        self.recorder = recorder
        self.lock = lock
        self.trigger = trigger
        self.infos = infos
        self.interconnect = interconnect
        self._unread = dict(unread or {})

    @property
    def unread(self) -> dict[str, str]:
        """The clusters whose properties were not read since the start, and why."""
        return dict(self._unread)

    def refresh(self) -> dict[str, list[Change]]:
        """Re-read the clusters' properties and links; tell each session what changed on the
        clusters it sees (CHANGE of kind ``info`` or ``interconnect``). Returns the changes.

        The adapter is asked outside the lock: a slow batch system delays only this job."""
        try:
            infos = self.adapter.clusters()
            interconnect = self.adapter.interconnect()
        except AdapterError as error:
            log.info("clusters' properties not re-read: %s", error)
            if self._unread:
                with self.lock:
                    self._unread = dict.fromkeys(self._unread, str(error))
            return {}
        with self.lock:
            first = self._first(infos)
            changes = catalogue_changes(self.infos, infos, self.interconnect, interconnect)
            if first or changes:
                remember(self.store, infos, interconnect)
            if not changes:
                if first:
                    self.trigger()
                return {}
            fresh = {info.name: info for info in infos}
            self.infos = [fresh.get(info.name, info) for info in self.infos]
            self.interconnect = interconnect
            self._announce(changes, self.adapter.now())
            self.trigger()
        log.info(
            "clusters changed: %s",
            ", ".join(f"{c} ({k.kind})" for c, ks in changes.items() for k in ks),
        )
        return changes

    def _first(self, infos: list[ClusterInfo]) -> bool:
        """Take in the clusters read for the first time since the start (their properties
        were not in the store, or not read yet): new subscriptions see them from now on.
        True if any was unread."""
        if not self._unread:
            return False
        known = {info.name for info in self.infos}
        added = [info for info in infos if info.name in self._unread and info.name not in known]
        self.infos = [*self.infos, *added]
        log.warning(
            "the clusters' properties are read: %s",
            ", ".join(f"{i.name} ({i.hosts} hosts)" for i in infos if i.name in self._unread),
        )
        self._unread = {}
        return True

    def _announce(self, changes: Mapping[str, list[Change]], now: int) -> None:
        """Tell every active session the changes of the clusters it sees, in one transaction."""
        with self.recorder.batch():
            for row in self.store.sessions(states=ACTIVE, requests=False):
                told = [change for c in row.clusters for change in changes.get(c, ())]
                if told:
                    event = {
                        "type": "change",
                        "time": now,
                        "changes": told,
                        "estimated_start": row.estimated_start,
                    }
                    self.recorder.emit(row.id, event)


def links_of(interconnect: Interconnect, cluster: str) -> tuple[Link, ...]:
    return tuple(link for link in interconnect.links if cluster in link.clusters)


def catalogue_changes(
    old_infos: Iterable[ClusterInfo],
    new_infos: Iterable[ClusterInfo],
    old_links: Interconnect,
    new_links: Interconnect,
) -> dict[str, list[Change]]:
    """Per cluster served before, the changes of its properties and of its links.

    A cluster the adapter no longer lists, or a new one, is not a change a session can act on:
    the set of clusters is fixed while the daemon runs (each has its poller), so it is left out.
    """
    new = {info.name: info for info in new_infos}
    changes: dict[str, list[Change]] = {}
    for info in old_infos:
        name = info.name
        now = new.get(name)
        if now is not None and now != info:
            changes.setdefault(name, []).append(
                Change(cluster=name, kind=ChangeKind.INFO, info=now)
            )
        before, after = links_of(old_links, name), links_of(new_links, name)
        if set(before) != set(after):
            changes.setdefault(name, []).append(
                Change(cluster=name, kind=ChangeKind.INTERCONNECT, links=after)
            )
    return changes
