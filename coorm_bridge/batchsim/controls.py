"""What a test or an experiment does to a simulated site that its clients cannot.

A client of a batch system (the bridge, a launcher) reads it and asks for reservations and jobs;
only the simulation's owner moves its virtual time, injects faults (an outage, refusals, a node
down, a user forgotten) or changes the site itself (an upgrade, new links). Those are here, apart
from :class:`.Site`'s client calls, so that an adapter over a site exposes only what a real batch
system would. Each change is a journaled call like any other (:mod:`.calls`): a restarted site
has the same faults at the same times.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from coorm_bridge.batchsim import calls
from coorm_bridge.batchsim.clock import VirtualClock
from coorm_bridge.core.batch import AdapterError, NodeState
from coorm_bridge.core.model import ClusterInfo, Link

if TYPE_CHECKING:
    from coorm_bridge.batchsim.simulation import Simulation
    from coorm_bridge.batchsim.site import Site


class SiteControls:
    """The controls of one :class:`.Site` (its :attr:`~.Site.controls`), whose state is
    ``simulation``."""

    def __init__(self, site: Site, simulation: Simulation) -> None:
        self._site = site
        self._simulation = simulation

    # -- time ---------------------------------------------------------------------------------

    def run_until(self, t: int) -> None:
        """Replay every event up to ``t`` on a virtual clock (an error on a wall clock): the
        clock stops at each event's time, so that whatever it calls back sees the site then."""
        site = self._site
        clock = site.clock
        if not isinstance(clock, VirtualClock):
            raise AdapterError("run_until needs a virtual clock; a wall clock runs by itself")
        with site.lock:
            while (due := self._simulation.next_event_time()) is not None and due <= t:
                clock.advance_to(max(due, clock.now()))
                site.sync()
            clock.advance_to(max(t, clock.now()))
            site.sync()

    def next_event_time(self) -> int | None:
        """When the site next changes by itself (None: idle until someone acts)."""
        with self._site.lock:
            return self._simulation.next_event_time()

    # -- faults -------------------------------------------------------------------------------

    def outage(self, cluster: str, start: int, end: int) -> None:
        """The cluster's batch system does not answer during ``[start, end)`` (Unavailable)."""
        self._site.execute(calls.Outage(cluster=cluster, start=start, end=end))

    def refuse_reservations(self, cluster: str, count: int = 1, reason: str = "") -> None:
        """The next ``count`` reservation requests on ``cluster`` are refused."""
        reason = reason or "Requested nodes are busy"
        self._site.execute(calls.RefuseReservations(cluster=cluster, count=count, reason=reason))

    def set_node_state(
        self, cluster: str, host: str, state: NodeState, at: int | None = None
    ) -> None:
        """A node goes down, is drained, or comes back, now or at ``at``."""
        self._site.execute(calls.SetNodeState(cluster=cluster, host=host, state=state, at=at))

    def forget_user(self, user: str) -> None:
        """The batch system no longer knows ``user`` (as a uid with no passwd entry there):
        reservations for it are refused for good (:class:`NotPermitted`)."""
        self._site.execute(calls.ForgetUser(user=user))

    # -- the site itself ----------------------------------------------------------------------

    def upgrade(self, cluster: str, /, **properties: object) -> ClusterInfo:
        """The site changed a cluster's cores, RAM, scratch or speed (an upgrade, a new CPU
        generation): what ``clusters()`` reports from now on. Its hosts stay as they are: take
        hosts down with :meth:`set_node_state`."""
        call = calls.Upgrade.model_validate({"cluster": cluster, "properties": properties})
        info = self._site.execute(call)
        assert isinstance(info, ClusterInfo)
        return info

    def set_links(self, links: Iterable[Link]) -> None:
        """The links between clusters changed (a new WAN link, a slower one): what
        ``interconnect()`` reports from now on."""
        self._site.execute(calls.SetLinks(links=tuple(links)))
