"""``moldable``: one component with an Amdahl speed-up, the paper's simple-moldable jobs.

On ``n`` hosts of a cluster of speed ``s`` a run of sequential work ``W`` (seconds on a speed-1
host) with serial fraction ``f`` lasts ``W / s * (f + (1 - f) / n)`` (Amdahl's law), times the
margin, rounded up to whole seconds. The selector picks the cluster and host count that end
first: the earliest start where that many hosts stay free for the whole run, plus the run.

The search is exact and cheap: a host count fits exactly where the smallest level of the profile
at or above it fits, and more hosts never run longer, so the earliest end is found among the
profile's levels (capped at ``max_hosts``) and ``min_hosts``: tens per cluster instead of every
count. Ties go to fewer hosts, then to the cluster whose name sorts first, among ``min_hosts`` and
the levels taken before that earliest end (a level taken only later fits no earlier than the
smallest level above it taken before, so it adds nothing but a tie): the answer does not depend on
the profile from its end on, which lets :meth:`Moldable.horizon` be exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, ClassVar

from pydantic import Field, ValidationInfo, field_validator

from coorm_bridge.core.model import MAX_DURATION, ClusterInfo, Interconnect, Request
from coorm_bridge.core.steps import Steps
from coorm_bridge.launchers.selectors.base import Clusters, Hosts, Margin, Params, Work

if TYPE_CHECKING:
    from coorm_bridge.core.profile import Profile


class MoldableParams(Params):
    work: Work
    """Sequential work: seconds the whole run takes on one host of speed 1."""
    serial_fraction: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
    """The part of the work that does not parallelise (Amdahl's f)."""
    min_hosts: Hosts = 1
    max_hosts: Hosts | None = None
    """At most this many hosts (absent: a whole cluster)."""
    clusters: Clusters | None = None
    """Clusters the run may use (absent: any cluster of the view)."""
    margin: Margin = 1.0

    @field_validator("max_hosts")
    @classmethod
    def _not_below_min(cls, value: int | None, info: ValidationInfo) -> int | None:
        low = info.data.get("min_hosts")
        if value is not None and low is not None and value < low:
            raise ValueError(f"max_hosts ({value}) is below min_hosts ({low})")
        return value


class Moldable:
    """Amdahl moldable selector; see the module docstring."""

    Params: ClassVar[type[MoldableParams]] = MoldableParams
    time_invariant: ClassVar[bool] = True

    def __init__(self, params: MoldableParams) -> None:
        self.params = params

    def run_time(self, info: ClusterInfo, hosts: int) -> float:
        """Seconds ``hosts`` hosts of ``info`` take (Amdahl), before the margin."""
        f = self.params.serial_fraction
        return self.params.work / info.speed * (f + (1.0 - f) / hosts)

    def duration(self, info: ClusterInfo, hosts: int) -> int | None:
        """The walltime to request, or None when it exceeds what a request may carry."""
        seconds = math.ceil(self.run_time(info, hosts) * self.params.margin)
        return max(1, seconds) if seconds <= MAX_DURATION else None

    def select(
        self,
        clusters: Mapping[str, ClusterInfo],
        interconnect: Interconnect,
        view: Mapping[str, Profile],
        now: int,
    ) -> Request | None:
        p = self.params
        best: tuple[int, int, str, int] | None = None  # end, hosts, cluster, duration
        usable: list[tuple[str, ClusterInfo, Steps, int]] = []
        for name in sorted(view):
            info = clusters.get(name)
            if info is None or (p.clusters is not None and name not in p.clusters):
                continue
            high = min(info.hosts, p.max_hosts or info.hosts)
            if high < p.min_hosts:
                continue
            steps = Steps.of(view[name], now)
            usable.append((name, info, steps, high))
            for hosts in {p.min_hosts, *steps.levels(high)}:
                candidate = self._candidate(name, info, steps, hosts, now)
                if candidate is not None and (best is None or candidate < best):
                    best = candidate
        if best is None:
            return None
        end = best[0]
        ties = [
            candidate
            for name, info, steps, high in usable
            for hosts in {p.min_hosts, *steps.levels(high, before=end)}
            if (candidate := self._candidate(name, info, steps, hosts, now)) is not None
            and candidate[0] == end
        ]
        _, hosts, name, duration = min(ties)
        return Request(nodes={name: hosts}, duration=duration)

    def _candidate(
        self, name: str, info: ClusterInfo, steps: Steps, hosts: int, now: int
    ) -> tuple[int, int, str, int] | None:
        """(end, hosts, cluster, duration) of ``hosts`` hosts on this cluster, None: never."""
        if hosts < self.params.min_hosts:
            return None
        duration = self.duration(info, hosts)
        if duration is None:
            return None
        start = steps.earliest_fit(hosts, duration, now)
        return None if start is None else (start + duration, hosts, name, duration)

    def horizon(
        self,
        clusters: Mapping[str, ClusterInfo],
        interconnect: Interconnect,
        view: Mapping[str, Profile],
        now: int,
        request: Request,
    ) -> int | None:
        """The end of ``request`` in ``view``: nothing from then on can alter the answer.

        The search is exact: the answer ends first (then fewest hosts, then first name). A
        change from ``E`` on leaves the answer's own start ``s`` and end ``E`` as they are while
        the time has not passed ``s`` (its window lies before ``E``). Another choice could start
        earlier only in a window reaching past ``E``, so it would end after ``E``; one starting
        no earlier ends no earlier than it did, and ties are broken as before."""
        if len(request.nodes) != 1:
            return None
        ((name, hosts),) = request.nodes.items()
        if name not in view:
            return None
        start = Steps.of(view[name], now).earliest_fit(hosts, request.duration, now)
        return None if start is None else start + request.duration
