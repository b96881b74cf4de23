"""Equi-partitioning (water-filling) of free hosts among applications that ask for preemptible ones.

CooRMv2 shares what the non-preemptible view leaves idle this way: on each stretch of time where
the free hosts and every demand are constant, each application gets an equal share; what an
application asking for less leaves goes to the others, and hosts that do not divide evenly go one
each to the earliest subscribers. Nobody gets more than it asks for. A share is therefore a
profile too: an application is told when its share falls, which is when it must give hosts back.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from coorm_bridge.core.profile import IntArray, Profile


def _grid(profiles: list[Profile]) -> IntArray:
    """Every breakpoint of every profile, sorted, once."""
    times = [np.asarray(p.breakpoints, dtype=np.int64) for p in profiles]
    return np.unique(np.concatenate(times)) if times else np.zeros(0, dtype=np.int64)


def water_fill(free: IntArray, demands: IntArray) -> IntArray:
    """Shares per column: ``free[k]`` hosts among the rows' ``demands[:, k]`` (rows in
    subscription order). Vectorized over columns: the level is found by bisection on all of
    them at once, so a cluster with many breakpoints costs a few array passes."""
    free = np.maximum(free, 0)
    low = np.zeros(free.shape, dtype=np.int64)
    high = demands.max(axis=0, initial=0)
    while bool((low < high).any()):
        mid = (low + high + 1) // 2
        fits = np.minimum(demands, mid).sum(axis=0) <= free
        low = np.where(fits, mid, low)
        high = np.where(fits, high, mid - 1)
    shares = np.minimum(demands, low)
    left = free - shares.sum(axis=0)
    hungry = demands > low
    extra = hungry & (np.cumsum(hungry, axis=0) <= left)
    result: IntArray = shares + extra
    return result


def equipartition(free: Profile, demands: Mapping[str, Profile]) -> dict[str, Profile]:
    """Each application's share of ``free``, by its demand; ``demands`` in subscription order."""
    names = list(demands)
    if not names:
        return {}
    profiles = [demands[name] for name in names]
    times = _grid([free, *profiles])
    points = np.concatenate(([times[0] - 1], times)) if times.size else np.zeros(1, np.int64)
    wanted = np.stack([p.values_at(points) for p in profiles]).astype(np.int64)
    shares = water_fill(free.values_at(points).astype(np.int64), np.maximum(wanted, 0))
    return {
        name: Profile(int(shares[i, 0]), times.tolist(), shares[i, 1:].tolist())
        for i, name in enumerate(names)
    }


__all__ = ["equipartition", "water_fill"]
