"""What the service counts as it works: the figures ``/metrics`` shows, and the pass count a
request's answer waits on.

One object, made by the composition root (:mod:`.wiring`) and handed to each part that counts,
so that the HTTP layer reads the figures here rather than inside the parts that make them. Each
counter is a plain integer bumped where its event happens (a scrape may read one a moment old).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from coorm_bridge.core.policy import Counters


@dataclass
class Stats:
    """The service's counters since the start, and the long polls open now."""

    policy: Counters
    """The policy's own: passes, notifications, computed configurations, recomputed starts (the
    paper's cost measures)."""
    passes: int = 0
    """Passes recorded: a request's answer waits until this passes the count it was given."""
    placements: int = 0
    """Applications started on their placeholders."""
    placement_failures: int = 0
    """Co-allocations that failed and were rolled back."""
    session_errors: int = 0
    """Sessions set aside after an unexpected error."""
    reconciliations: int = 0
    """Reconciliation passes run (the first one before the daemon serves)."""
    repairs: Counter[str] = field(default_factory=Counter)
    """Repairs made by reconciliation, per action (orphans, recreated, adopted, ...)."""
    reservation_calls: Counter[str] = field(default_factory=Counter)
    """Reservation calls made to the batch systems, per call (create, update, delete)."""
    unheeded: int = 0
    """View changes not sent: every one lay past the horizon the session's launcher gave
    (:mod:`.quiet`)."""
    long_polls: int = 0
    """Long polls waiting for their session's events now (a gauge, kept by the HTTP layer)."""
