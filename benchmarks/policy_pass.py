"""Policy pass cost (docs/design.md §8: 10,000 waiting applications on 64 clusters under 0.2 s).

Seeded random workloads: clusters of 32 to 512 hosts with a foreign load of running and pending
jobs, applications asking for 1 to 3 clusters (a third of them coupled), durations from minutes
to a day, some applications still without a request. Prints one line per case:

    policy_pass apps=N clusters=C seconds=S

``full`` cases run a fresh engine; ``incremental`` adds one request at the end of the queue of the
10,000-application case and runs the same engine again; ``rerun`` runs it again on the very same
table (the whole queue is taken over from the previous pass); ``middle`` changes the request in
the middle of the queue (half of it is taken over, the rest searched again where its clusters'
profiles moved). Each figure is the best of ``--repeat`` runs of the pass alone (workload
generation excluded), on one core.
"""

from __future__ import annotations

import argparse
import random
import time
from functools import partial

from coorm_bridge.core.model import Request
from coorm_bridge.core.policy import Application, Policy, PolicyConfig
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import AppState

NOW = 1_700_000_000


def platform(rng: random.Random, clusters: int) -> dict[str, Profile]:
    """Per cluster, the hosts its batch system leaves free: running and pending foreign jobs."""
    free = {}
    for c in range(clusters):
        hosts = rng.choice((32, 64, 128, 256, 512))
        jobs = []
        t = NOW
        for _ in range(rng.randint(5, 40)):
            size = rng.randint(1, hosts // 4)
            length = rng.randint(600, 36_000)
            jobs.append((t, t + length, size))
            t += rng.randint(0, 3_600)
        profile = Profile.from_intervals(hosts, jobs)
        free[f"c{c:02d}"] = profile.clamped(0)
    return free


def applications(rng: random.Random, free: dict[str, Profile], count: int) -> list[Application]:
    names = sorted(free)
    apps = []
    for i in range(count):
        wanted = rng.sample(names, k=rng.choice((1, 1, 2, 3)))
        nodes = {c: rng.randint(1, max(1, free[c].initial // 3)) for c in wanted}
        request = Request(nodes=nodes, duration=rng.randint(300, 86_400))
        has_request = rng.random() > 0.05
        apps.append(
            Application(
                id=f"app{i}",
                order=i,
                clusters=tuple(names),
                state=AppState.WAITING if has_request else AppState.SUBMITTED,
                request=request if has_request else None,
            )
        )
    return apps


def fresh_pass(free: dict[str, Profile], apps: list[Application]) -> None:
    """A full pass: a new engine has no memo of any previous pass."""
    result = Policy(PolicyConfig()).plan(free, apps, NOW)
    assert result.recomputed == sum(app.request is not None for app in apps)


def best_of(repeat: int, run: object) -> float:
    assert callable(run)
    times = []
    for _ in range(repeat):
        begin = time.process_time()
        run()
        times.append(time.process_time() - begin)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    for count, clusters in ((1_000, 8), (10_000, 64)):
        rng = random.Random(args.seed)
        free = platform(rng, clusters)
        apps = applications(rng, free, count)
        seconds = best_of(args.repeat, partial(fresh_pass, free, apps))
        print(f"policy_pass apps={count} clusters={clusters} seconds={seconds:.3f} mode=full")

    policy = Policy(PolicyConfig())
    policy.plan(free, apps, NOW)
    newcomer = applications(random.Random(args.seed + 1), free, 1)[0]
    newcomer = newcomer.model_copy(update={"id": "newcomer", "order": len(apps)})
    extended = [*apps, newcomer]

    def incremental() -> None:
        policy.plan(free, apps, NOW)  # back to the queue without the newcomer (not timed below)

    def with_newcomer() -> None:
        result = policy.plan(free, extended, NOW)
        assert result.recomputed == 1, result.recomputed

    timings = []
    for _ in range(args.repeat):
        incremental()
        timings.append(best_of(1, with_newcomer))
    print(
        f"policy_pass apps={len(extended)} clusters={len(free)} seconds={min(timings):.3f} "
        "mode=incremental"
    )

    def rerun() -> None:
        result = policy.plan(free, apps, NOW)
        assert result.recomputed == 0, result.recomputed

    timings = []
    for _ in range(args.repeat):
        incremental()
        timings.append(best_of(1, rerun))
    print(
        f"policy_pass apps={len(apps)} clusters={len(free)} seconds={min(timings):.3f} mode=rerun"
    )

    half = len(apps) // 2
    moved = apps[half].model_copy(update={"request": newcomer.request})
    changed = [*apps[:half], moved, *apps[half + 1 :]]

    def middle() -> None:
        policy.plan(free, changed, NOW)

    timings = []
    for _ in range(args.repeat):
        incremental()
        timings.append(best_of(1, middle))
    print(
        f"policy_pass apps={len(apps)} clusters={len(free)} seconds={min(timings):.3f} mode=middle"
    )


if __name__ == "__main__":
    main()
