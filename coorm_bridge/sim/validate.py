"""``coorm-sim validate``: the paper's Fig. 8, the real system against the simulation.

Each run takes one pack of a workload (:mod:`.workload`, W0 and W2 by default) through the
simulator (:class:`~coorm_bridge.sim.engine.Engine`, in this process) and then through a real
``coorm-bridge serve`` on the mock platform with real launcher processes over HTTP
(:mod:`.validate_run`), with the same platform, policy interval, fair-start and selector
settings, and sets them side by side: bytes per application (real with and without the HTTP
headers, simulated), messages, CPU time (the daemon against the simulated policy, the launcher
processes against the simulated selectors), the applications' mean response, and the ratios.

The real run measures the machine: its runs go one at a time (``exclusive``), and unlike the
other experiments' runs they are not deterministic (the CPU times, and the schedule where a
pass or a launcher came late). A stored run is reused like any other; ``--fresh`` measures again.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from coorm_bridge.batchsim import SPEEDUP_LIMIT
from coorm_bridge.launchers.app import SelectorSpec
from coorm_bridge.sim.engine import Engine, RunResult
from coorm_bridge.sim.experiment import Experiment, Report, Row, RunSpec
from coorm_bridge.sim.figures import number, pyplot, save, write_csv
from coorm_bridge.sim.resources import HOSTS, paper_platform
from coorm_bridge.sim.scalability import FAIR_START, INTERVAL
from coorm_bridge.sim.validate_run import Pack, RealResult, run_real
from coorm_bridge.sim.workload import PACK, Workload, workload

#: Platform seconds per real second by default. A W0 pack on 8 clusters lasts about 4 platform
#: hours: 12 minutes of real time at 20. Faster, the daemon does not keep up on a 2-core machine
#: (at 50, with 140 sessions waiting, a pass took about a real second, 50 platform seconds,
#: against one per platform second in the simulator): docs/experiments.md.
SPEEDUP = 20.0
#: Launcher processes by default, each driving a share of the pack.
WORKERS = 4
#: The real run may last this many times the simulated makespan (in real time), plus a margin.
DEADLINE_FACTOR, DEADLINE_MARGIN_S = 4.0, 300.0
#: The quick run's pack of 8 applications: one whose schedule lasts about 3 platform minutes.
QUICK_PACK = 1
#: The paper's Fig. 8: real traffic up to 50% above the simulation's, CPU up to 3.3 times.
PAPER = "the paper: real traffic up to 1.5 times the simulation's, CPU up to 3.3 times"


class ValidateRun(RunSpec):
    experiment: str = "validate"
    workload: Workload
    clusters: Annotated[int, Field(ge=1, le=64)]
    trace: Literal["nasa", "lublin"] = "nasa"
    pack: Annotated[int, Field(ge=0)]
    size: Annotated[int, Field(ge=1, le=10_000)] = PACK
    speedup: Annotated[float, Field(gt=0), SPEEDUP_LIMIT] = SPEEDUP
    workers: Annotated[int, Field(ge=1, le=64)] = WORKERS


def simulate(spec: ValidateRun) -> RunResult:
    """The simulator's run of the pack, with the launchers' default ``min_gain``."""
    apps = workload(spec.workload, spec.trace, spec.pack, HOSTS, spec.size)
    return Engine(
        paper_platform(spec.clusters, HOSTS),
        apps,
        fair_start=FAIR_START,
        interval=INTERVAL,
        min_gain=SelectorSpec().min_gain,
    ).run()


def measure(spec: ValidateRun) -> Row:
    """Simulate, then run for real (the deadline follows from the simulated makespan)."""
    sim = simulate(spec)
    makespan = max((o.end for o in sim.outcomes if o.end is not None), default=0)
    deadline = DEADLINE_FACTOR * makespan / spec.speedup + DEADLINE_MARGIN_S
    pack = Pack(
        spec.workload, spec.trace, spec.pack, spec.clusters, spec.size, spec.speedup, spec.workers
    )
    real = run_real(pack, deadline)
    return row(spec, sim, real)


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 1) if values else None


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def _ratio(real: float | None, sim: float | None) -> float | None:
    return round(real / sim, 2) if real is not None and sim else None


def row(spec: ValidateRun, sim: RunResult, real: RealResult) -> Row:
    """The run's line: the real figures, the simulated ones, their ratios."""
    apps = spec.size
    ended = [a for a in real.apps if a.end is not None]
    lags = [lag for a in real.apps for lag in a.event_lags]
    late = [a.start - a.promised for a in real.apps if a.start is not None and a.promised]
    traffic = real.traffic
    sim_response = _mean([o.end - o.arrival for o in sim.outcomes if o.end is not None])
    real_response = _mean([a.end - a.arrival for a in ended if a.end is not None])
    kb = traffic.bytes / apps / 1000
    sim_kb = sim.message_bytes / apps / 1000
    return {
        "workload": spec.workload.value,
        "clusters": spec.clusters,
        "trace": spec.trace,
        "pack": spec.pack,
        "applications": apps,
        "speedup": spec.speedup,
        "workers": spec.workers,
        "real_s": round(real.real_s, 1),
        "started": sum(a.start is not None for a in real.apps),
        "ended": len(ended),
        "real_bytes_up": traffic.up.bytes,
        "real_bytes_down": traffic.down.bytes,
        "real_body_bytes": traffic.body_bytes,
        "real_kb_per_app": round(kb, 2),
        "real_body_kb_per_app": round(traffic.body_bytes / apps / 1000, 2),
        "sim_kb_per_app": round(sim_kb, 2),
        "kb_ratio": _ratio(kb, sim_kb),
        "real_messages": traffic.exchanges,
        "sim_messages": sim.messages,
        "messages_ratio": _ratio(traffic.exchanges, sim.messages),
        "connections": traffic.connections,
        "real_requests": sum(a.requests for a in real.apps),
        "sim_requests": sum(o.requests for o in sim.outcomes),
        "real_computed": sum(a.computed for a in real.apps),
        "sim_computed": sim.computed_configurations,
        "daemon_cpu_s": round(real.daemon_cpu_s, 2),
        "sim_policy_cpu_s": round(sim.cpu_policy_s, 2),
        "daemon_cpu_ratio": _ratio(real.daemon_cpu_s, sim.cpu_policy_s),
        "launchers_cpu_s": round(real.launchers_cpu_s, 2),
        "real_selectors_cpu_s": round(real.selectors_cpu_s, 2),
        "sim_selectors_cpu_s": round(sim.cpu_selectors_s, 2),
        "launchers_cpu_ratio": _ratio(real.launchers_cpu_s, sim.cpu_selectors_s),
        "real_mean_response_s": real_response,
        "sim_mean_response_s": sim_response,
        "response_ratio": _ratio(real_response, sim_response),
        "real_passes": int(real.metrics.get("coorm_policy_passes", 0)),
        "sim_passes": sim.passes,
        "event_lag_p50_s": _quantile(lags, 0.5),
        "event_lag_p95_s": _quantile(lags, 0.95),
        "event_lag_max_s": _quantile(lags, 1.0),
        "start_late_p95_s": _quantile(late, 0.95),
        "launcher_warnings": sum(len(a.warnings) for a in real.apps),
        "first_warning": next((f"{a.id}: {w}" for a in real.apps for w in a.warnings), None),
        "daemon_errors": len(real.daemon_errors),
    }


