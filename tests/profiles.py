"""Hypothesis profiles, chosen by the environment variable ``HYPOTHESIS_PROFILE``:

- ``dev`` (the default): few examples, for a contributor who runs the suite often;
- ``ci`` (.ci/run sets it): many more, derandomized (each run tries the same examples, so a
  failure in CI fails again at home with ``HYPOTHESIS_PROFILE=ci``), no example database.

Neither has a deadline: a run in parallel on a busy machine makes any one example slow. A test
whose examples are each costly (a subprocess, a daemon's worth of steps) asks for ``fewer(n)``
with its reason: at most ``n``, and no more than the profile gives.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = {
    "dev": settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]),
    "ci": settings(
        max_examples=100,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    ),
}
VARIABLE = "HYPOTHESIS_PROFILE"


def load() -> None:
    """Register the profiles and load the one ``HYPOTHESIS_PROFILE`` names (``dev``)."""
    for name, profile in PROFILES.items():
        settings.register_profile(name, profile)
    name = os.environ.get(VARIABLE) or "dev"
    if name not in PROFILES:
        raise ValueError(f"{VARIABLE}={name}: not one of {', '.join(PROFILES)}")
    settings.load_profile(name)


def fewer(count: int) -> int:
    """``count`` examples, or the loaded profile's number if that is smaller."""
    return min(count, settings.default.max_examples)


def more(factor: int) -> int:
    """``factor`` times the loaded profile's number of examples."""
    return factor * settings.default.max_examples
