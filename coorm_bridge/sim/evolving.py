"""``coorm-sim evolving``: an AMR code and a parameter sweep share a cluster, three ways (CooRMv2).

Per seed, one cluster replays a stretch of a shipped SWF trace under the mock's conservative
backfilling (:mod:`.evolving_site`). An adaptive mesh refinement code arrives with a data-size
curve of its own (:mod:`.amr`: it grows, then shrinks, and the code learns each period's need
only when the period begins), together with a parameter sweep (PSA) of one-host tasks. The AMR
code is run three ways (:mod:`.evolving_amr`): holding its peak throughout (``peak``), v1
requests re-submitted as its need changes (``v1-resubmit``), and a CooRMv2 pre-allocation with
spontaneous updates inside it (``v2``); its requests are placed by the project's CooRMv2 policy
and held as the bridge's placeholders, and the PSA runs on hosts nobody holds (plus, in v2, the
pre-allocation's unused ones, preempted when the code grows): :mod:`.evolving_run` says exactly
what is modelled. One row per strategy: the code's end after arrival, node-hours it held and did
not use (and those nobody used), the PSA's completed tasks and their node-hours, its lost work,
and the delay caused to background jobs against the same seed without the AMR code and the PSA.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from coorm_bridge.sim.amr import data_sizes, host_needs
from coorm_bridge.sim.evolving_amr import LAUNCHERS
from coorm_bridge.sim.evolving_run import run
from coorm_bridge.sim.evolving_site import HOUR, World, baseline, make_world
from coorm_bridge.sim.experiment import Experiment, Report, Row, RunSpec
from coorm_bridge.sim.figures import five, number, pyplot, save, summarize, write_csv

#: Columns of the summary table (median, quartiles, extremes per strategy).
TABLE = (
    "start_h",
    "end_h",
    "wait_h",
    "restarts",
    "held_node_h",
    "amr_unused_node_h",
    "idle_held_node_h",
    "psa_tasks",
    "psa_node_h",
    "psa_lent_node_h",
    "psa_killed",
    "psa_lost_node_h",
    "bg_delay_node_h",
    "bg_delayed_jobs",
)
#: Those drawn, with their labels.
DRAWN = {
    "end_h": "AMR code's end after arrival (h)",
    "amr_unused_node_h": "held by the AMR code, not used by it (node-h)",
    "idle_held_node_h": "held by the AMR code, used by nobody (node-h)",
    "psa_tasks": "PSA tasks completed",
    "psa_lost_node_h": "PSA work lost to kills (node-h)",
    "bg_delay_node_h": "background delay (node-h)",
    "bg_delayed_jobs": "background jobs delayed",
}

#: Compared seed by seed with ``peak`` (same background, same curve): metric, and whether less
#: is better.
PAIRED = {
    "end_h": True,
    "idle_held_node_h": True,
    "psa_tasks": False,
    "psa_lost_node_h": True,
    "bg_delay_node_h": True,
}

Seconds = Annotated[int, Field(gt=0, strict=True)]


class EvolvingSpec(RunSpec):
    """One seed: its world (trace stretch, AMR curve), every strategy run on it."""

    experiment: Literal["evolving"] = "evolving"
    seed: Annotated[int, Field(ge=0, strict=True)]
    trace: Literal["nasa", "lublin"] = "nasa"
    hosts: Annotated[int, Field(gt=0, le=4096, strict=True)] = 128
    load: Annotated[float, Field(gt=0, le=10)] = 1.0
    peak: Annotated[int, Field(gt=0, strict=True)] = 48
    """The AMR code's hosts at its largest data size."""
    periods: Annotated[int, Field(gt=0, le=1000, strict=True)] = 16
    period: Seconds = 1800
    restart: Annotated[int, Field(ge=0, strict=True)] = 120
    """Seconds lost each time the code moves to new hosts (checkpoint, restart)."""
    task: Seconds = 1200
    window: Seconds = 24 * HOUR
    """The PSA runs tasks that end within this long after it arrives."""
    warmup: Seconds = 24 * HOUR
    tail: Seconds = 36 * HOUR
    """Background jobs keep arriving this long after the AMR code and the PSA."""

    @model_validator(mode="after")
    def _fits(self) -> Self:
        if self.peak > self.hosts:
            raise ValueError(f"the AMR code's peak ({self.peak}) exceeds the cluster's hosts")
        return self