class Validate(Experiment):
    name = "validate"
    help = "the paper's Fig. 8: a pack through the real daemon and launchers against the simulator"
    spec = ValidateRun
    exclusive = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--workload", nargs="+", choices=[w.value for w in Workload],
            help="workloads (default W0 W2; quick W0)",
        )  # fmt: skip
        parser.add_argument("--clusters", type=int, help="clusters (default 8; quick 2)")
        parser.add_argument(
            "--pack", type=int, help=f"the pack (default 0; quick {QUICK_PACK}, a short one)"
        )
        parser.add_argument(
            "--size", type=int, help=f"applications of the pack (default {PACK}; quick 8)"
        )
        parser.add_argument(
            "--speedup", type=float, default=SPEEDUP,
            help=f"platform seconds per real second (default {SPEEDUP:g})",
        )  # fmt: skip
        parser.add_argument(
            "--workers", type=int, default=WORKERS,
            help=f"launcher processes, each driving a share of the pack (default {WORKERS})",
        )  # fmt: skip
        parser.add_argument("--trace", choices=["nasa", "lublin"], default="nasa")

    def plan(self, args: argparse.Namespace) -> list[RunSpec]:
        quick = bool(args.quick)
        workloads = args.workload or (["W0"] if quick else ["W0", "W2"])
        return [
            ValidateRun(
                workload=Workload(w),
                clusters=args.clusters or (2 if quick else 8),
                trace=args.trace,
                pack=args.pack if args.pack is not None else (QUICK_PACK if quick else 0),
                size=args.size or (8 if quick else PACK),
                speedup=args.speedup,
                workers=min(args.workers, 2) if quick else args.workers,
            )
            for w in workloads
        ]

    def execute(self, spec: RunSpec) -> list[Row]:
        assert isinstance(spec, ValidateRun)
        return [measure(spec)]

    def report(self, rows: list[Row], out: Path) -> Report:
        report = Report()
        table = [_side_by_side(r) for r in rows]
        report.files.append(write_csv(out / "validate-summary.csv", [x for t in table for x in t]))
        report.files.append(_figure(rows, out / "validate.png"))
        for r, lines in zip(rows, table, strict=True):
            report.summary.append(
                f"{r['workload']} pack {r['pack']}, {r['clusters']} clusters, "
                f"{r['applications']} applications, speed-up {r['speedup']:g}: "
                f"{r['real_s']} s of real time, {r['ended']} of {r['applications']} ended"
            )
            report.summary.append(f"  {'':26} {'real':>12} {'simulated':>12} {'ratio':>7}")
            for line in lines:
                report.summary.append(
                    f"  {line['metric']!s:26} {_text(line['real']):>12} "
                    f"{_text(line['simulated']):>12} {_text(line['ratio']):>7}"
                )
            report.summary.append(
                f"  daemon lag: events reach launchers {r['event_lag_p50_s']} s after their pass "
                f"(median; 95th percentile {r['event_lag_p95_s']} s, worst "
                f"{r['event_lag_max_s']} s; platform seconds), starts past their last estimate "
                f"by {r['start_late_p95_s']} s (95th percentile)"
            )
        report.summary.append(PAPER)
        return report


