"""Selectors: the application-specific part of CooRM (paper §III-A).

A selector sees the clusters it subscribed to and its current view, and answers the request to
send. Launchers run it on every new view; since views repeat, they memoize on the view (the
paper's "computed configurations" count what is left).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Protocol

from coorm_bridge.core.model import ClusterInfo, Request
from coorm_bridge.core.profile import Profile

GROUP = "coorm_bridge.selectors"


class Selector(Protocol):
    def select(
        self, clusters: Mapping[str, ClusterInfo], view: Mapping[str, Profile], now: int
    ) -> Request | None:
        """The request to send for this view; None to keep the current one."""
        ...


class Rigid:
    """Always the same request, whatever the view: a classic rigid job, spread over clusters."""

    def __init__(self, nodes: Mapping[str, int], duration: int) -> None:
        self.request = Request(nodes=dict(nodes), duration=duration)

    def select(
        self, clusters: Mapping[str, ClusterInfo], view: Mapping[str, Profile], now: int
    ) -> Request | None:
        unknown = sorted(set(self.request.nodes) - set(clusters))
        if unknown:
            raise ValueError(f"the rigid request names clusters not in the view: {unknown}")
        return self.request


def load_selector(name: str) -> type:
    """The selector class registered under ``name`` in the ``coorm_bridge.selectors`` group."""
    found = entry_points(group=GROUP, name=name)
    if not found:
        known = sorted(ep.name for ep in entry_points(group=GROUP))
        raise LookupError(f"no selector named {name!r}; installed: {', '.join(known) or 'none'}")
    loaded = next(iter(found)).load()
    if not isinstance(loaded, type):
        raise TypeError(f"selector {name!r} does not name a class")
    return loaded
