"""CooRMv2 policy pass cost, next to v1's on the same platform and requests.

The platform and the v1 applications are policy_pass.py's (seeded: clusters of 32 to 512 hosts
under a foreign load, requests on 1 to 3 clusters). Each v1 request becomes v2 requests (one
non-preemptible request per cluster, co-allocated); every other application also sends a
pre-allocation and a preemptible request on one of its clusters. Prints:

    policy_v2 apps=N clusters=C seconds=S version=v2
    policy_v2 apps=N clusters=C seconds=S version=v1

Each figure is the best of ``--repeat`` runs of the pass alone (workload generation excluded),
on one core; v1 runs a fresh engine each time (no memo of a previous pass).

Run from the repository root: ``.venv/bin/python benchmarks/policy_v2.py``.
"""

from __future__ import annotations

import argparse
import random
from functools import partial

from policy_pass import NOW, applications, best_of, platform

from coorm_bridge.core.policy import Application, Policy, PolicyConfig
from coorm_bridge.core.policy_v2 import plan
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.typed import EvolvingApplication, RequestRow, TypedRequest


def evolving(rng: random.Random, free: dict[str, Profile], v1: Application) -> EvolvingApplication:
    """The v1 application's request as v2 requests; every other one with more (see above)."""
    rows: list[RequestRow] = []
    first: str | None = None
    if v1.request is not None:
        for cluster, hosts in v1.request.nodes.items():
            relation = {} if first is None else {"related_to": first, "related_how": "coalloc"}
            request = TypedRequest(
                id=f"np-{cluster}",
                cluster=cluster,
                hosts=hosts,
                duration=v1.request.duration,
                **relation,  # type: ignore[arg-type]
            )
            rows.append(RequestRow(request=request))
            first = first or request.id
    if v1.order % 2 == 0:
        cluster = rng.choice(v1.request.clusters if v1.request else v1.clusters)
        size = free[cluster].initial
        for kind, hosts in (("pre-allocation", size // 4), ("preemptible", size // 8)):
            request = TypedRequest(
                id=kind,
                cluster=cluster,
                hosts=rng.randint(1, max(1, hosts)),
                duration=rng.randint(300, 86_400),
                type=kind,  # type: ignore[arg-type]
            )
            rows.append(RequestRow(request=request))
    return EvolvingApplication(id=v1.id, order=v1.order, clusters=v1.clusters, requests=rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--apps", type=int, default=1_000)
    parser.add_argument("--clusters", type=int, default=64)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    free = platform(rng, args.clusters)
    v1 = applications(rng, free, args.apps)
    v2 = [evolving(rng, free, app) for app in v1]
    requests = sum(len(app.requests) for app in v2)

    seconds = best_of(args.repeat, partial(plan, free, v2, NOW, 30))
    print(
        f"policy_v2 apps={args.apps} clusters={args.clusters} seconds={seconds:.3f} "
        f"version=v2 requests={requests}"
    )
    seconds = best_of(args.repeat, lambda: Policy(PolicyConfig()).plan(free, v1, NOW))
    print(f"policy_v2 apps={args.apps} clusters={args.clusters} seconds={seconds:.3f} version=v1")


if __name__ == "__main__":
    main()
