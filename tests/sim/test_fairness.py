"""The fairness report (the paper's Fig. 7): the per-pack table it writes beside its summary,
and the summary computed from that table alone."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from coorm_bridge.sim.experiment import Row
from coorm_bridge.sim.fairness import INCREASE_CSV, Fairness, FairnessRun, end_increases, summary
from coorm_bridge.sim.figures import group, read_csv

#: The per-pack table's columns, in order: what each increase is computed from.
PER_PACK = [
    "clusters", "trace", "pack", "fair_start", "delay",
    "cem_end_s", "cem_end_no_delay_s", "increase_s",
]  # fmt: skip


def run_row(pack: int, fair_start: int, delay: int, cem_end: int | None) -> Row:
    """One stored run's row, as :func:`coorm_bridge.sim.fairness.measure` writes it."""
    return {
        "clusters": 4, "trace": "nasa", "pack": pack, "fair_start": fair_start, "delay": delay,
        "cem_arrival": 0, "cem_start": 10, "cem_end": cem_end, "cem_requests": 3,
        "cem_hosts": 16, "ghost_host_hours": 0.5 * fair_start, "used_host_hours": 100.0,
    }  # fmt: skip


#: Ends per (pack, fair-start, delay): pack 0 ends later with a delay, pack 1 earlier, pack 2 as
#: without it, pack 3 later by more than an hour with 60 s.
ENDS = {
    (0, 5): {0: 1000, 10: 1300, 60: 1600},
    (1, 5): {0: 2000, 10: 1900, 60: 1400},
    (2, 5): {0: 3000, 10: 3000, 60: 3000},
    (3, 5): {0: 4000, 10: 4000, 60: 8000},
    (0, 30): {0: 1000, 10: 1000, 60: 1090},
    (1, 30): {0: 2000, 10: 2000, 60: 2000},
}


def rows() -> list[Row]:
    return [
        run_row(pack, fs, delay, end)
        for (pack, fs), ends in ENDS.items()
        for delay, end in ends.items()
    ]


def test_each_increase_is_a_packs_end_minus_its_end_without_delay():
    found = end_increases(list(reversed(rows())))
    assert len(found) == 2 * len(ENDS)  # one per pack, fair-start and non-zero delay
    order = [(r["fair_start"], r["delay"], r["pack"]) for r in found]
    assert order == sorted(order)  # the summary's order, packs in order
    line = next(r for r in found if (r["pack"], r["fair_start"], r["delay"]) == (1, 5, 60))
    assert list(line) == PER_PACK
    assert line["cem_end_s"] == 1400
    assert line["cem_end_no_delay_s"] == 2000
    assert line["increase_s"] == -600


def test_a_run_that_did_not_end_or_has_no_zero_delay_twin_is_left_out():
    table = [*rows(), run_row(9, 5, 10, 500), run_row(0, 0, 0, 100), run_row(0, 0, 10, None)]
    found = end_increases(table)
    assert {(r["pack"], r["fair_start"]) for r in found} == set(ENDS)


def test_the_summary_counts_later_ends_and_averages_the_increases():
    table = {(r["fair_start"], r["delay"]): r for r in summary(end_increases(rows()))}
    assert list(table) == [(5, 10), (5, 60), (30, 10), (30, 60)]
    fs5_60 = table[(5, 60)]  # increases +600, -600, 0, +4000
    assert fs5_60["runs"] == 4
    assert fs5_60["ended_later"] == 2
    assert fs5_60["delayed_share"] == 0.5
    assert fs5_60["mean_increase_s"] == 1000.0
    assert fs5_60["median_increase_s"] == 300.0
    assert fs5_60["min_increase_s"] == -600
    assert fs5_60["max_increase_s"] == 4000
    assert fs5_60["over_an_hour_share"] == 0.25
    fs5_10 = table[(5, 10)]  # +300, -100, 0, 0
    assert (fs5_10["ended_later"], fs5_10["mean_increase_s"]) == (1, 50.0)
    assert table[(30, 60)]["mean_increase_s"] == 45.0


def test_the_report_writes_the_per_pack_table_and_derives_the_summary_from_it(tmp_path: Path):
    report = Fairness().report(rows(), tmp_path)
    names = {path.name for path in report.files}
    assert {INCREASE_CSV, "fairness-summary.csv", "fairness-idle.csv", "fairness.png"} <= names
    packs = read_csv(tmp_path / INCREASE_CSV)
    assert list(packs[0]) == PER_PACK
    assert all(r["increase_s"] == r["cem_end_s"] - r["cem_end_no_delay_s"] for r in packs)
    written = read_csv(tmp_path / "fairness-summary.csv")
    by_group = group(packs, "fair_start", "delay")
    assert [(r["fair_start"], r["delay"]) for r in written] == list(by_group)
    for line in written:
        members = by_group[(line["fair_start"], line["delay"])]
        increases = [float(r["increase_s"]) for r in members]
        assert line["runs"] == len(members)
        assert line["ended_later"] == sum(v > 0 for v in increases)
        assert line["mean_increase_s"] == round(statistics.fmean(increases), 1)
        assert line["median_increase_s"] == statistics.median(increases)
        assert line["max_increase_s"] == max(increases)
    assert any("mean +1000 s" in text for text in report.summary)
    assert (tmp_path / "fairness.png").stat().st_size > 10_000


def test_a_quick_sweep_of_real_runs_reports_every_pack(tmp_path: Path):
    args = argparse.Namespace(
        quick=True, clusters=None, delays=None, fair_starts=None, traces=None, packs=None,
        size=20,
    )  # fmt: skip
    experiment = Fairness()
    specs = experiment.plan(args)
    assert all(isinstance(spec, FairnessRun) for spec in specs)
    found = [row for spec in specs for row in experiment.execute(spec)]
    experiment.report(found, tmp_path)
    packs = read_csv(tmp_path / INCREASE_CSV)
    with_delay = [spec for spec in specs if isinstance(spec, FairnessRun) and spec.delay]
    assert len(packs) == len(with_delay)
    assert sum(int(r["runs"]) for r in read_csv(tmp_path / "fairness-summary.csv")) == len(packs)
