"""Where one coorm cluster is in OAR: the property value that selects its resources."""

from __future__ import annotations

from dataclasses import dataclass

from coorm_bridge.adapters.batch.backend import Binding
from coorm_bridge.core.model import Submission

#: OAR's own names for the properties (what a launcher assumes when the bridge names none).
CLUSTER_PROPERTY = "cluster"
HOST_PROPERTY = "host"


@dataclass(frozen=True)
class OarBinding(Binding):
    """Its resources are those whose ``property`` is ``value``; hosts are ``host_property``;
    the commands run on ``front_end`` (None: this host)."""

    property: str = CLUSTER_PROPERTY
    value: str = ""
    host_property: str = HOST_PROPERTY
    front_end: str | None = None

    def submission(self) -> Submission:
        """Launchers ``oarsub -t inner=ID`` into the bridge's container on the same host as the
        bridge's commands, restricted by the same properties. A property is named only when it
        is not OAR's default: the answer then stays readable by launchers older than those
        fields."""
        return Submission(
            kind="oar",
            cluster=self.value,
            front_end=self.front_end,
            cluster_property=None if self.property == CLUSTER_PROPERTY else self.property,
            host_property=None if self.host_property == HOST_PROPERTY else self.host_property,
        )
