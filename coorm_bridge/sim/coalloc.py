"""``coorm-sim coalloc``: a coupled application over three clusters, placed five ways.

Per seed, three 128-host clusters replay their own stretch of a real SWF log (see
:mod:`.coupling.background`) from ``warmup`` seconds before the application arrives, so that
queues have formed; the application asks ``hosts`` hosts on every cluster for ``duration``
seconds, all at once. Each strategy (:mod:`.coupling`) places it on a fresh copy of the same
platform: the bridge's placeholders held at once, as the daemon's default ``hold_first = 1``
does (``bridge``), or only within the placement horizon (``bridge-horizon``), WaitForAll jobs
(``wfa``), WTTE jobs (``wtte``), VIOLA's negotiation (``viola``). One row per strategy: start
and end after arrival, idle node-hours, rounds, and the delay it caused to the background
(against the same seed without the application).
"""

from __future__ import annotations

import argparse
import csv
import random
import statistics
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from coorm_bridge.sim.coupling.background import SOURCES, segment
from coorm_bridge.sim.coupling.measure import STRATEGIES, Knobs, background_starts, measure
from coorm_bridge.sim.coupling.platform import Scenario
from coorm_bridge.sim.experiment import Experiment, Report, Row, RunSpec
from coorm_bridge.sim.figures import mark_medians, pyplot

#: The platform's first second (any fixed time: runs must not depend on the clock).
EPOCH = 1_700_000_000
CLUSTER_HOSTS = 128
HOUR = 3600
#: Columns summarised and drawn, with their labels.
METRICS = {
    "start_h": "start after arrival (h)",
    "end_h": "end after arrival (h)",
    "idle_node_h": "idle node-hours",
    "rounds": "rounds",
    "bg_delay_node_h": "background delay (node-h)",
    "bg_delayed_jobs": "background jobs delayed",
}

Seconds = Annotated[int, Field(ge=0, strict=True)]


class CoallocSpec(RunSpec):
    """One seed: its platform and application, every strategy run on it."""

    experiment: Literal["coalloc"] = "coalloc"
    seed: Annotated[int, Field(ge=0, strict=True)]
    hosts: Annotated[int, Field(gt=0, le=CLUSTER_HOSTS, strict=True)] = 32
    duration: Annotated[int, Field(gt=0, strict=True)] = 2 * HOUR
    horizon: Seconds = 300
    slack: Seconds = 2 * HOUR
    threshold: Seconds = HOUR
    lead: Seconds = 300
    load: Annotated[float, Field(gt=0)] = 1.0
    warmup: Seconds = 24 * HOUR
    tail: Seconds = 24 * HOUR
    """Background jobs keep arriving this long after the application."""


def scenario(spec: CoallocSpec) -> Scenario:
    """The seed's platform: each cluster's trace stretch, and the application's arrival."""
    rng = random.Random(spec.seed)  # noqa: S311 - reproducible, not cryptography
    arrival = EPOCH + spec.warmup + rng.randrange(6 * HOUR)
    length = arrival - EPOCH + spec.tail
    background = {
        name: segment(source, CLUSTER_HOSTS, rng, start=EPOCH, length=length, load=spec.load)
        for name, source in SOURCES.items()
    }
    return Scenario(
        clusters=dict.fromkeys(SOURCES, CLUSTER_HOSTS),
        background=background,
        start=EPOCH,
        arrival=arrival,
        hosts=spec.hosts,
        duration=spec.duration,
    )


