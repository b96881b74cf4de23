"""Ordinary jobs, one per cluster, that wait for each other (seed 004's WFA and WTTE).

No reservation: each component is a plain job of ``hosts`` hosts queued at the application's
arrival, and a job that starts early holds its hosts idle until the others run.

- **WaitForAll**: the application starts when all jobs run. Each job asks ``duration + slack``:
  a job that has waited ``slack`` seconds can no longer run ``duration`` beside the others, so it
  is cancelled and submitted again (one more round) unless all run by then.
- **WaitTillThresholdandExecute**: when the first job has waited ``threshold`` seconds, the
  application begins on the clusters whose jobs run and the other submissions are cancelled.
  Degraded model: the work (clusters x hosts x duration node-seconds) is conserved and proceeds
  at rate k/3 on k active clusters of 3, so it lasts 3·duration/k (a coupled code whose
  components are folded onto fewer clusters, as NoWait's reconfiguration would). Jobs therefore
  ask ``threshold + clusters·duration``, the worst case (one cluster, having waited the whole
  threshold), so that none is ever killed before the work is done. The degraded part holds no
  idle node (its hosts compute); it costs end time, which is reported.
"""

from __future__ import annotations

import math

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.core.batch import JobState
from coorm_bridge.sim.coupling.platform import Scenario, StrategyResult, advance, app_job, next_time


def _walltime(duration: int, clusters: int, slack: int | None, threshold: int | None) -> int:
    """What each job asks: WFA's duration and slack, WTTE's worst case (see the docstring)."""
    if slack is not None and threshold is None:
        return duration + slack
    if threshold is not None and slack is None:
        return threshold + clusters * duration
    raise ValueError("give a slack (WaitForAll) or a threshold (WTTE), not both")


def _running(adapter: MockAdapter, jobs: dict[str, str]) -> dict[str, int]:
    """When each running job started, by cluster."""
    starts: dict[str, int] = {}
    for cluster, job in jobs.items():
        if adapter.job_state(cluster, job) is JobState.RUNNING:
            start = adapter.site.schedulers[cluster].job(job).start
            assert start is not None
            starts[cluster] = start
    return starts


def run_waiting(
    scenario: Scenario, *, slack: int | None = None, threshold: int | None = None
) -> StrategyResult:
    """WaitForAll when ``slack`` is given, WaitTillThresholdandExecute when ``threshold`` is."""
    adapter = scenario.platform()
    advance(adapter, scenario.arrival)
    n, duration, clusters = scenario.hosts, scenario.duration, sorted(scenario.clusters)
    walltime = _walltime(duration, len(clusters), slack, threshold)
    submitted = 0

    def submit(cluster: str) -> str:
        nonlocal submitted
        submitted += 1
        return adapter.submit(cluster, app_job(f"app-{submitted}", n, walltime, walltime, None))

    jobs = {c: submit(c) for c in clusters}
    idle = 0
    while True:
        now = adapter.now()
        starts = _running(adapter, jobs)
        if len(starts) == len(clusters):
            active, run_for = starts, duration
            break
        deadlines: list[int] = []
        if threshold is not None and starts:
            due = min(starts.values()) + threshold
            if now >= due:
                for c in clusters:
                    if c not in starts:
                        adapter.cancel(c, jobs[c])
                active = starts
                run_for = math.ceil(len(clusters) * duration / len(active))
                break
            deadlines.append(due)
        if slack is not None:
            for c, start in starts.items():
                if now >= start + slack:  # cannot run `duration` beside the others any more
                    adapter.cancel(c, jobs[c])
                    idle += n * (now - start)
                    jobs[c] = submit(c)
                else:
                    deadlines.append(start + slack)
        advance(adapter, next_time(adapter, *deadlines))
    begin = adapter.now()
    idle += sum(n * (begin - start) for start in active.values())
    advance(adapter, begin + run_for)
    for c in active:
        adapter.site.end_job(c, jobs[c], JobState.COMPLETED)
    return StrategyResult(
        start=begin,
        end=begin + run_for,
        idle=idle,
        rounds=submitted - len(clusters) + 1,
        adapter=adapter,
        jobs={c: jobs[c] for c in active},
        notes={"active": len(active)},
    )
