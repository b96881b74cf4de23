"""``rigid``: a classic rigid job, the same hosts per cluster and walltime whatever the view.

80% of the paper's workloads (W0-W2) are rigid jobs; as a selector it only checks that every
cluster it names is one the application subscribed to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from coorm_bridge.core.model import ClusterInfo, Duration, Interconnect, Name, Request
from coorm_bridge.launchers.selectors.base import Hosts, Params

if TYPE_CHECKING:
    from coorm_bridge.core.profile import Profile


class RigidParams(Params):
    nodes: dict[Name, Hosts] = Field(min_length=1)
    """Hosts per cluster, all started together."""
    duration: Duration
    """Walltime in seconds."""


class Rigid:
    """Always the same request; see the module docstring."""

    Params: ClassVar[type[RigidParams]] = RigidParams
    time_invariant: ClassVar[bool] = True

    def __init__(self, params: RigidParams) -> None:
        self.params = params
        self.request = Request(nodes=params.nodes, duration=params.duration)

    def select(
        self,
        clusters: Mapping[str, ClusterInfo],
        interconnect: Interconnect,
        view: Mapping[str, Profile],
        now: int,
    ) -> Request | None:
        unknown = sorted(set(self.request.nodes) - set(clusters))
        if unknown:
            raise ValueError(f"the rigid request names clusters not subscribed to: {unknown}")
        return self.request

    def horizon(
        self,
        clusters: Mapping[str, ClusterInfo],
        interconnect: Interconnect,
        view: Mapping[str, Profile],
        now: int,
        request: Request,
    ) -> int:
        """No change of the view matters: the answer never reads it."""
        return now
