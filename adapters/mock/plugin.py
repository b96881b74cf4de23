"""``[adapter]`` with ``kind = "mock"``: the simulated platform, on the wall clock."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.adapters.mock.clock import WallClock
from coorm_bridge.adapters.mock.limits import SPEEDUP_LIMIT
from coorm_bridge.adapters.mock.platform import load_platform
from coorm_bridge.adapters.registry import AdapterContext, AdapterPlugin, AdapterSettings


class MockSettings(AdapterSettings):
    """The platform file and how fast its time runs."""

    kind: Literal["mock"] = "mock"
    platform: Path | None = None
    """Platform file; None: the packaged default (three clusters)."""
    speedup: Annotated[float, Field(gt=0, allow_inf_nan=False), SPEEDUP_LIMIT] = 1.0
    """Simulated seconds per real second (see limits.MAX_SPEEDUP for the bound)."""


def create(settings: MockSettings, context: AdapterContext) -> MockAdapter:
    """A fresh simulation starting now (its state lives in memory: the daemon's reconciliation
    re-creates the placeholders a restart loses)."""
    spec = load_platform(settings.platform)
    return MockAdapter(spec, WallClock(speedup=settings.speedup, origin=spec.start))


PLUGIN = AdapterPlugin(kind="mock", settings=MockSettings, create=create)
