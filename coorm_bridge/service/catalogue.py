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

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import AdapterError
from coorm_bridge.core.messages import Change, ChangeKind
from coorm_bridge.core.model import ClusterInfo, Interconnect, Link
from coorm_bridge.core.states import ACTIVE
from coorm_bridge.service.recorder import Recorder
from coorm_bridge.store import Store

log = logging.getLogger(__name__)


class Catalogue:
    """The clusters' properties and links as last read: what ``/v1/clusters`` and
    ``/v1/interconnect`` show, what a subscription's filter selects from and a job is checked
    against. Read once at start (a batch system that cannot say them stops the start), then
    again by :meth:`refresh`.

    ``lock`` is the bridge's lock (the news is written with every active session's events),
    ``trigger`` asks for a pass."""

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
    ) -> None:
        self.adapter = adapter
        self.store = store
        self.recorder = recorder
        self.lock = lock
        self.trigger = trigger
        self.infos = infos
        self.interconnect = interconnect

    def refresh(self) -> dict[str, list[Change]]:
        """Re-read the clusters' properties and links; tell each session what changed on the
        clusters it sees (CHANGE of kind ``info`` or ``interconnect``). Returns the changes.

        The adapter is asked outside the lock: a slow batch system delays only this job."""
        try:
            infos = self.adapter.clusters()
            interconnect = self.adapter.interconnect()
        except AdapterError as error:
            log.info("clusters' properties not re-read: %s", error)
            return {}
        with self.lock:
            changes = catalogue_changes(self.infos, infos, self.interconnect, interconnect)
            if not changes:
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

    def _announce(self, changes: Mapping[str, list[Change]], now: int) -> None:
        """Tell every active session the changes of the clusters it sees, in one transaction."""
        with self.recorder.batch():
            for row in self.store.sessions(states=ACTIVE):
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
