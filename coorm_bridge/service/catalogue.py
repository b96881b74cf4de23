"""Cluster properties and links as they change: CHANGE events of kind ``info`` and ``interconnect``.

The paper's CHANGE message covers three kinds of news: availability (every pass computes it),
a cluster's properties (CINFO: hosts, cores, RAM, speed after an upgrade) and the links between
clusters (ICINFO). The bridge re-reads the last two from its adapter now and then; this module
says what changed, per cluster, so that each session is told about the clusters it sees.
"""

from __future__ import annotations

from collections.abc import Iterable

from coorm_bridge.core.messages import Change, ChangeKind
from coorm_bridge.core.model import ClusterInfo, Interconnect, Link


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