class Coalloc(Experiment):
    """See the module docstring."""

    name = "coalloc"
    help = "co-allocation over 3 clusters: bridge placeholders vs WaitForAll, WTTE, VIOLA"
    spec = CoallocSpec

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--seeds", type=int, help="runs (default 50, quick 4)")
        parser.add_argument("--hosts", type=int, default=32, help="hosts per cluster")
        parser.add_argument("--duration", type=int, default=2 * HOUR, help="run time (s)")
        parser.add_argument("--threshold", type=int, default=HOUR, help="WTTE threshold (s)")
        parser.add_argument("--slack", type=int, default=2 * HOUR, help="WFA extra walltime (s)")
        parser.add_argument("--horizon", type=int, default=300, help="placement.horizon (s)")
        parser.add_argument("--lead", type=int, default=300, help="VIOLA's first offset (s)")
        parser.add_argument("--load", type=float, default=1.0, help="background load factor")

    def plan(self, args: argparse.Namespace) -> list[RunSpec]:
        quick = bool(getattr(args, "quick", False))
        seeds = args.seeds if getattr(args, "seeds", None) else (4 if quick else 50)
        sizes = {"warmup": 12 * HOUR, "tail": 12 * HOUR} if quick else {}
        return [
            CoallocSpec(
                seed=seed,
                hosts=args.hosts,
                duration=args.duration,
                threshold=args.threshold,
                slack=args.slack,
                horizon=args.horizon,
                lead=args.lead,
                load=args.load,
                **sizes,
            )
            for seed in range(seeds)
        ]

    def execute(self, spec: RunSpec) -> list[Row]:
        assert isinstance(spec, CoallocSpec)
        world = scenario(spec)
        knobs = Knobs(
            horizon=spec.horizon, slack=spec.slack, threshold=spec.threshold, lead=spec.lead
        )
        baseline = background_starts(world)
        rows: list[Row] = []
        for strategy in STRATEGIES:
            got = measure(world, strategy, knobs, baseline)
            rows.append(
                {
                    "seed": spec.seed,
                    "strategy": strategy,
                    "start_h": got["start_s"] / HOUR,
                    "end_h": got["end_s"] / HOUR,
                    **{k: v for k, v in got.items() if k not in ("start_s", "end_s")},
                }
            )
        return rows

    def report(self, rows: list[Row], out: Path) -> Report:
        out.mkdir(parents=True, exist_ok=True)
        by = _by_strategy(rows)
        table = out / "coalloc_summary.csv"
        with table.open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["strategy", "metric", "runs", "median", "q1", "q3", "mean"])
            for strategy, metrics in by.items():
                for metric, values in metrics.items():
                    q1, med, q3 = _quartiles(values)
                    writer.writerow(
                        [strategy, metric, len(values), med, q1, q3, statistics.fmean(values)]
                    )
        figure = out / "coalloc.png"
        _draw(by, figure)
        summary = [f"coalloc: {len(rows)} rows, medians per strategy"]
        for strategy, metrics in by.items():
            medians = ", ".join(
                f"{metric} {_quartiles(values)[1]:.3g}" for metric, values in metrics.items()
            )
            summary.append(f"  {strategy}: {medians}")
        return Report(files=[table, figure], summary=summary)


def _by_strategy(rows: list[Row]) -> dict[str, dict[str, list[float]]]:
    """Each metric's values per strategy, strategies in the order rows name them."""
    by: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        metrics = by.setdefault(str(row["strategy"]), {m: [] for m in METRICS})
        for metric in METRICS:
            value = row.get(metric)
            if isinstance(value, int | float):
                metrics[metric].append(float(value))
    return by


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        value = values[0] if values else float("nan")
        return value, value, value
    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, med, q3


def _draw(by: dict[str, dict[str, list[float]]], path: Path) -> None:
    """One box plot per metric, strategies side by side; each median a labelled marker above
    the box and the outliers (a box whose quartiles meet would hide a median line)."""
    plt = pyplot()
    strategies = list(by)
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (metric, label) in zip(axes.flat, METRICS.items(), strict=True):
        data = [by[s][metric] for s in strategies]
        ax.boxplot(data, tick_labels=strategies, medianprops={"color": "black"})
        drawn = [(k + 1, _quartiles(values)[1]) for k, values in enumerate(data) if values]
        mark_medians(ax, [x for x, _ in drawn], [m for _, m in drawn], labels=True)
        ax.set_title(label)
        ax.tick_params(axis="x", labelrotation=30)
    fig.suptitle(
        "Co-allocation of n hosts x D on 3 clusters, per strategy (all seeds; "
        "boxes: quartiles, whiskers: 1.5 IQR, circles: outliers, diamonds: medians)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
