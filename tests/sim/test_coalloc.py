"""coorm-sim coalloc: each strategy on hand-built platforms whose answers are worked out here,
and the experiment's frame (determinism, plan, report) at CI sizes."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pytest

from coorm_bridge.batchsim import LocalJobSpec
from coorm_bridge.sim.coalloc import METRICS, Coalloc, CoallocSpec
from coorm_bridge.sim.coupling.bridge import HOLD_AT_ONCE, run_bridge
from coorm_bridge.sim.coupling.measure import STRATEGIES, Knobs, background_starts, measure
from coorm_bridge.sim.coupling.platform import BackgroundJob, Scenario, StrategyResult, records
from coorm_bridge.sim.coupling.viola import run_viola
from coorm_bridge.sim.coupling.waiting import run_waiting

T0 = 1_000_000
ARRIVAL = T0 + 10


def job(name: str, hosts: int, runtime: int, at: int = T0) -> BackgroundJob:
    spec = LocalJobSpec(
        id=f"bg-{name}", user="local", hosts=hosts, walltime=runtime, runtime=runtime
    )
    return BackgroundJob(spec, at)


def staggered() -> Scenario:
    """Three 4-host clusters: a is full until T0+300, b until T0+1000, c is free.

    The application (2 hosts x 100 s everywhere) arrives at T0+10: the earliest common start
    is T0+1000, when b frees up."""
    return Scenario(
        clusters={"a": 4, "b": 4, "c": 4},
        background={"a": [job("a1", 4, 300)], "b": [job("b1", 4, 1000)], "c": []},
        start=T0,
        arrival=ARRIVAL,
        hosts=2,
        duration=100,
    )


def app_starts(outcome: StrategyResult) -> dict[str, int | None]:
    """When each of the application's jobs really started, from the local schedulers."""
    ran = records(outcome.adapter)
    return {c: ran[f"{c}/{job_id}"].start for c, job_id in outcome.jobs.items()}


@pytest.mark.parametrize("horizon", [300, HOLD_AT_ONCE])
def test_bridge_starts_everywhere_at_the_earliest_common_start_idle_free(horizon: int) -> None:
    outcome = run_bridge(staggered(), horizon=horizon)
    assert outcome.start - ARRIVAL == 990
    assert outcome.end - ARRIVAL == 1090
    assert app_starts(outcome) == {"a": T0 + 1000, "b": T0 + 1000, "c": T0 + 1000}
    ran = records(outcome.adapter)
    assert {ran[f"{c}/{j}"].reservation for c, j in outcome.jobs.items()} == {
        "coorm-app-a",
        "coorm-app-b",
        "coorm-app-c",
    }
    assert outcome.idle == 0
    assert outcome.rounds == 1


def test_viola_retries_at_the_latest_suggested_time() -> None:
    outcome = run_viola(staggered(), lead=300)
    # Round 1 at T0+310: a (free from T0+300) and c accept, b refuses until T0+1000.
    assert outcome.rounds == 2
    assert outcome.start - ARRIVAL == 990
    assert app_starts(outcome) == {"a": T0 + 1000, "b": T0 + 1000, "c": T0 + 1000}
    assert outcome.idle == 0


def test_wait_for_all_cancels_jobs_that_waited_their_slack() -> None:
    outcome = run_waiting(staggered(), slack=500)
    # c runs from T0+10, a from T0+300; c is cancelled at T0+510 and a at T0+800 (each after
    # 500 s, 2 hosts idle) and both start again at once; b starts at T0+1000 and so does the
    # application, c having idled 490 s more and a 200 s.
    assert outcome.start - ARRIVAL == 990
    assert outcome.end - ARRIVAL == 1090
    assert outcome.rounds == 3
    assert outcome.idle == 2 * 500 + 2 * 500 + 2 * 490 + 2 * 200
    assert app_starts(outcome) == {"a": T0 + 800, "b": T0 + 1000, "c": T0 + 510}


