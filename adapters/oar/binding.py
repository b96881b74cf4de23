"""Where one coorm cluster is in OAR: the property value that selects its resources."""

from __future__ import annotations

from dataclasses import dataclass

from coorm_bridge.adapters.batch.backend import Binding
from coorm_bridge.core.model import Submission


@dataclass(frozen=True)
class OarBinding(Binding):
    """Its resources are those whose ``property`` is ``value``; hosts are ``host_property``;
    the commands run on ``front_end`` (None: this host)."""

    property: str = "cluster"
    value: str = ""
    host_property: str = "host"
    front_end: str | None = None

    def submission(self) -> Submission:
        """Launchers ``oarsub -t inner=ID`` into the bridge's container on the same host as the
        bridge's commands."""
        return Submission(kind="oar", cluster=self.value, front_end=self.front_end)
