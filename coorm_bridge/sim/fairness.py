"""``coorm-sim fairness``: the paper's Fig. 7, the unfairness an insufficient fair-start causes.

Workload W1 (a pack with one CEM application inserted); the CEM launcher gets an *adaptation
delay*: after a new view it waits that long before answering (a slow selector). For each
fair-start value and each delay, its end time is compared with the end time of the very same
run with no delay: the increase's empirical CDF over packs is the figure. A ghost holds a done
application's hosts for fair-start seconds so that older applications can adapt before the
hosts go to younger ones; the price is idle hosts, reported as ghost host-hours against the
host-hours applications really ran.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from coorm_bridge.sim.engine import Engine
from coorm_bridge.sim.experiment import Experiment, Report, Row, RunSpec
from coorm_bridge.sim.figures import group, number, pyplot, save, write_csv
from coorm_bridge.sim.resources import HOSTS, paper_platform
from coorm_bridge.sim.workload import PACK, TRACE_NAMES, Workload, packs, workload

#: The CEM application of W1.
CEM_ID = "cem"
INTERVAL = 1
#: An hour, in seconds: the paper's "delayed more than an hour".
HOUR = 3600
#: The per-pack table the summary is computed from, beside it.
INCREASE_CSV = "fairness-increase.csv"


class FairnessRun(RunSpec):
    experiment: str = "fairness"
    clusters: Annotated[int, Field(ge=1, le=64)]
    trace: Literal["nasa", "lublin"]
    pack: Annotated[int, Field(ge=0)]
    fair_start: Annotated[int, Field(ge=0, le=86_400)]
    delay: Annotated[int, Field(ge=0, le=86_400)]
    size: Annotated[int, Field(ge=1, le=10_000)] = PACK


def measure(spec: FairnessRun) -> Row:
    apps = workload(Workload.W1, spec.trace, spec.pack, HOSTS, spec.size)
    engine = Engine(
        paper_platform(spec.clusters, HOSTS),
        apps,
        fair_start=spec.fair_start,
        interval=INTERVAL,
        delays={CEM_ID: spec.delay},
    )
    result = engine.run()
    (cem,) = [o for o in result.outcomes if o.id == CEM_ID]
    return {
        "clusters": spec.clusters,
        "trace": spec.trace,
        "pack": spec.pack,
        "fair_start": spec.fair_start,
        "delay": spec.delay,
        "cem_arrival": cem.arrival,
        "cem_start": cem.start,
        "cem_end": cem.end,
        "cem_requests": cem.requests,
        "cem_hosts": sum(cem.request.nodes.values()) if cem.request else None,
        "ghost_host_hours": round(result.ghost_host_seconds / HOUR, 3),
        "used_host_hours": round(result.used_host_seconds / HOUR, 3),
    }


class Fairness(Experiment):
    name = "fairness"
    help = "the paper's Fig. 7: CEM's end-time increase per adaptation delay and fair-start"
    spec = FairnessRun

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--clusters", type=int, help="cluster count (default 4; quick 2)")
        parser.add_argument(
            "--delays", type=int, nargs="+", help="adaptation delays in s (0 is always run)"
        )
        parser.add_argument("--fair-starts", type=int, nargs="+", help="fair-start values in s")
        parser.add_argument("--traces", nargs="+", choices=list(TRACE_NAMES))
        parser.add_argument("--packs", type=int, help="packs per trace (default 10; quick 2)")
        parser.add_argument("--size", type=int, help=f"applications per pack (default {PACK})")

    def plan(self, args: argparse.Namespace) -> list[RunSpec]:
        quick = bool(args.quick)
        clusters = args.clusters or (2 if quick else 4)
        delays = sorted({0, *(args.delays or ([10] if quick else [2, 5, 10, 30, 60]))})
        fair_starts = args.fair_starts or ([5] if quick else [0, 5, 30])
        traces = args.traces or ["nasa"]
        size = args.size or (40 if quick else PACK)
        count = args.packs or (2 if quick else 10)
        return [
            FairnessRun(
                clusters=clusters, trace=trace, pack=pack, fair_start=fs, delay=d, size=size
            )
            for trace in traces
            for pack in range(min(count, packs(trace, HOSTS, size)))
            for fs in fair_starts
            for d in delays
        ]

    def execute(self, spec: RunSpec) -> list[Row]:
        assert isinstance(spec, FairnessRun)
        return [measure(spec)]

    def report(self, rows: list[Row], out: Path) -> Report:
        increases = end_increases(rows)
        table = summary(increases)
        idle = []
        for (fs,), members in group(rows, "fair_start").items():
            ghost = sum(number(r, "ghost_host_hours") for r in members)
            used = sum(number(r, "used_host_hours") for r in members)
            idle.append({"fair_start": fs, "idle_host_hours_per_run": ghost / len(members),
                         "idle_share": round(ghost / used, 5) if used else None})  # fmt: skip
        report = Report()
        report.files.append(write_csv(out / INCREASE_CSV, increases))
        report.files.append(write_csv(out / "fairness-summary.csv", table))
        report.files.append(write_csv(out / "fairness-idle.csv", idle))
        report.files.append(_figure(increases, out / "fairness.png"))
        traces = sorted({str(r["trace"]) for r in rows})
        report.summary.append("trace(s): " + ", ".join(TRACE_NAMES[t] for t in traces))
        for line in table:
            report.summary.append(
                f"fair-start {line['fair_start']:>4} s, delay {line['delay']:>4} s: CEM ends "
                f"later in {line['ended_later']} of {line['runs']} packs, "
                f"mean {line['mean_increase_s']:+.0f} s, "
                f"median {line['median_increase_s']:+.0f} s, "
                f"min {line['min_increase_s']:+.0f} s, max {line['max_increase_s']:+.0f} s"
            )
        for line in idle:
            share = line["idle_share"]
            report.summary.append(
                f"fair-start {line['fair_start']:>4} s: ghosts idle "
                f"{line['idle_host_hours_per_run']:.1f} host-hours per pack"
                + (f" ({float(share):.2%} of the host-hours used)" if share is not None else "")
            )
        return report


def end_increases(rows: list[Row]) -> list[Row]:
    """Per pack, fair-start and non-zero delay (one line each, the per-pack table
    :data:`INCREASE_CSV`): the CEM application's end in that run, its end in the same pack
    with the same fair-start and no delay, and the increase (the first minus the second); in
    the order of the summary (fair-start, then delay), packs in order."""
    base = {
        (r["clusters"], r["trace"], r["pack"], r["fair_start"]): r["cem_end"]
        for r in rows
        if r["delay"] == 0
    }
    found: list[Row] = []
    for r in rows:
        if r["delay"] == 0:
            continue
        zero = base.get((r["clusters"], r["trace"], r["pack"], r["fair_start"]))
        if zero is None or r["cem_end"] is None:
            continue
        found.append(
            {
                "clusters": r["clusters"],
                "trace": r["trace"],
                "pack": r["pack"],
                "fair_start": r["fair_start"],
                "delay": r["delay"],
                "cem_end_s": r["cem_end"],
                "cem_end_no_delay_s": zero,
                "increase_s": number(r, "cem_end") - float(zero),
            }
        )
    return sorted(found, key=_per_pack_order)


def _per_pack_order(row: Row) -> tuple[float, str, float, float, float]:
    return (
        number(row, "clusters"),
        str(row["trace"]),
        number(row, "fair_start"),
        number(row, "delay"),
        number(row, "pack"),
    )


def summary(increases: list[Row]) -> list[Row]:
    """Per fair-start and delay, from the per-pack increases (:func:`end_increases`): the
    packs, how many ended later (and their share), the mean, median, least and largest
    increase in seconds, and the share of packs more than an hour later."""
    table: list[Row] = []
    for (fs, delay), members in group(increases, "fair_start", "delay").items():
        values = sorted(number(r, "increase_s") for r in members)
        later = sum(v > 0 for v in values)
        table.append(
            {
                "fair_start": fs,
                "delay": delay,
                "runs": len(values),
                "ended_later": later,
                "delayed_share": round(later / len(values), 3),
                "mean_increase_s": round(statistics.fmean(values), 1),
                "median_increase_s": statistics.median(values),
                "min_increase_s": values[0],
                "max_increase_s": values[-1],
                "over_an_hour_share": round(sum(v > HOUR for v in values) / len(values), 3),
            }
        )
    return table


#: Each delay's median marker: a distinct shape per delay.
MEDIAN_MARKERS = ("o", "s", "D", "^", "v", "p", "h", "*")
#: Medians often coincide (at 0: most packs end as without delay), so each delay's marker sits
#: this far above or below one half, in share of packs, in the delays' order: all of them show.
MEDIAN_SPREAD = 0.05


def _figure(increases: list[Row], path: Path) -> Path:
    plt = pyplot()
    by_fs = group(increases, "fair_start")
    figure, axes = plt.subplots(1, max(1, len(by_fs)), figsize=(5.5 * max(1, len(by_fs)), 4.2))
    axes = axes if hasattr(axes, "__len__") else [axes]
    for axis, ((fs,), members) in zip(axes, by_fs.items(), strict=False):
        delays = group(members, "delay")
        for k, ((delay,), runs) in enumerate(delays.items()):
            seconds = sorted(number(r, "increase_s") for r in runs)
            values = [v / 60 for v in seconds]
            shares = [(i + 1) / len(values) for i in range(len(values))]
            median = statistics.median(seconds)  # as in the summary, in seconds
            colour = f"C{k}"
            axis.step(
                values,
                shares,
                where="post",
                color=colour,
                linewidth=1.2 + 0.4 * (len(delays) - 1 - k),
                alpha=0.85,
                label=f"delay {delay} s (median {median:+g} s)",
            )
            # The median where the CDF crosses one half, each delay's a little above or below
            # it (MEDIAN_SPREAD) and drawn above every line, so that equal medians all show.
            axis.scatter(
                [median / 60],
                [0.5 + MEDIAN_SPREAD * (k - (len(delays) - 1) / 2)],
                marker=MEDIAN_MARKERS[k % len(MEDIAN_MARKERS)],
                s=48,
                facecolor=colour,
                edgecolor="white",
                linewidths=0.8,
                zorder=5,
            )
        axis.set_xscale("symlog", linthresh=1)
        axis.set_xlabel("end-time increase (minutes)")
        axis.set_ylabel("share of packs")
        axis.set_title(f"fair-start {fs} s")
        axis.set_ylim(0, 1.02)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8, loc="upper left")
    figure.suptitle(
        "coorm-sim fairness: CDF of the CEM application's end-time increase "
        "(markers near one half: each delay's median)"
    )
    return save(figure, path)
