"""Memoization per view: a selector runs once per distinct input, the paper's "computed
configurations" (§II-a), however often the bridge sends the same view again.

The key is exact, so a hit returns what the selector would have answered:

- the clusters and the interconnect as given (their order too: a pure selector may depend on it);
- each profile of the view *from now on* (``Profile.steps(now)``): a request cannot start
  earlier, and the wrapped selector is handed the view truncated at ``now`` so that it cannot
  see anything the key leaves out;
- ``now`` itself, because the same absolute view seen later is a different choice (waiting an
  hour for more hosts costs less when the hour is half gone). A selector whose class sets
  ``time_invariant = True`` promises that shifting ``now`` and every profile by the same amount
  shifts nothing in its answer (the built-ins minimise end times, which shift along); for it the
  profiles are keyed relative to ``now`` and ``now`` drops out, so a view that only slid in time
  (an idle platform, or the same queue an hour later) is a hit too.

The answer's horizon (:func:`~coorm_bridge.launchers.selectors.base.horizon_of`) is kept with
it: :meth:`Memoized.choose` gives both, at no cost on a hit (relative to ``now`` for a
time-invariant selector, which shifts along with the view).

The cache keeps the most recently used ``maxsize`` entries. Not thread-safe: one launcher runs
one selector at a time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coorm_bridge.core.model import ClusterInfo, Interconnect, Request
from coorm_bridge.launchers.selectors.base import Selector, horizon_of

if TYPE_CHECKING:
    from coorm_bridge.core.profile import Profile

#: Entries a memo keeps by default: a launcher sees a few hundred distinct views at most.
DEFAULT_SIZE = 1024
MAX_SIZE = 1_000_000


class Memoized:
    """``selector`` run at most once per distinct input; see the module docstring.

    ``computed`` counts the runs (the paper's computed configurations, a failed run included),
    ``hits`` the answers given from the cache.
    """

    def __init__(self, selector: Selector, maxsize: int = DEFAULT_SIZE) -> None:
        if not 1 <= maxsize <= MAX_SIZE:
            raise ValueError(f"a memo keeps 1 to {MAX_SIZE} entries, not {maxsize}")
        self.selector = selector
        self.maxsize = maxsize
        self.relative = bool(getattr(selector, "time_invariant", False))
        self.computed = 0
        self.hits = 0
        self._cache: OrderedDict[Hashable, tuple[Request | None, int | None]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._cache)

    def key(
        self,
        clusters: Mapping[str, ClusterInfo],
        interconnect: Interconnect,
        view: Mapping[str, Profile],
        now: int,
    ) -> Hashable:
        shift = now if self.relative else 0
        profiles = tuple(
            (name, tuple((t - shift, v) for t, v in profile.steps(now)))
            for name, profile in view.items()
        )
        return (
            tuple(clusters.items()),
            interconnect,
            profiles,
            None if self.relative else now,
        )

    def select(
        self,
        clusters: Mapping[str, ClusterInfo],
        interconnect: Interconnect,
        view: Mapping[str, Profile],
        now: int,
    ) -> Request | None:
        return self.choose(clusters, interconnect, view, now).request

    def choose(
        self,
        clusters: Mapping[str, ClusterInfo],
        interconnect: Interconnect,
        view: Mapping[str, Profile],
        now: int,
    ) -> Choice:
        """The selector's answer for this view, and its horizon."""
        shift = now if self.relative else 0
        key = self.key(clusters, interconnect, view, now)
        if key in self._cache:
            self._cache.move_to_end(key)
            self.hits += 1
            answer, horizon = self._cache[key]
            return Choice(answer, None if horizon is None else horizon + shift)
        self.computed += 1
        seen = {name: profile.truncated(now) for name, profile in view.items()}
        answer = self.selector.select(clusters, interconnect, seen, now)
        found = horizon_of(self.selector, clusters, interconnect, seen, now, answer)
        self._cache[key] = (answer, None if found is None else found - shift)
        if len(self._cache) > self.maxsize:
            self._cache.popitem(last=False)
        return Choice(answer, found)


@dataclass(frozen=True, slots=True)
class Choice:
    """A selector's answer and its horizon (None: any change of the view may alter it)."""

    request: Request | None
    horizon: int | None
