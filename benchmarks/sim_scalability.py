"""The issue's coorm-sim goals, as one run of the scalability experiment prints them.

W2 (half of the jobs CEM applications) on 8 clusters of 128 hosts, a 200-application pack of the
NASA trace: the CPU time of the whole schedule (policy plus selectors, goal under 1 s; the paper
usually under 100 s on a 2.4 GHz Opteron) and the bytes of JSON per application (goal 30 KB;
the paper 300 KB with CDR encoding). Also the configurations computed, the policy alone, the
requests sent and the change events received (in all and per application), their share of the
bytes, and the mean response time. ``--min-gain S`` runs the launchers with
``[selector] min_gain = S`` (a new selection is sent only if it ends S seconds earlier; by
default the launchers' default); ``--protocol full`` the protocol before the quiet one (whole
profiles, every change). Also printed: the view changes not sent (past the launcher's horizon),
and the reservation calls the daemon would make for the placeholders, per application.
"""

from __future__ import annotations

import argparse
import statistics

from coorm_bridge.launchers.app import DEFAULT_MIN_GAIN
from coorm_bridge.sim.engine import Engine
from coorm_bridge.sim.resources import paper_platform
from coorm_bridge.sim.scalability import FAIR_START, HOSTS, INTERVAL
from coorm_bridge.sim.workload import Workload, workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="W2", choices=[w.value for w in Workload])
    parser.add_argument("--clusters", type=int, default=8)
    parser.add_argument("--pack", type=int, default=0)
    parser.add_argument("--trace", default="nasa", choices=["nasa", "lublin"])
    parser.add_argument(
        "--min-gain", type=int, default=DEFAULT_MIN_GAIN, help="the launchers' min_gain (s)"
    )
    parser.add_argument("--protocol", default="quiet", choices=["quiet", "full"])
    args = parser.parse_args()
    apps = workload(Workload(args.workload), args.trace, args.pack, HOSTS)
    engine = Engine(
        paper_platform(args.clusters, HOSTS),
        apps,
        fair_start=FAIR_START,
        interval=INTERVAL,
        min_gain=args.min_gain,
        quiet=args.protocol == "quiet",
    )
    result = engine.run()
    responses = [o.end - o.arrival for o in result.outcomes if o.end is not None]
    calls = result.reservation_calls
    per_app = {k: calls.get(k, 0) / len(apps) for k in ("create", "update", "delete")}
    requests = [o.requests for o in result.outcomes]
    changes = [o.change_events for o in result.outcomes]
    print(
        f"sim_scalability workload={args.workload} clusters={args.clusters} "
        f"trace={args.trace} pack={args.pack} min_gain={args.min_gain} "
        f"protocol={args.protocol} apps={len(apps)} "
        f"requests={sum(requests)} change_events={result.change_events} "
        f"per_app: requests mean={statistics.fmean(requests):.1f} "
        f"median={statistics.median(requests):g}, "
        f"change_events mean={statistics.fmean(changes):.1f} "
        f"median={statistics.median(changes):g} "
        f"change_bytes_share={result.change_bytes / result.message_bytes:.3f} "
        f"bytes_per_change_event={result.change_bytes / max(1, result.change_events):.0f} "
        f"mean_response_s={statistics.fmean(responses):.0f} "
        f"computed={result.computed_configurations} "
        f"cpu_schedule_s={result.cpu_schedule_s:.2f} cpu_policy_s={result.cpu_policy_s:.2f} "
        f"kb_per_app={result.message_bytes / len(apps) / 1000:.1f} "
        f"messages={result.messages} "
        f"unheeded={result.unheeded} "
        f"reservation_calls_per_app=create:{per_app['create']:.1f},"
        f"update:{per_app['update']:.1f},delete:{per_app['delete']:.1f} "
        f"(goals: cpu_schedule_s < 1, kb_per_app <= 30)"
    )


if __name__ == "__main__":
    main()
