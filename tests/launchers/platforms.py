"""Hand-made and generated platforms and views for the selector tests, and exhaustive search.

Exhaustive search places every configuration with the core's ``earliest_start`` (numpy
profiles, as the policy does), not with the selectors' own step walker: it checks that too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import strategies as st

from coorm_bridge.core.model import ClusterInfo, Interconnect, Link
from coorm_bridge.core.profile import Profile, earliest_start
from coorm_bridge.launchers.selectors.cem import CEMParams, Model

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


@dataclass(frozen=True)
class Case:
    clusters: dict[str, ClusterInfo]
    interconnect: Interconnect
    view: dict[str, Profile]
    now: int
    params: CEMParams


@st.composite
def small_cases(draw: st.DrawFn) -> Case:
    """2 to 4 clusters of up to 5 hosts (up to 1,296 configurations), views of up to 8 steps
    around ``now``, links of every quality (some missing), problems from seconds to hours."""
    count = draw(st.integers(2, 4))
    names = [f"c{i}" for i in range(count)]
    clusters = {
        name: ClusterInfo(
            name=name,
            hosts=draw(st.integers(1, 5 if count > 2 else 8)),
            speed=draw(st.sampled_from([0.5, 1.0, 1.1, 1.3, 2.0])),
        )
        for name in names
    }
    links = []
    for a, b in itertools.combinations(names, 2):
        if draw(st.integers(0, 9)):
            links.append(
                Link(
                    clusters=(a, b),
                    latency_s=draw(st.sampled_from([1e-5, 1e-3, 1e-2, 0.1])),
                    bandwidth_bps=draw(st.sampled_from([1e6, 1e8, 1e9, 1e11])),
                )
            )
    now = NOW + draw(st.integers(0, 100))
    view = {}
    for name in names:
        t = NOW - draw(st.integers(0, 50))
        pairs = []
        for _ in range(draw(st.integers(1, 8))):
            pairs.append((t, draw(st.integers(0, clusters[name].hosts))))
            t += draw(st.integers(1, 600))
        view[name] = Profile.from_steps(pairs)
    params = CEMParams(
        elements=draw(st.sampled_from([10**3, 10**4, 10**5, 10**6])),
        iterations=draw(st.sampled_from([10, 100, 1000])),
        element_seconds=draw(st.sampled_from([1e-6, 1e-5, 1e-4])),
        setup_seconds=draw(st.sampled_from([0.0, 30.0])),
        margin=draw(st.sampled_from([1.0, 1.2])),
    )
    return Case(clusters, Interconnect(links=tuple(links)), view, now, params)


def exhaustive(case: Case) -> tuple[int, int] | None:
    """``(end, hosts)`` of the best configuration of all ``prod(hosts + 1) - 1``."""
    order = sorted(case.view)
    model = Model(case.params, [case.clusters[name] for name in order], case.interconnect)
    best = None
    for counts in itertools.product(*(range(case.clusters[name].hosts + 1) for name in order)):
        duration = model.duration(counts)
        if duration is None:
            continue
        nodes = {name: hosts for name, hosts in zip(order, counts, strict=True) if hosts}
        start = earliest_start(case.view, nodes, duration, case.now)
        if start is not None and (best is None or (start + duration, sum(counts)) < best):
            best = (start + duration, sum(counts))
    return best
