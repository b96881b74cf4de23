"""The evolving application of ``coorm-sim evolving``: an adaptive mesh refinement (AMR) code.

Its data grows as the mesh is refined and shrinks as refinement is undone, in a way the code
learns only as it runs (the CooRMv2 slides' "normalized data size" curve). We draw one such
curve per seed: a random walk in log-size that rises for a random share of the run and then
mostly falls (with upticks), normalised so that its peak is exactly 1. The code runs ``periods``
periods of ``period`` seconds of computation each; in period ``k`` it needs
``ceil(size[k] * peak)`` hosts (memory-bound: fewer hosts cannot hold the data, more do not
make it faster). It knows its peak (the largest mesh memory allows) and its total computation,
not the curve: it learns each period's need when the period begins.

:class:`Progress` is the code's run: what it has computed, whether it runs, and the seconds it
loses restarting on a new allocation (a checkpoint, new ranks, the data redistributed).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


def data_sizes(seed: int, periods: int) -> tuple[float, ...]:
    """The seed's normalised data size per period (peak exactly 1, every size > 0).

    Seeded from ``seed`` alone (no global random state): the same seed gives the same curve in
    every process."""
    if periods < 1:
        raise ValueError("an AMR run has at least one period")
    rng = random.Random(f"amr-curve/{seed}")  # noqa: S311 - reproducible, not cryptography
    rising = max(1, round(periods * rng.uniform(0.35, 0.7)))
    start = rng.uniform(0.1, 0.3)  # the first mesh against the peak, before normalising
    rise = math.log(1 / start) / rising
    fall = rise * rng.uniform(0.4, 1.0)
    level = 0.0
    sizes = []
    for k in range(periods):
        sizes.append(math.exp(level))
        if k + 1 < rising:
            level += rise * rng.uniform(0.0, 2.0)  # refining: by jumps of random size
        else:
            level -= fall * rng.uniform(-0.5, 1.5)  # coarsening, with upticks
    top = max(sizes)
    return tuple(max(size / top, 1e-3) for size in sizes)


def host_needs(sizes: tuple[float, ...], peak: int) -> tuple[int, ...]:
    """Hosts needed per period: ``ceil(size * peak)``, at least one (so the peak needs ``peak``)."""
    return tuple(max(1, math.ceil(size * peak - 1e-9)) for size in sizes)


@dataclass
class Progress:
    """The AMR code's run, in virtual time. It computes only while it holds an allocation it
    has been started on; each start after the first costs ``restart`` seconds first."""

    needs: tuple[int, ...]
    period: int
    restart: int
    k: int = 0
    """The period being computed (``len(needs)``: finished)."""
    left: int = field(init=False)
    """Seconds of computation left in period ``k``."""
    since: int | None = None
    """Running (restarting or computing) since then; None: stopped."""
    ready: int = 0
    """When computation (re)begins once restarted."""
    first: int | None = None
    end: int | None = None
    restarts: int = 0

    def __post_init__(self) -> None:
        self.left = self.period

    @property
    def finished(self) -> bool:
        return self.k >= len(self.needs)

    @property
    def running(self) -> bool:
        return self.since is not None

    @property
    def need(self) -> int:
        """Hosts the current period needs (0 once finished)."""
        return 0 if self.finished else self.needs[self.k]

    def remaining(self) -> int:
        """Seconds of computation still to do."""
        return 0 if self.finished else self.left + (len(self.needs) - self.k - 1) * self.period

    def start(self, now: int) -> None:
        """Begin, or resume from its checkpoint, on a new allocation."""
        assert not self.finished
        again = self.first is not None
        if self.first is None:
            self.first = now
        self.since = now
        self.ready = now + (self.restart if again else 0)
        self.restarts += again

    def stop(self, now: int) -> None:
        """Checkpoint and stop: the computation done so far is kept, a restart under way is
        lost."""
        if self.since is None:
            return
        self.left -= max(0, now - self.ready)
        self.since = None

    def milestone(self) -> int | None:
        """When the current period ends, if it runs."""
        return None if self.since is None else self.ready + self.left

    def reach(self, now: int) -> bool:
        """At :meth:`milestone`: the period is done, the next begins (True); else False."""
        due = self.milestone()
        if due is None or now < due:
            return False
        self.k += 1
        self.left = self.period
        self.ready = now
        if self.finished:
            self.since = None
            self.end = now
        return True
