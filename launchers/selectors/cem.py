"""``cem``: the paper's multi-cluster CEM application (§II), which picks hosts on several clusters.

The application is a finite-element solver (DiscoGrid's electromagnetics code) iterating over a
mesh of ``N`` tetrahedra, partitioned in two levels: one part per cluster, in proportion to the
cluster's computing power, then one sub-part per host; MPI inside a cluster, TCP between them.
The slides list the inputs of its performance model (tetrahedra; per cluster the host count,
power, SAN latency and bandwidth; the maximum WAN latency) but not its formula, so the formula
here is ours, from that structure. On ``n_i`` hosts of speed ``s_i`` per cluster ``i``:

    P         = sum_i n_i s_i                                  total power
    compute   = N e / P                                        balanced: every host ends together
    m         = N max_i(s_i) / P                               tetrahedra on the busiest host
    san       = a + g m^(2/3) b 8 / B          if sum_i n_i > 1   halo exchange inside a cluster
    M_i       = N n_i s_i / P                                  tetrahedra on cluster i
    wan_i     = max_j l_ij + g min(M_i, N - M_i)^(2/3) b 8 / min_j w_ij    (j chosen, j != i)
    wan       = max_i wan_i                    if two clusters or more (0 otherwise)
    run time  = setup + iterations (compute + san + wan)
    walltime  = ceil(run time * margin)

A compact part of ``m`` tetrahedra has about ``g m^(2/3)`` faces on its surface, each sending
``b`` bytes per iteration; a cluster's part shares at most the rest of the mesh's size of surface
with the other parts, through its slowest WAN link, waiting for its farthest peer (the slides'
"maximum inter-cluster latency"). ``l_ij``/``w_ij`` are the interconnect's latency (s) and
bandwidth (bit/s); clusters without a link are never combined. The constants the paper leaves
free are parameters: ``e`` (``element_seconds``, default 1e-5 s per tetrahedron per iteration on
a speed-1 host), ``b`` (``face_bytes``, 144: 3 nodes x 6 field components x 8 bytes for a P1
discontinuous Galerkin scheme), ``g`` (``surface_factor``, 3.6: a cube of ``6 k^3`` tetrahedra
shows ``12 k^2`` faces), ``a``/``B`` (the SAN's ``san_latency_s``, 1e-5, and
``san_bandwidth_bps``, 1e10, which CINFO does not carry) and ``setup`` (``setup_seconds``, 0).

More hosts always compute faster, so the application wants whole clusters (the paper's W3
observation); a second cluster pays off only when the WAN is fast enough for the halo it adds.

The selector minimises the end time: the walltime plus the earliest start where every chosen
cluster holds its hosts for the whole walltime at once, which is how the policy places the
request (at least the latest of each cluster's own earliest start, later when one cluster has its
hosts then but not for the whole run). Ties go to fewer hosts. Exact search is exponential
(``(n_H + 1)^n_C`` configurations), so :class:`_Search` is a heuristic:

1. Candidate starts: ``now`` and every time some cluster frees hosts (the optimum starts at one of
   them), in increasing order, until even all hosts of all clusters could not end earlier than
   the best found; a start is skipped when what is free then cannot (lower bounds from the
   compute term alone, so no start that could win is skipped).
2. At a candidate start, every cluster offers what is free at that moment. Which clusters to
   take whole: the best of greedy addition (the cluster that shortens the run most, while one
   does) from the best single cluster and from the best pair, and of greedy removal from all of
   them (a slow link can make the best pair one that neither holds the fastest cluster nor is
   reached by adding or removing one cluster at a time). Then each cluster offers only what stays
   free over the resulting walltime, and the choice is made again until it fits.
3. Local search from the best: move one cluster at a time to another level of its profile
   (0 included), keeping any change that ends earlier or ends as early on fewer hosts.

Against exhaustive search on 2 to 4 clusters of up to 8 hosts (``tests/launchers/
test_selectors_cem.py``; hypothesis-generated views of up to 8 steps, links of every quality)
it found the optimum in every one of several thousand views; the tests allow 5% on the
completion time and require the optimum in 99.5% of a seeded sample. On 8 clusters of 128 hosts
no move of two clusters at once to other levels improves its choice in the benchmark's views.
It costs a few milliseconds per view there (``benchmarks/launch.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, Annotated, ClassVar

from pydantic import Field

from coorm_bridge.core.model import (
    MAX_BANDWIDTH,
    MAX_DURATION,
    MAX_LATENCY,
    ClusterInfo,
    Interconnect,
    Request,
)
from coorm_bridge.core.steps import Steps, common_start
from coorm_bridge.launchers.selectors.base import Clusters, Margin, Params

if TYPE_CHECKING:
    from coorm_bridge.core.profile import Profile

Counts = tuple[int, ...]
#: Rounds of local search after the candidate starts (each tries every level of every cluster).
ROUNDS = 3
#: Re-choices at one candidate start while the walltime outgrows what stays free.
SHRINKS = 32
#: Walltimes and choices a model keeps across views before it starts again.
MAX_REMEMBERED = 1 << 16
_UNKNOWN = object()


class CEMParams(Params):
    elements: Annotated[int, Field(gt=0, le=10**12, strict=True)]
    """Tetrahedra in the mesh (the problem size)."""
    iterations: Annotated[int, Field(gt=0, le=10**9, strict=True)]
    """Time steps the solver runs."""
    element_seconds: Annotated[float, Field(gt=0, le=3600.0, allow_inf_nan=False)] = 1e-5
    face_bytes: Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)] = 144.0
    surface_factor: Annotated[float, Field(gt=0, le=100.0, allow_inf_nan=False)] = 3.6
    san_latency_s: Annotated[float, Field(ge=0, le=MAX_LATENCY, allow_inf_nan=False)] = 1e-5
    san_bandwidth_bps: Annotated[float, Field(gt=0, le=MAX_BANDWIDTH, allow_inf_nan=False)] = 1e10
    setup_seconds: Annotated[float, Field(ge=0, le=MAX_DURATION, allow_inf_nan=False)] = 0.0
    clusters: Clusters | None = None
    """Clusters the application may use (absent: any cluster of the view)."""
    margin: Margin = 1.0


class Model:
    """The performance model of the module docstring, for clusters in a fixed order."""

    def __init__(
        self, params: CEMParams, infos: Sequence[ClusterInfo], interconnect: Interconnect
    ) -> None:
        self.params = params
        self.speeds = [info.speed for info in infos]
        k = len(infos)
        self.latency: list[list[float | None]] = [[None] * k for _ in range(k)]
        self.bandwidth: list[list[float]] = [[0.0] * k for _ in range(k)]
        for i, a in enumerate(infos):
            for j, b in enumerate(infos):
                link = interconnect.link(a.name, b.name) if i != j else None
                if link is not None:
                    self.latency[i][j] = link.latency_s
                    self.bandwidth[i][j] = link.bandwidth_bps
        n, p = params.elements, params
        self._compute = p.iterations * n * p.element_seconds
        self._halo = p.surface_factor * p.face_bytes * 8.0  # bits per m^(2/3)
        self.durations: dict[Counts, int | None] = {}
        """Walltimes already computed: they depend on the counts alone, not on the view."""
        self.choices: dict[Counts, Counts | None] = {}
        """:meth:`_Search._choose` per free counts: a function of the counts and this model."""

    def remember(self) -> None:
        """Bound what the model keeps across views (a launcher sees a few thousand at most)."""
        if len(self.durations) > MAX_REMEMBERED:
            self.durations.clear()
        if len(self.choices) > MAX_REMEMBERED:
            self.choices.clear()

    def seconds(self, counts: Counts) -> float | None:
        """The run time on ``counts`` hosts per cluster (None: no host, or unlinked clusters)."""
        p, speeds = self.params, self.speeds
        chosen = [i for i, hosts in enumerate(counts) if hosts]
        if not chosen:
            return None
        power = sum(counts[i] * speeds[i] for i in chosen)
        n = p.elements
        step = n * p.element_seconds / power
        if sum(counts) > 1:
            busiest = n * max(speeds[i] for i in chosen) / power
            step += p.san_latency_s + self._halo * busiest ** (2 / 3) / p.san_bandwidth_bps
        if len(chosen) > 1:
            wan = 0.0
            for i in chosen:
                latency, bandwidth = 0.0, math.inf
                for j in chosen:
                    if j == i:
                        continue
                    link_latency = self.latency[i][j]
                    if link_latency is None:
                        return None
                    latency = max(latency, link_latency)
                    bandwidth = min(bandwidth, self.bandwidth[i][j])
                part = n * counts[i] * speeds[i] / power
                wan = max(wan, latency + self._halo * min(part, n - part) ** (2 / 3) / bandwidth)
            step += wan
        return p.setup_seconds + p.iterations * step

    def duration(self, counts: Counts) -> int | None:
        """The walltime to request (None: no such run, or longer than a request may be)."""
        seconds = self.seconds(counts)
        if seconds is None:
            return None
        walltime = math.ceil(seconds * self.params.margin)
        return max(1, walltime) if walltime <= MAX_DURATION else None

    def bound(self, power: float) -> int:
        """A walltime no run with at most ``power`` total speed can beat (compute alone)."""
        p = self.params
        return math.ceil((p.setup_seconds + self._compute / power) * p.margin)


def _by_duration(ranked: tuple[int | None, int, Counts]) -> tuple[int, int, Counts]:
    duration, hosts, counts = ranked
    return (MAX_DURATION + 1 if duration is None else duration, hosts, counts)


class _Search:
    """The heuristic of the module docstring over one view; memoizes the model per counts."""

    def __init__(
        self, model: Model, steps: Sequence[Steps], highs: Sequence[int], now: int
    ) -> None:
        self.model, self.steps, self.highs, self.now = model, steps, highs, now
        self._durations = model.durations
        self._choices = model.choices

    def duration(self, counts: Counts) -> int | None:
        found = self._durations.get(counts, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._durations[counts] = self.model.duration(counts)
        return found  # type: ignore[return-value]  # _UNKNOWN was replaced

    def rank(self, counts: Counts) -> tuple[int, int, Counts] | None:
        """``(end, hosts, counts)``: what the search minimises (None: never fits)."""
        duration = self.duration(counts)
        if duration is None:
            return None
        demands = [(self.steps[i], hosts) for i, hosts in enumerate(counts) if hosts]
        start = common_start(demands, duration, self.now)
        return None if start is None else (start + duration, sum(counts), counts)

    def run(self) -> Counts | None:
        speeds = self.model.speeds
        starts = sorted({t for steps in self.steps for t in steps.rises()})
        whole = sum(high * speed for high, speed in zip(self.highs, speeds, strict=True))
        floor = self.model.bound(whole)
        best: tuple[int, int, Counts] | None = None
        for t in starts:
            if best is not None and t + floor >= best[0]:
                break
            free = tuple(
                min(steps.value_at(t), high)
                for steps, high in zip(self.steps, self.highs, strict=True)
            )
            power = sum(hosts * speed for hosts, speed in zip(free, speeds, strict=True))
            if not power or (best is not None and t + self.model.bound(power) >= best[0]):
                continue
            counts = self._fit_at(t, free)
            found = None if counts is None else self.rank(counts)
            if found is not None and (best is None or found < best):
                best = found
        return None if best is None else self._improve(best)[2]

    def _fit_at(self, t: int, free: Counts) -> Counts | None:
        """Step 2: a choice that fits from ``t`` for its whole walltime, or None."""
        for _ in range(SHRINKS):
            counts = self._choose(free)
            duration = None if counts is None else self.duration(counts)
            if counts is None or duration is None:
                return None
            kept = tuple(
                min(hosts, steps.min_over(t, t + duration)) if hosts else 0
                for hosts, steps in zip(free, self.steps, strict=True)
            )
            if all(want <= have for want, have in zip(counts, kept, strict=True)):
                return counts
            free = kept
        return None

    def _choose(self, free: Counts) -> Counts | None:
        """Whole free counts on the clusters that run fastest together.

        The best of greedy addition from the best single cluster, from the best pair, and
        greedy removal from all: a slow link can make the best pair one that holds neither the
        fastest cluster nor anything a one-at-a-time removal reaches.
        """
        if free not in self._choices:
            left = [i for i, hosts in enumerate(free) if hosts]
            seeds: list[Counts] = [tuple(free)]
            for size in (1, 2):
                tried = [
                    (self.duration(c), sum(c), c)
                    for group in combinations(left, size)
                    for c in [tuple(free[i] if i in group else 0 for i in range(len(free)))]
                ]
                valid = [t for t in tried if t[0] is not None]
                if valid:
                    seeds.append(min(valid, key=_by_duration)[2])
            found = [self._greedy(free, seed) for seed in seeds]
            ranked = [(self.duration(c), sum(c), c) for c in found if c is not None]
            self._choices[free] = min(ranked, key=_by_duration)[2] if ranked else None
        return self._choices[free]

    def _greedy(self, free: Counts, seed: Counts) -> Counts | None:
        """From ``seed``, add (seeds of one or two clusters) or remove (the seed of all) the
        cluster that shortens the run most, while one does."""
        adding = seed != free
        counts = list(seed)
        left = [i for i, hosts in enumerate(free) if hosts and (counts[i] == 0) == adding]
        best = self.duration(seed)
        while left:
            trials = []
            for i in left:
                counts[i] = free[i] if adding else 0
                duration = self.duration(tuple(counts))
                counts[i] = 0 if adding else free[i]
                if duration is not None:
                    trials.append((duration, i))
            if not trials or (best is not None and min(trials)[0] >= best):
                break
            best, chosen = min(trials)
            counts[chosen] = free[chosen] if adding else 0
            left.remove(chosen)
        return None if best is None else tuple(counts)

    def _improve(self, best: tuple[int, int, Counts]) -> tuple[int, int, Counts]:
        """Step 3: one cluster at a time to another level of its profile, while it helps."""
        levels = [
            [0, *steps.levels(high)] for steps, high in zip(self.steps, self.highs, strict=True)
        ]
        for _ in range(ROUNDS):
            improved = False
            for i, options in enumerate(levels):
                for hosts in options:
                    counts = best[2]
                    if hosts == counts[i]:
                        continue
                    trial = self.rank((*counts[:i], hosts, *counts[i + 1 :]))
                    if trial is not None and trial < best:
                        best, improved = trial, True
            if not improved:
                break
        return best


class CEM:
    """The CEM selector; see the module docstring. It keeps the model of the clusters it last
    saw, with the walltimes and choices computed on it (they depend on host counts only), so
    that the next view reuses them: an answer is still a function of the view alone."""

    Params: ClassVar[type[CEMParams]] = CEMParams
    time_invariant: ClassVar[bool] = True

    def __init__(self, params: CEMParams) -> None:
        self.params = params
        self._last: tuple[tuple[ClusterInfo, ...], Interconnect, Model] | None = None

    def _model(self, infos: Sequence[ClusterInfo], interconnect: Interconnect) -> Model:
        key = tuple(infos)
        if self._last is not None and self._last[0] == key and self._last[1] == interconnect:
            model = self._last[2]
            model.remember()
            return model
        model = Model(self.params, infos, interconnect)
        self._last = (key, interconnect, model)
        return model

    def usable(
        self, clusters: Mapping[str, ClusterInfo], view: Mapping[str, Profile]
    ) -> list[ClusterInfo]:
        """The clusters the search runs over: in the view, known, allowed; sorted by name."""
        allowed = self.params.clusters
        return [
            clusters[name]
            for name in sorted(view)
            if name in clusters and (allowed is None or name in allowed)
        ]

    def select(
        self,
        clusters: Mapping[str, ClusterInfo],
        interconnect: Interconnect,
        view: Mapping[str, Profile],
        now: int,
    ) -> Request | None:
        infos = self.usable(clusters, view)
        if not infos:
            return None
        model = self._model(infos, interconnect)
        steps = [Steps.of(view[info.name], now) for info in infos]
        counts = _Search(model, steps, [info.hosts for info in infos], now).run()
        duration = None if counts is None else model.duration(counts)
        if counts is None or duration is None:
            return None
        nodes = {info.name: hosts for info, hosts in zip(infos, counts, strict=True)}
        return Request(nodes=nodes, duration=duration)
