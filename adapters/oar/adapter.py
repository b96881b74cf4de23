"""OarAdapter: the generic :class:`~coorm_bridge.adapters.batch.adapter.BatchAdapter` with an OAR
back-end (commands or REST API) and one binding per configured cluster."""

from __future__ import annotations

from coorm_bridge.adapters.batch.adapter import BatchAdapter
from coorm_bridge.adapters.batch.backend import Backend
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.adapters.oar.settings import OarSettings


def bindings_of(settings: OarSettings) -> list[OarBinding]:
    front_end = None if settings.ssh is None else settings.ssh.host
    return [
        OarBinding(
            cluster.name,
            property=settings.property,
            value=cluster.selector,
            host_property=settings.host_property,
            front_end=front_end,
        )
        for cluster in settings.clusters
    ]


class OarAdapter(BatchAdapter[OarBinding]):
    """The clusters of one OAR server, each the resources of one property value."""

    system = "OAR"

    def __init__(self, settings: OarSettings, backend: Backend[OarBinding]) -> None:
        super().__init__(settings, backend, bindings_of(settings))
        self.lead = settings.reservation_lead
        self.gap = settings.security_time + 1
        self.by_name = frozenset(c.name for c in settings.clusters if c.value is None)
        """The clusters whose resources are those of their name's value (no ``value`` given)."""

    def setting_key(self, cluster: str, key: str | None) -> str:
        """A cluster without a ``value`` selects its resources by its ``name``: that is the
        key to change."""
        if key == "value" and cluster in self.by_name:
            key = "name"
        return super().setting_key(cluster, key)

    def reservation_gap(self, cluster: str) -> int:
        """OAR's security time after a job, and the second its ends are inclusive of."""
        return self.gap

    def reservation_lead(self) -> int:
        """OAR validates a reservation at its next scheduler pass and starts one asked for an
        earlier time at that pass (4 to 7 s later on the test OAR)."""
        return self.lead