def needs_of(spec: EvolvingSpec) -> tuple[int, ...]:
    """The seed's hosts needed per period."""
    return host_needs(data_sizes(spec.seed, spec.periods), spec.peak)


def world_of(spec: EvolvingSpec) -> World:
    """The platform, the background and the AMR code's needs of one run."""
    return make_world(
        seed=spec.seed,
        trace=spec.trace,
        hosts=spec.hosts,
        load=spec.load,
        warmup=spec.warmup,
        tail=spec.tail,
        needs=needs_of(spec),
        peak=spec.peak,
        period=spec.period,
        restart=spec.restart,
        task=spec.task,
        window=spec.window,
    )


class Evolving(Experiment):
    """See the module docstring."""

    name = "evolving"
    help = "CooRMv2: an AMR code and a parameter sweep, peak vs v1 re-submission vs v2"
    spec = EvolvingSpec

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--seeds", type=int, help="runs (default 50, quick 3)")
        parser.add_argument("--trace", choices=("nasa", "lublin"), default="nasa")
        parser.add_argument("--hosts", type=int, default=128, help="the cluster's hosts")
        parser.add_argument("--load", type=float, default=1.0, help="background load factor")
        parser.add_argument("--peak", type=int, default=48, help="the AMR code's peak hosts")
        parser.add_argument("--periods", type=int, default=16, help="the AMR code's periods")
        parser.add_argument("--period", type=int, default=1800, help="seconds per period")
        parser.add_argument("--restart", type=int, default=120, help="seconds per restart")
        parser.add_argument("--task", type=int, default=1200, help="a PSA task's seconds")
        parser.add_argument("--window", type=int, default=24 * HOUR, help="the PSA's seconds")

    def plan(self, args: argparse.Namespace) -> list[RunSpec]:
        quick = bool(getattr(args, "quick", False))
        seeds = args.seeds if getattr(args, "seeds", None) else (3 if quick else 50)
        sizes = {"warmup": 12 * HOUR, "tail": 16 * HOUR} if quick else {}
        window = min(args.window, 12 * HOUR) if quick else args.window
        return [
            EvolvingSpec(
                seed=seed,
                trace=args.trace,
                hosts=args.hosts,
                load=args.load,
                peak=args.peak,
                periods=args.periods,
                period=args.period,
                restart=args.restart,
                task=args.task,
                window=window,
                **sizes,
            )
            for seed in range(seeds)
        ]

    def execute(self, spec: RunSpec) -> list[Row]:
        assert isinstance(spec, EvolvingSpec)
        world = world_of(spec)
        base = baseline(world)
        rows: list[Row] = []
        for strategy in LAUNCHERS:
            got = run(world, strategy).metrics(base)
            rows.append(
                {
                    "seed": spec.seed,
                    "strategy": strategy,
                    "peak": spec.peak,
                    "periods": spec.periods,
                    "period": spec.period,
                    **{k: round(v, 4) if isinstance(v, float) else v for k, v in got.items()},
                }
            )
        return rows

    def report(self, rows: list[Row], out: Path) -> Report:
        table = summarize(rows, ["strategy"], TABLE, rounding=3)
        report = Report()
        report.files.append(write_csv(out / "evolving-summary.csv", table))
        as_json = out / "evolving-summary.json"
        as_json.write_text(json.dumps(table, indent=1) + "\n")
        report.files.append(as_json)
        pairs = paired(rows)
        report.files.append(write_csv(out / "evolving-paired.csv", pairs))
        report.files.append(_figure(rows, out / "evolving.png"))
        report.summary.append(f"evolving: {len(rows)} rows; median [q1-q3] per strategy")
        for line in table:
            cells = ", ".join(
                f"{m} {line[f'{m}_median']:.4g} [{line[f'{m}_q1']:.4g}-{line[f'{m}_q3']:.4g}]"
                for m in ("end_h", "idle_held_node_h", "psa_tasks", "bg_delay_node_h")
            )
            report.summary.append(f"  {line['strategy']}: {cells}")
        report.summary.append("against peak, seed by seed: median difference, seeds better")
        for line in pairs:
            report.summary.append(
                f"  {line['strategy']} {line['metric']}: {line['median']:+.4g}, "
                f"better in {line['better']} of {line['seeds']}"
            )
        return report


