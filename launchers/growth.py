"""Growth rules: what an evolving code's step report says about the hosts of its next step.

An evolving application (``kind = "evolving"``) runs in steps. At the end of each step its code
writes a report, a JSON object, to ``$COORM_REPORT`` (``{"done": true}`` when it has finished),
and exits. The rule named in the file's ``[growth]`` table reads that report and answers how many
hosts the next step needs; the launcher keeps it within the pre-allocation. Rules are plug-ins
like selectors: an entry point of ``coorm_bridge.growth_rules``, or ``module:Class`` shipped with
the application, with a ``Params`` model for the table's ``params``.

A rule must be a pure function of the report and the hosts now.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Protocol, cast

from pydantic import Field

from coorm_bridge.core.model import MAX_COUNT, Name
from coorm_bridge.launchers import plugins
from coorm_bridge.launchers.selectors.base import Params as PluginParams

GROUP = "coorm_bridge.growth_rules"


class ReportError(ValueError):
    """A step's report lacks what the rule reads; the message says which key and what it got."""


class GrowthRule(Protocol):
    def next_hosts(self, report: Mapping[str, Any], hosts: int) -> int:
        """Hosts the next step needs, after a step on ``hosts`` hosts reported ``report``."""
        ...


def _number(report: Mapping[str, Any], key: str) -> float:
    value = report.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ReportError(f"the step's report has no number {key!r} (it has {value!r})")
    return float(value)


class Reported:
    """The code says itself how many hosts it needs next (``{"hosts": 6}``)."""

    class Params(PluginParams):
        key: Name = "hosts"

    def __init__(self, params: Params) -> None:
        self.key = params.key

    def next_hosts(self, report: Mapping[str, Any], hosts: int) -> int:
        return max(1, math.ceil(_number(report, self.key)))


class DataSize:
    """The code reports its data size (the slides' normalized data size); each host holds at
    most ``per_host`` of it: hosts = ceil(size / per_host), at least ``min_hosts``."""

    class Params(PluginParams):
        key: Name = "data_size"
        per_host: Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)]
        min_hosts: Annotated[int, Field(ge=1, le=MAX_COUNT, strict=True)] = 1

    def __init__(self, params: Params) -> None:
        self.params = params

    def next_hosts(self, report: Mapping[str, Any], hosts: int) -> int:
        size = _number(report, self.params.key)
        if size < 0:
            raise ReportError(f"the step's report gives a negative {self.params.key!r}: {size}")
        return max(self.params.min_hosts, math.ceil(size / self.params.per_host - 1e-9))


def create_rule(
    name: str, params: Mapping[str, object], where: str = "growth.params"
) -> GrowthRule:
    """The rule ``name`` built from the file's parameters (errors name the key)."""
    cls = plugins.load_plugin(GROUP, "growth rule", name, "next_hosts")
    return cast("GrowthRule", cls(plugins.validated(cls, "growth rule", name, params, where)))


__all__ = ["GROUP", "DataSize", "GrowthRule", "ReportError", "Reported", "create_rule"]