def test_wtte_begins_degraded_on_the_active_clusters_at_the_threshold() -> None:
    outcome = run_waiting(staggered(), threshold=400)
    # c runs from T0+10, a from T0+300; at T0+410 b still waits: the application begins on
    # two clusters and its 300 cluster-seconds of work last 150 s; b's job is cancelled.
    assert outcome.start - ARRIVAL == 400
    assert outcome.end - ARRIVAL == 550
    assert outcome.notes["active"] == 2
    assert outcome.idle == 2 * 400 + 2 * 110
    assert set(outcome.jobs) == {"a", "c"}
    ran = records(outcome.adapter)
    assert [r.state for r in ran.values() if r.user == "coupled" and r.id.startswith("b.")] == [
        "cancelled"
    ]


def pushed() -> Scenario:
    """a is full until T0+300 and a 4-host job of 200 s waits for it (planned at T0+300);
    b and c are free."""
    return Scenario(
        clusters={"a": 4, "b": 4, "c": 4},
        background={"a": [job("x", 4, 300), job("p", 4, 200)], "b": [], "c": []},
        start=T0,
        arrival=ARRIVAL,
        hosts=2,
        duration=100,
    )


def test_a_reservation_that_pushes_a_pending_job_is_its_delay() -> None:
    scenario = pushed()
    baseline = background_starts(scenario)
    assert baseline == {"a/bg-x": (T0, 4), "a/bg-p": (T0 + 300, 4)}
    # VIOLA reserves [T0+310, T0+410) over hosts p was planned on: p starts at T0+410.
    viola = measure(scenario, "viola", Knobs(lead=300), baseline)
    assert viola["start_s"] == 300
    assert viola["bg_delayed_jobs"] == 1
    assert viola["bg_delay_job_h"] == pytest.approx(110 / 3600)
    assert viola["bg_delay_node_h"] == pytest.approx(4 * 110 / 3600)
    # The bridge's view has p at T0+300: the application goes after it, p is not delayed.
    bridge = measure(scenario, "bridge-horizon", Knobs(horizon=300), baseline)
    assert bridge["start_s"] == 490
    assert bridge["bg_delayed_jobs"] == 0
    assert bridge["bg_delay_node_h"] == 0


SMALL = {"warmup": 4 * 3600, "tail": 4 * 3600}


def test_runs_are_deterministic_and_seeds_differ() -> None:
    experiment = Coalloc()
    spec = CoallocSpec(seed=3, **SMALL)
    rows = experiment.execute(spec)
    assert rows == experiment.execute(CoallocSpec(seed=3, **SMALL))
    assert [row["strategy"] for row in rows] == list(STRATEGIES)
    assert rows != experiment.execute(CoallocSpec(seed=4, **SMALL))
    by = {row["strategy"]: row for row in rows}
    assert by["bridge"]["idle_node_h"] == 0
    assert by["viola"]["idle_node_h"] == 0


def test_plan_and_report(tmp_path: Path) -> None:
    experiment = Coalloc()
    parser = argparse.ArgumentParser()
    experiment.add_arguments(parser)
    args = parser.parse_args(["--seeds", "2", "--hosts", "16"])
    args.quick = True
    specs = experiment.plan(args)
    assert len(specs) == 2
    assert len({spec.key() for spec in specs}) == 2
    assert all(isinstance(s, CoallocSpec) and s.hosts == 16 for s in specs)
    rows = [row for spec in specs for row in experiment.execute(spec)]
    report = experiment.report(rows, tmp_path)
    table, figure = report.files
    with table.open() as file:
        summary = list(csv.DictReader(file))
    assert len(summary) == len(STRATEGIES) * len(METRICS)
    assert all(row["runs"] == "2" for row in summary)
    assert figure.read_bytes().startswith(b"\x89PNG")
    assert len(report.summary) == 1 + len(STRATEGIES)