def paired(rows: list[Row]) -> list[Row]:
    """Per strategy other than ``peak`` and per :data:`PAIRED` metric: the differences with
    ``peak`` on the same seed (median, quartiles), and on how many seeds it does better."""
    base = {r["seed"]: r for r in rows if r["strategy"] == "peak"}
    table: list[Row] = []
    for strategy in [s for s in LAUNCHERS if s != "peak"]:
        mine = [r for r in rows if r["strategy"] == strategy and r["seed"] in base]
        if not mine:
            continue
        for metric, lower in PAIRED.items():
            diffs = [number(r, metric) - number(base[r["seed"]], metric) for r in mine]
            _, q1, median, q3, _ = five(diffs)
            better = sum(d < 0 if lower else d > 0 for d in diffs)
            table.append(
                {
                    "strategy": strategy,
                    "metric": metric,
                    "seeds": len(diffs),
                    "median": round(median, 3),
                    "q1": round(q1, 3),
                    "q3": round(q3, 3),
                    "better": better,
                    "worse": sum(d > 0 if lower else d < 0 for d in diffs),
                }
            )
    return table


def _figure(rows: list[Row], path: Path) -> Path:
    """One box plot per drawn metric (strategies side by side), and a few seeds' AMR needs."""
    plt = pyplot()
    strategies = [s for s in LAUNCHERS if any(r["strategy"] == s for r in rows)]
    figure, axes = plt.subplots(2, 4, figsize=(17, 8))
    cells = list(axes.flat)
    _curves(cells[0], rows)
    for axis, (metric, label) in zip(cells[1:], DRAWN.items(), strict=True):
        data = [[number(r, metric) for r in rows if r["strategy"] == s] for s in strategies]
        axis.boxplot(data, tick_labels=strategies, whis=(0, 100))
        for k, values in enumerate(data):
            if values:
                median = five(values)[2]
                axis.annotate(
                    f"{median:,.0f}" if abs(median) >= 100 else f"{median:.3g}",
                    (k + 1, median),
                    xytext=(14, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=8,
                )
        axis.set_title(label, fontsize=10)
        axis.grid(True, axis="y", alpha=0.3)
    seeds = len({r["seed"] for r in rows})
    figure.suptitle(
        f"coorm-sim evolving: an AMR code and a parameter sweep on one cluster, {seeds} seeds "
        "(boxes: quartiles, whiskers: min-max, label: median)"
    )
    return save(figure, path)


def _curves(axis: Any, rows: list[Row]) -> None:
    """Hosts the AMR code needs per period, for the first three seeds."""
    seen: dict[int, tuple[int, int, int]] = {}
    for r in rows:
        seed, peak, periods, period = (
            int(number(r, k)) for k in ("seed", "peak", "periods", "period")
        )
        seen.setdefault(seed, (peak, periods, period))
    for seed in sorted(seen)[:3]:
        peak, periods, period = seen[seed]
        needs = host_needs(data_sizes(seed, periods), peak)
        hours = [k * period / HOUR for k in range(periods + 1)]
        axis.step(hours, [*needs, needs[-1]], where="post", label=f"seed {seed}")
    axis.axhline(max(v[0] for v in seen.values()), color="grey", linestyle=":", label="peak")
    axis.set_title("hosts the AMR code needs (compute hours)", fontsize=10)
    axis.set_xlabel("hours of computation")
    axis.legend(fontsize=8)
