"""One strategy's run measured against the same background without the application.

The cost to the site is what the strategy did to its users' jobs: each background job's start
with the application minus its start in the baseline (same scenario, no application). Jobs
started later count as delayed (job-hours and node-hours); some start earlier (a hole the
re-planning opened), reported apart rather than netted, since an advance for one user does not
repay another's wait.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coorm_bridge.batchsim import JobRecord
from coorm_bridge.sim.coupling.bridge import HOLD_AT_ONCE, run_bridge
from coorm_bridge.sim.coupling.platform import BACKGROUND, Scenario, StrategyResult, finish, records
from coorm_bridge.sim.coupling.viola import run_viola
from coorm_bridge.sim.coupling.waiting import run_waiting

HOUR = 3600.0


@dataclass(frozen=True)
class Knobs:
    """The strategies' own parameters (seconds)."""

    horizon: int = 300
    slack: int = 7200
    threshold: int = 3600
    lead: int = 300


#: The strategies compared, by the name rows carry.
STRATEGIES: dict[str, Callable[[Scenario, Knobs], StrategyResult]] = {
    # The daemon's defaults: the first waiting application holds at once (hold_first = 1).
    "bridge": lambda s, k: run_bridge(s, horizon=HOLD_AT_ONCE),
    # hold_first = 0: placeholders only within the placement horizon.
    "bridge-horizon": lambda s, k: run_bridge(s, horizon=k.horizon),
    "wfa": lambda s, k: run_waiting(s, slack=k.slack),
    "wtte": lambda s, k: run_waiting(s, threshold=k.threshold),
    "viola": lambda s, k: run_viola(s, lead=k.lead),
}


def background_starts(scenario: Scenario) -> dict[str, tuple[int, int]]:
    """The baseline: each background job's ``(start, hosts)`` without the application."""
    adapter = scenario.platform()
    finish(adapter)
    return _starts(records(adapter))


def _starts(ran: dict[str, JobRecord]) -> dict[str, tuple[int, int]]:
    return {
        key: (record.start, record.hosts)
        for key, record in ran.items()
        if record.id.startswith(BACKGROUND) and record.start is not None
    }


def background_delay(
    baseline: dict[str, tuple[int, int]], outcome: StrategyResult
) -> dict[str, float | int]:
    """Delays of the background jobs under ``outcome`` (its platform is run to the end)."""
    finish(outcome.adapter)
    now = _starts(records(outcome.adapter))
    delayed = 0
    job_h = node_h = advanced_node_h = 0.0
    for key, (before, hosts) in baseline.items():
        after = now.get(key, (before, hosts))[0]
        if after > before:
            delayed += 1
            job_h += (after - before) / HOUR
            node_h += hosts * (after - before) / HOUR
        elif after < before:
            advanced_node_h += hosts * (before - after) / HOUR
    return {
        "bg_delayed_jobs": delayed,
        "bg_delay_job_h": job_h,
        "bg_delay_node_h": node_h,
        "bg_advance_node_h": advanced_node_h,
    }


def measure(
    scenario: Scenario,
    strategy: str,
    knobs: Knobs,
    baseline: dict[str, tuple[int, int]] | None = None,
) -> dict[str, float | int]:
    """One strategy's metrics: start and end after arrival (s), idle node-hours, rounds, and
    what it cost the background."""
    outcome = STRATEGIES[strategy](scenario, knobs)
    base = background_starts(scenario) if baseline is None else baseline
    return {
        "start_s": outcome.start - scenario.arrival,
        "end_s": outcome.end - scenario.arrival,
        "idle_node_h": outcome.idle / HOUR,
        "rounds": outcome.rounds,
        "active": int(outcome.notes.get("active", len(scenario.clusters))),
        **background_delay(base, outcome),
    }