#: The comparison's lines: (metric, real column, simulated column).
COMPARED = (
    ("KB per application", "real_kb_per_app", "sim_kb_per_app"),
    ("KB per app, bodies only", "real_body_kb_per_app", "sim_kb_per_app"),
    ("messages", "real_messages", "sim_messages"),
    ("requests", "real_requests", "sim_requests"),
    ("computed configurations", "real_computed", "sim_computed"),
    ("policy passes", "real_passes", "sim_passes"),
    ("CPU daemon / policy (s)", "daemon_cpu_s", "sim_policy_cpu_s"),
    ("CPU launchers / sel. (s)", "launchers_cpu_s", "sim_selectors_cpu_s"),
    ("CPU selectors (s)", "real_selectors_cpu_s", "sim_selectors_cpu_s"),
    ("mean response (s)", "real_mean_response_s", "sim_mean_response_s"),
)


def _side_by_side(r: Row) -> list[Row]:
    """One run as metric, real, simulated, ratio lines (the table docs/experiments.md shows)."""
    keys = {k: r[k] for k in ("workload", "clusters", "pack", "applications", "speedup")}
    lines: list[Row] = []
    for metric, real, sim in COMPARED:
        a, b = r[real], r[sim]
        ratio = _ratio(float(a), float(b)) if isinstance(a, int | float) and b else None
        lines.append(keys | {"metric": metric, "real": a, "simulated": b, "ratio": ratio})
    return lines


def _text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return "-" if value is None else str(value)


def _figure(rows: list[Row], path: Path) -> Path:
    """Fig. 8's panels: per run, the real bars beside the simulated ones."""
    plt = pyplot()
    figure, axes = plt.subplots(1, 4, figsize=(17, 4.6))
    labels = [f"{r['workload']} pack {r['pack']}\n{r['clusters']} clusters" for r in rows]
    panels = (
        ("KB per application", ("real_kb_per_app", "real_body_kb_per_app", "sim_kb_per_app"),
         ("real", "real, bodies only", "simulated"), False),
        ("Messages", ("real_messages", "sim_messages"), ("real", "simulated"), False),
        ("CPU time (s)", ("daemon_cpu_s", "sim_policy_cpu_s", "launchers_cpu_s",
                          "sim_selectors_cpu_s"),
         ("daemon", "simulated policy", "launchers", "simulated selectors"), True),
        ("Mean response (s)", ("real_mean_response_s", "sim_mean_response_s"),
         ("real", "simulated"), False),
    )  # fmt: skip
    for axis, (title, columns, names, log) in zip(axes, panels, strict=True):
        width = 0.8 / len(columns)
        for k, (column, name) in enumerate(zip(columns, names, strict=True)):
            xs = [i - 0.4 + width * (k + 0.5) for i in range(len(rows))]
            values = [number(r, column) if r[column] is not None else 0.0 for r in rows]
            axis.bar(xs, values, width * 0.9, label=name, color=f"C{k}")
        axis.set_xticks(range(len(rows)), labels)
        axis.set_title(title)
        if log:
            axis.set_yscale("log")
        axis.grid(True, axis="y", alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle("coorm-sim validate: the real daemon and launchers against the simulator")
    return save(figure, path)
