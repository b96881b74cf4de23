"""The paper's workloads (§IV-A) from a real trace: packs of 200 consecutive jobs arriving one
per second, made of rigid, simple-moldable (Amdahl) and CEM applications.

- ``W0``: every job of the pack; 20% of them, drawn at random, are simple-moldable with an
  Amdahl speed-up, the others rigid with the trace's host count and run time.
- ``W1``: ``W0`` with one CEM application inserted at a random place (201 applications).
- ``W2``: ``W0`` with half of its jobs, drawn at random, replaced by CEM applications.
- ``W3``: every job replaced by a CEM application.

The draws depend only on the trace, the pack and what they decide (not on the workload), so the
rigid and moldable jobs W2 keeps are those of W0. Every choice the paper leaves open is here:

- A rigid job may run on any cluster (the trace does not say which), its run time divided by the
  cluster's speed; it asks for the cluster where it ends first (the ``moldable`` selector with one
  host count: ``n_C`` configurations, as OAR is given).
- A moldable job's serial fraction is uniform in [0, 0.2]; its work is what makes the trace's run
  time on the trace's host count on a speed-1 host; it may take 1 to ``n_H`` hosts of one cluster.
- Requested walltime over run time is the trace's when it records one (at most 10); neither
  shipped trace does, so it is uniform in [1, 3] (the mock's synthetic load's rule): applications
  ask for more than they use and end early, as real ones do, which is what ghosts are about.
- A CEM application's mesh has log-uniform 10^6 to 10^8 tetrahedra and runs 2,000 iterations
  (from a few minutes to a few hours on a whole cluster); its model is exact (margin 1).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

from coorm_bridge.batchsim import ReplayJob, read_swf, replay_jobs, trace_path
from coorm_bridge.launchers.selectors.base import Selector
from coorm_bridge.launchers.selectors.cem import CEM, CEMParams
from coorm_bridge.launchers.selectors.moldable import Moldable, MoldableParams

#: Applications per pack, and seconds between two arrivals.
PACK = 200
ARRIVAL_GAP = 1
MOLDABLE_SHARE = 0.2
MAX_SERIAL_FRACTION = 0.2
CEM_ELEMENTS = (1e6, 1e8)
CEM_ITERATIONS = 2000
OVERESTIMATE = (1.0, 3.0)
#: Processors per host when replaying a trace onto 128-host clusters: Lublin's model is for a
#: 256-processor machine, NASA's iPSC/860 had 128 nodes.
PROCS_PER_HOST = {"nasa": 1, "lublin": 2}
TRACE_NAMES = {
    "nasa": "NASA-iPSC-1993-3.1-cln (128 nodes)",
    "lublin": "lublin_256 (Lublin-Feitelson model, 256 processors)",
}


class Workload(StrEnum):
    W0 = "W0"
    W1 = "W1"
    W2 = "W2"
    W3 = "W3"


class Kind(StrEnum):
    RIGID = "rigid"
    MOLDABLE = "moldable"
    CEM = "cem"


@dataclass(frozen=True)
class SimApp:
    """One application of a workload: when it subscribes, how it chooses, how long it runs."""

    id: str
    arrival: int
    kind: Kind
    selector: Selector
    margin: float
    """Requested walltime over real run time: the application sends ``done`` that much early."""

    def run_time(self, duration: int) -> int:
        """Seconds it really runs on a request of ``duration`` seconds."""
        return max(1, min(duration, math.floor(duration / self.margin)))


@cache
def trace_jobs(trace: str, hosts: int) -> tuple[ReplayJob, ...]:
    """Every usable job of a shipped trace, for clusters of ``hosts`` hosts."""
    replay = replay_jobs(
        read_swf(trace_path(trace)),
        procs_per_host=PROCS_PER_HOST[trace],
        max_hosts=hosts,
        too_large="clamp",
    )
    return tuple(replay)


def packs(trace: str, hosts: int, size: int = PACK) -> int:
    """How many whole packs the trace holds."""
    return len(trace_jobs(trace, hosts)) // size


def workload(kind: Workload, trace: str, pack: int, hosts: int, size: int = PACK) -> list[SimApp]:
    """The applications of one pack of ``size`` jobs (the paper's 200 unless a quick run asks
    for fewer), in arrival order, one per second from time 0."""
    jobs = trace_jobs(trace, hosts)
    if not 0 <= pack < len(jobs) // size:
        raise ValueError(f"trace {trace} has packs 0 to {len(jobs) // size - 1}, not {pack}")
    chosen = jobs[pack * size : (pack + 1) * size]
    draw = _draws(trace, pack)
    share = draw("moldable")
    moldable = {i for i in range(size) if share.random() < MOLDABLE_SHARE}
    cem: set[int] = set()
    if kind is Workload.W2:
        cem = set(draw("cem").sample(range(size), size // 2))
    elif kind is Workload.W3:
        cem = set(range(size))
    sizes = draw("size")
    serial = draw("serial")
    overestimate = draw("margin")
    apps: list[SimApp] = []
    for i, job in enumerate(chosen):
        elements = _log_uniform(sizes, *CEM_ELEMENTS)
        fraction = serial.uniform(0.0, MAX_SERIAL_FRACTION)
        ratio = job.walltime / job.runtime
        margin = min(10.0, ratio) if ratio > 1 else overestimate.uniform(*OVERESTIMATE)
        if i in cem:
            apps.append(_cem(f"j{i}", elements))
        elif i in moldable:
            apps.append(_moldable(f"j{i}", job, fraction=fraction, margin=margin, hosts=hosts))
        else:
            apps.append(_rigid(f"j{i}", job, margin))
    if kind is Workload.W1:
        where = draw("insert").randrange(size + 1)
        apps.insert(where, _cem("cem", _log_uniform(draw("cem-size"), *CEM_ELEMENTS)))
    return [SimApp(a.id, i * ARRIVAL_GAP, a.kind, a.selector, a.margin) for i, a in enumerate(apps)]


def _draws(trace: str, pack: int) -> Callable[[str], random.Random]:
    """A random stream per decision: ``draw("cem")`` is the same whatever else was drawn."""

    def draw(what: str) -> random.Random:
        return random.Random(f"{trace}:{pack}:{what}")  # noqa: S311 - a reproducible workload

    return draw


def _log_uniform(rng: random.Random, low: float, high: float) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def _rigid(name: str, job: ReplayJob, margin: float) -> SimApp:
    params = MoldableParams(
        work=float(job.runtime * job.hosts),
        serial_fraction=0.0,
        min_hosts=job.hosts,
        max_hosts=job.hosts,
        margin=margin,
    )
    return SimApp(name, 0, Kind.RIGID, Moldable(params), margin)


def _moldable(name: str, job: ReplayJob, *, fraction: float, margin: float, hosts: int) -> SimApp:
    work = job.runtime / (fraction + (1 - fraction) / job.hosts)
    params = MoldableParams(work=work, serial_fraction=fraction, max_hosts=hosts, margin=margin)
    return SimApp(name, 0, Kind.MOLDABLE, Moldable(params), margin)


def _cem(name: str, elements: int) -> SimApp:
    params = CEMParams(elements=elements, iterations=CEM_ITERATIONS)
    return SimApp(name, 0, Kind.CEM, CEM(params), 1.0)
