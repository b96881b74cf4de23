"""Hand-made platforms and views for the selector tests."""

from __future__ import annotations

import itertools

from coorm_bridge.core.model import ClusterInfo, Interconnect, Link
from coorm_bridge.core.profile import Profile

NOW = 1_700_000_000
HOUR = 3600


def infos(speeds: dict[str, float] | None = None, **hosts: int) -> dict[str, ClusterInfo]:
    speeds = speeds or {}
    return {
        name: ClusterInfo(name=name, hosts=count, speed=speeds.get(name, 1.0))
        for name, count in hosts.items()
    }


def linked(names: list[str], latency_s: float, bandwidth_bps: float) -> Interconnect:
    return Interconnect(
        links=tuple(
            Link(clusters=(a, b), latency_s=latency_s, bandwidth_bps=bandwidth_bps)
            for a, b in itertools.combinations(names, 2)
        )
    )


def steps(*pairs: tuple[int, int]) -> Profile:
    """A profile from ``(seconds after NOW, free hosts)`` pairs; the first holds from NOW."""
    return Profile.from_steps([(NOW + dt, hosts) for dt, hosts in pairs])
