"""coorm-sim evolving: the AMR curve, each strategy on hand-built worlds whose answers are worked
out here, the sweep's accounting on real background load, and the experiment through the CLI."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import random
from pathlib import Path

import pytest

from coorm_bridge.batchsim import LocalJobSpec
from coorm_bridge.sim.amr import Progress, data_sizes, host_needs
from coorm_bridge.sim.cli import main
from coorm_bridge.sim.coupling.platform import BackgroundJob
from coorm_bridge.sim.evolving import Evolving, EvolvingSpec, world_of
from coorm_bridge.sim.evolving_ledger import Bag, Ledger, State
from coorm_bridge.sim.evolving_run import run
from coorm_bridge.sim.evolving_site import HOUR, World, baseline
from coorm_bridge.sim.experiment import EXPERIMENTS

T0 = 1_000_000
A = T0 + 10  # the AMR code's and the sweep's arrival
STRATEGIES = ("peak", "v1-resubmit", "v2")


def hand(background: tuple[BackgroundJob, ...] = (), window: int = 400) -> World:
    """10 hosts; the AMR code needs 2, 6, then 3 hosts for 100 s each (peak 6), a restart costs
    10 s; sweep tasks last 50 s."""
    return World(
        hosts=10,
        background=background,
        start=T0,
        arrival=A,
        needs=(2, 6, 3),
        peak=6,
        period=100,
        restart=10,
        task=50,
        window=window,
    )


def bg(name: str, hosts: int, runtime: int, at: int) -> BackgroundJob:
    spec = LocalJobSpec(
        id=f"bg-{name}", user="local", hosts=hosts, walltime=runtime, runtime=runtime
    )
    return BackgroundJob(spec, at)


def small_world(seed: int) -> World:
    """A real trace stretch at CI size."""
    spec = EvolvingSpec(seed=seed, warmup=12 * HOUR, tail=12 * HOUR, window=6 * HOUR)
    return world_of(spec)


# -- the AMR code -------------------------------------------------------------------------------


def test_the_curve_is_the_seeds_alone_and_peaks_exactly_once_grown() -> None:
    random.seed(1)
    first = data_sizes(7, 16)
    random.seed(2)  # no global random state: the same curve whatever it holds
    assert data_sizes(7, 16) == first
    assert data_sizes(8, 16) != first
    for seed in range(50):
        needs = host_needs(data_sizes(seed, 16), 48)
        assert max(needs) == 48
        assert min(needs) >= 1
        assert needs[0] < 48  # it starts small and grows
        assert len(set(needs)) > 3  # and its need changes as it runs


def test_progress_keeps_computation_across_stops_and_loses_restarts() -> None:
    amr = Progress(needs=(1, 2), period=100, restart=10)
    amr.start(0)
    assert amr.milestone() == 100
    amr.stop(40)  # 40 s done
    assert amr.remaining() == 160
    amr.start(50)  # restarts: computes again from 60
    assert amr.milestone() == 120
    assert amr.reach(120)
    assert (amr.k, amr.need) == (1, 2)
    amr.stop(125)  # 5 s of the restart-free second period done
    amr.start(200)
    amr.stop(205)  # stopped while restarting: nothing more done
    assert amr.remaining() == 95
    assert amr.restarts == 2


# -- the sweep's bag and the ledger -------------------------------------------------------------


def test_a_task_ends_once_killed_latest_first_or_completed() -> None:
    bag = Bag(task=100, until=1000)
    first = bag.start(0, 3)
    second = bag.start(50, 2)
    assert first is not None
    assert second is not None
    assert bag.kill(60, 3) == 3  # both of the latest batch, then one of the first
    assert bag.lost_s == 2 * 10 + 60
    assert bag.kill(60, 5, second.id) == 0  # nothing left of it
    bag.complete(100)
    bag.complete(100)  # counted once
    assert (bag.started, bag.completed, bag.killed, bag.hosts) == (5, 2, 3, 0)
    assert bag.start(950, 1) is None  # would end past the window


def test_the_ledger_integrates_between_events_and_refuses_impossible_loans() -> None:
    ledger = Ledger(0)
    ledger.record(0, State(held=6, used=2, sweep=5, lent=4))
    ledger.record(100, State(held=6, used=6, sweep=1, lent=0))
    ledger.record(150, State())
    assert (ledger.held_s, ledger.unused_s, ledger.idle_held_s) == (900, 400, 0)
    assert ledger.sweep_s == 550
    with pytest.raises(ValueError, match="borrow"):
        ledger.record(160, State(held=6, used=3, lent=4))


# -- the strategies on hand-built worlds --------------------------------------------------------


def test_on_an_empty_cluster_peak_wastes_what_v1_and_v2_give_back() -> None:
    """Nothing waits. Peak holds 6 hosts for 300 s and uses 2, 6, 3: 700 host-s unused. v1 and
    v2 move twice (20 s of restarts, ending at 320 s). v1 holds just what it uses; v2's
    pre-allocation holds 6 for 320 s, 730 host-s unused, all lent to the sweep: 4 hosts for the
    first period, 3 for the last."""
    world = hand()
    got = {s: run(world, s) for s in STRATEGIES}
    ends = {s: r.amr.end for s, r in got.items()}
    assert ends == {"peak": A + 300, "v1-resubmit": A + 320, "v2": A + 320}
    assert {s: r.ledger.unused_s for s, r in got.items()} == {
        "peak": 700,
        "v1-resubmit": 0,
        "v2": 730,
    }
    assert {s: r.ledger.idle_held_s for s, r in got.items()} == {
        "peak": 700,
        "v1-resubmit": 0,
        "v2": 0,
    }
    assert got["v2"].ledger.lent_s == 4 * 100 + 3 * 110
    # Peak: 4 idle hosts for 300 s (6 rounds), then 10 for 100 s (2 rounds).
    assert got["peak"].bag.completed == 4 * 6 + 10 * 2
    # v2 also runs on the lent hosts: more tasks in the same window, none killed here.
    assert got["v2"].bag.completed > got["peak"].bag.completed
    assert all(r.bag.killed == 0 for r in got.values())


def test_v1_waits_in_the_queue_to_grow_where_v2_grows_at_once_and_delays_the_site() -> None:
    """A local job of 8 hosts x 1000 s arrives at A+50. v1 holds 2 hosts then: the job starts,
    and when the code needs 6 at A+100 it waits for the job's end (A+1050), restarts, and ends
    at A+1160. Peak and v2 hold 6 from A: the job waits for their end (A+200, and A+210 for v2,
    its restart), 8 hosts x 150 s and x 160 s of delay."""
    world = hand(background=(bg("big", 8, 1000, A + 50),))
    base = baseline(world)
    assert base["bg-big"] == (A + 50, 8)
    world = dataclasses.replace(world, needs=(2, 6))
    got = {s: run(world, s).metrics(base) for s in STRATEGIES}
    assert got["v1-resubmit"]["end_h"] == pytest.approx(1160 / HOUR)
    assert got["v1-resubmit"]["wait_h"] == pytest.approx(950 / HOUR)
    assert got["v1-resubmit"]["bg_delayed_jobs"] == 0
    assert got["peak"]["end_h"] == pytest.approx(200 / HOUR)
    assert got["v2"]["end_h"] == pytest.approx(210 / HOUR)
    assert got["peak"]["bg_delay_node_h"] == pytest.approx(8 * 150 / HOUR)
    assert got["v2"]["bg_delay_node_h"] == pytest.approx(8 * 160 / HOUR)


def test_the_v2_sweep_is_preempted_when_the_code_grows_inside_its_pre_allocation() -> None:
    """Tasks of 150 s on the 4 lent hosts started at A cannot end before the code grows at
    A+100: that growth is spontaneous (no view foresaw it), so they are killed then."""
    world = dataclasses.replace(hand(), task=150)
    v2 = run(world, "v2", record=True)
    assert v2.bag.killed == 4
    assert v2.bag.lost_s == 4 * 100
    lent = {t: lent for t, _, _, lent, _ in v2.trace}
    assert lent[A] == 4
    assert lent[A + 100] == 0


# -- real background load -----------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_sweep_runs_only_on_hosts_nobody_holds_and_counts_each_task_once(strategy: str) -> None:
    world = small_world(3)
    done = run(world, strategy, record=True)
    bag, ledger = done.bag, done.ledger
    assert bag.running == []
    assert bag.started == bag.completed + bag.killed
    assert ledger.sweep_s == bag.completed * world.task + bag.lost_s
    assert bag.completed > 0
    # Checked against the scheduler's own history: at every pass, the sweep's hosts outside
    # the code's loans fit beside the local jobs then running and the code's placeholders.
    records = [r for r in done.site.scheduler.records() if r.start is not None]
    for now, sweep, _, lent, held in done.trace:
        local = sum(r.hosts for r in records if r.start <= now < (r.end or now + 1))
        assert sweep - lent + local + held <= world.hosts, now
    if strategy != "v2":
        assert ledger.lent_s == 0  # what the code holds is nobody else's


def test_with_the_pre_allocation_the_code_leaves_fewer_held_hosts_idle_than_at_peak() -> None:
    for seed in (0, 1):
        world = small_world(seed)
        peak, v2 = run(world, "peak"), run(world, "v2")
        assert v2.ledger.idle_held_s < peak.ledger.idle_held_s
        assert v2.ledger.lent_s > 0


# -- the experiment -----------------------------------------------------------------------------


def test_rows_are_deterministic_per_seed() -> None:
    experiment = Evolving()
    spec = EvolvingSpec(seed=2, warmup=12 * HOUR, tail=12 * HOUR, window=4 * HOUR)
    rows = experiment.execute(spec)
    assert rows == experiment.execute(spec)
    assert [r["strategy"] for r in rows] == list(STRATEGIES)
    other = experiment.execute(spec.model_copy(update={"seed": 4}))
    assert [r["end_h"] for r in other] != [r["end_h"] for r in rows]


def test_plan_sizes_and_spec_checks() -> None:
    experiment = Evolving()
    parser = argparse.ArgumentParser()
    experiment.add_arguments(parser)
    args = parser.parse_args([])
    full = experiment.plan(args)
    args.quick = True
    quick = experiment.plan(args)
    assert [s.model_dump()["seed"] for s in quick] == [0, 1, 2]
    assert all(s.model_dump()["window"] <= 12 * HOUR for s in quick)
    assert len(full) == 50
    assert len({s.key() for s in full}) == 50
    with pytest.raises(ValueError, match="peak"):
        EvolvingSpec(seed=0, hosts=16, peak=32)


def test_the_quick_run_writes_its_table_and_figure_through_the_cli(tmp_path: Path) -> None:
    assert "evolving" in EXPERIMENTS
    assert main(["evolving", "--quick", "--out", str(tmp_path), "--jobs", "1"]) == 0
    folder = tmp_path / "evolving"
    with (folder / "evolving-summary.csv").open() as file:
        table = list(csv.DictReader(file))
    assert [line["strategy"] for line in table] == list(STRATEGIES)
    assert all(line["runs"] == "3" for line in table)
    for line in table:
        assert float(line["end_h_q1"]) <= float(line["end_h_median"]) <= float(line["end_h_q3"])
    summary = json.loads((folder / "evolving-summary.json").read_text())
    assert [line["strategy"] for line in summary] == list(STRATEGIES)
    for as_json, as_csv in zip(summary, table, strict=True):
        assert as_json["psa_tasks_median"] == pytest.approx(float(as_csv["psa_tasks_median"]))
    png = (folder / "evolving.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    with (folder / "evolving.csv").open() as file:
        assert len(list(csv.DictReader(file))) == 9
