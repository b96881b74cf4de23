"""The issue's coorm-sim goals, as one run of the scalability experiment prints them.

W2 (half of the jobs CEM applications) on 8 clusters of 128 hosts, a 200-application pack of the
NASA trace: the CPU time of the whole schedule (policy plus selectors, goal under 1 s; the paper
usually under 100 s on a 2.4 GHz Opteron) and the bytes of JSON per application (goal 30 KB;
the paper 300 KB with CDR encoding). Also the configurations computed and the policy alone.
"""

from __future__ import annotations

import argparse

from coorm_bridge.sim.scalability import ScalabilityRun, measure
from coorm_bridge.sim.workload import Workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="W2", choices=[w.value for w in Workload])
    parser.add_argument("--clusters", type=int, default=8)
    parser.add_argument("--pack", type=int, default=0)
    parser.add_argument("--trace", default="nasa", choices=["nasa", "lublin"])
    args = parser.parse_args()
    spec = ScalabilityRun(
        scheduler="coorm",
        workload=Workload(args.workload),
        clusters=args.clusters,
        trace=args.trace,
        pack=args.pack,
    )
    row = measure(spec)
    print(
        f"sim_scalability workload={args.workload} clusters={args.clusters} "
        f"trace={args.trace} pack={args.pack} apps={row['applications']} "
        f"computed={row['computed_configurations']} cpu_schedule_s={row['cpu_schedule_s']} "
        f"cpu_policy_s={row['cpu_policy_s']} kb_per_app={row['kb_per_app']} "
        f"messages={row['messages']} (goals: cpu_schedule_s < 1, kb_per_app <= 30)"
    )


if __name__ == "__main__":
    main()
