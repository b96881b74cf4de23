"""Which component runs on which cluster: the request's hosts shared out among the components.

A selector answers hosts per cluster, not per component (the paper's REQUEST): the launcher maps
them back. Each cluster of the request gets one job, so one component; a component gets one
cluster, or up to its ``max_clusters`` (one part per cluster); every component gets at least
one, within its ``clusters`` and its ``min_hosts``/``max_hosts`` (over all its parts). The
mapping is searched for a request before it is sent, so that the bridge is never asked for
hosts the application could not use, and made again from the hosts a start grants.

The search tries clusters by name and components in the file's order: the same request always
gives the same layout, and an unconstrained file gives its first component the first cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coorm_bridge.launchers.app import Component

#: Steps the search may take before it calls the request unusable: enough for any real layout
#: (64 components over 64 clusters with constraints), never a hang on an adversarial file.
MAX_STEPS = 200_000


class LayoutError(ValueError):
    """No way to run every component on the clusters of a request; the message says why."""


@dataclass(frozen=True, slots=True)
class Part:
    """One component on one cluster, with how many hosts it gets there."""

    component: Component
    cluster: str
    hosts: int


def layout(components: Sequence[Component], nodes: Mapping[str, int]) -> list[Part]:
    """The parts that run ``components`` on ``nodes`` (hosts per cluster), in the file's order
    of components, then by cluster; :class:`LayoutError` when there is none."""
    clusters = sorted(name for name, count in nodes.items() if count > 0)
    if len(clusters) < len(components):
        raise LayoutError(
            f"{len(components)} components need at least {len(components)} clusters (one job "
            f"per cluster), the request has {len(clusters)}: {_nodes(nodes)}"
        )
    choice: dict[str, int] = {}
    totals = [0] * len(components)
    counts = [0] * len(components)
    steps = 0

    def fits(index: int, cluster: str) -> bool:
        component = components[index]
        if component.clusters is not None and cluster not in component.clusters:
            return False
        if counts[index] >= component.max_clusters:
            return False
        most = component.max_hosts
        return most is None or totals[index] + nodes[cluster] <= most

    def search(position: int) -> bool:
        nonlocal steps
        steps += 1
        if steps > MAX_STEPS:
            raise LayoutError(f"too many ways to try for {_nodes(nodes)}: simplify the components")
        empty = sum(1 for count in counts if count == 0)
        if empty > len(clusters) - position:
            return False
        if position == len(clusters):
            return all(totals[i] >= c.min_hosts and counts[i] > 0 for i, c in enumerate(components))
        cluster = clusters[position]
        for index in range(len(components)):
            if not fits(index, cluster):
                continue
            choice[cluster] = index
            totals[index] += nodes[cluster]
            counts[index] += 1
            if search(position + 1):
                return True
            totals[index] -= nodes[cluster]
            counts[index] -= 1
            del choice[cluster]
        return False

    if not search(0):
        raise LayoutError(f"the components cannot share {_nodes(nodes)}: {_why(components)}")
    return [
        Part(component, cluster, nodes[cluster])
        for index, component in enumerate(components)
        for cluster in clusters
        if choice[cluster] == index
    ]


def _nodes(nodes: Mapping[str, int]) -> str:
    return ", ".join(f"{count} on {name}" for name, count in sorted(nodes.items()) if count) or (
        "no host"
    )


def _why(components: Sequence[Component]) -> str:
    """The constraints, said briefly, for the error a user reads."""
    said = []
    for c in components:
        where = "any cluster" if c.clusters is None else "/".join(c.clusters)
        hosts = f"{c.min_hosts}+" if c.max_hosts is None else f"{c.min_hosts}-{c.max_hosts}"
        spread = "" if c.max_clusters == 1 else f" over up to {c.max_clusters} clusters"
        said.append(f"{c.name} wants {hosts} hosts on {where}{spread}")
    return "; ".join(said) + " (one component per cluster)"
