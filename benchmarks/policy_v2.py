"""CooRMv2 policy pass cost, next to v1's on the same platform and requests: the core model's,
then the bridge's own pass.

The platform and the v1 applications are policy_pass.py's (seeded: clusters of 32 to 512 hosts
under a foreign load, requests on 1 to 3 clusters). Each v1 request becomes v2 requests (one
non-preemptible request per cluster, co-allocated); every other application also sends a
pre-allocation and a preemptible request on one of its clusters. Prints:

    policy_v2 apps=N clusters=C seconds=S version=v2
    policy_v2 apps=N clusters=C seconds=S version=v1

then the figure that matters to a site, the bridge's own pass (``PassRunner.run``, the service
as ``wiring.assemble`` builds it, in this process, its store in a temporary folder) over the mock
platform on a virtual clock: the same clusters, each with a seeded synthetic foreign load (not
policy_pass.py's own jobs, which the mock cannot take as they are) run for an hour, and the same
applications subscribed in turn:

    policy_v2 apps=N clusters=C seconds=S wall=W version=bridge-v1 pass=full
    policy_v2 apps=N clusters=C seconds=S wall=W version=bridge-v1 pass=append
    policy_v2 apps=N clusters=C seconds=S wall=W version=bridge-v2 pass=full
    policy_v2 apps=N clusters=C seconds=S wall=W version=bridge-v2 pass=append

``bridge-v1``: every application a v1 session with its request (``Bridge.put_request``).
``bridge-v2``: every other one (those with a pre-allocation and a preemptible request above) an
evolving session instead (``Evolving.subscribe``), sending one non-preemptible typed request per
cluster it asks for, co-allocated (``coalloc``), then its
pre-allocation and its preemptible request. ``full`` is the first pass, nothing placed before (a
new service each time); ``append`` a pass after one more session with one request subscribed at
the end (after a pass that settled the previous one: the common case). The placement horizon and
``hold_first`` are 0 and the enactor never runs, so no placeholder is made: the figures are the
pass's own (planning, both views, the store's writes and events), not the batch systems'.

Each figure is the best of ``--repeat`` runs of the pass alone (workload generation excluded),
on one core: ``seconds`` is CPU time, ``wall`` includes the store's disk writes; v1 runs a fresh
engine each time (no memo of a previous pass).

Run from the repository root: ``.venv/bin/python benchmarks/policy_v2.py``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from policy_pass import NOW, applications, best_of, platform

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import VirtualClock, parse_platform
from coorm_bridge.core.model import Filter
from coorm_bridge.core.policy import Application, Policy, PolicyConfig
from coorm_bridge.core.policy_v2 import plan
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.typed import EvolvingApplication, RequestRow, TypedRequest
from coorm_bridge.service.config import Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import Service, assemble
from coorm_bridge.store import Store

#: Owners of the sessions, in turn: a few users, as on a shared site.
USERS = 16
#: Seconds the mock platform runs its foreign load before the sessions come: some jobs run,
#: some wait.
LOADED = 3_600


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


def mock_platform(free: dict[str, Profile], seed: int) -> str:
    """The mock platform's TOML: ``free``'s clusters at their sizes, each with a seeded
    synthetic load about as heavy as policy_pass.py's (5 to 40 jobs of at most a quarter of
    the cluster, a minute and a half apart, five hours long on average: by :data:`LOADED`
    most run, some wait)."""
    rng = random.Random(seed)
    text = f"start = {NOW}\n"
    for name, profile in sorted(free.items()):
        text += f'[[cluster]]\nname = "{name}"\nhosts = {profile.final}\n'
    for index, name in enumerate(sorted(free)):
        text += (
            f'[[load]]\nkind = "synthetic"\ncluster = "{name}"\nseed = {seed * 1_000 + index}\n'
            f"count = {rng.randint(5, 40)}\nmean_interarrival = 90.0\nmean_runtime = 18000.0\n"
        )
    return text


def bridge(text: str, folder: Path) -> Service:
    """The service over the mock platform, its load run for :data:`LOADED` seconds and every
    cluster polled. No placeholder is ever held (horizon and ``hold_first`` 0: see above)."""
    adapter = MockAdapter(parse_platform(text), VirtualClock(NOW))
    adapter.run_until(NOW + LOADED)
    config = Config(
        placement=PlacementSettings(horizon=0, hold_first=0),
        limits=LimitSettings(held_share=1.0),
    )
    service = assemble(config, adapter, Store(folder / "bridge.sqlite"))
    for info in service.catalogue.infos:
        service.loop.poll(info.name)
    return service


def owner(order: int) -> str:
    return f"user{order % USERS:02d}"


def subscribe_v1(service: Service, app: Application) -> None:
    user = owner(app.order)
    sid = service.bridge.subscribe(user, Filter(), app.id).session
    if app.request is not None:
        service.bridge.put_request(user, sid, app.request.nodes, app.request.duration)


def subscribe_v2(service: Service, app: EvolvingApplication) -> None:
    """An evolving session sending its requests one by one, as the core line's (its v1
    request's clusters co-allocated)."""
    evolving, user = service.bridge.evolving, owner(app.order)
    assert evolving is not None
    sid = evolving.subscribe(user, Filter(), app.id).session
    for row in app.requests:
        evolving.request(user, sid, row.request)


Subscribe = Callable[[Service], None]


def timed(run: Callable[[], object]) -> tuple[float, float]:
    """CPU and wall seconds of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return time.process_time() - cpu, time.perf_counter() - wall


def bridge_passes(
    text: str, sessions: Sequence[Subscribe], newcomers: Sequence[Subscribe]
) -> tuple[tuple[float, float], tuple[float, float]]:
    """(CPU, wall) of the best first pass, each over a new service, and of the best pass after
    one newcomer (one per repeat) over the first service."""
    full: list[tuple[float, float]] = []
    append: list[tuple[float, float]] = []
    for repeat in range(len(newcomers)):
        with tempfile.TemporaryDirectory(prefix="policy-v2-") as folder:
            service = bridge(text, Path(folder))
            try:
                for subscribe in sessions:
                    subscribe(service)
                passes, now = service.passes, service.adapter.now()
                full.append(timed(partial(passes.run, now)))
                if repeat == 0:
                    for newcomer in newcomers:
                        passes.run(now)  # what the last pass started or ended, settled
                        newcomer(service)
                        append.append(timed(partial(passes.run, now)))
            finally:
                service.close()
    return best(full), best(append)


def best(runs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    return min(cpu for cpu, _ in runs), min(wall for _, wall in runs)


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

    text = mock_platform(free, args.seed)
    newcomer = applications(random.Random(args.seed + 1), free, 1)[0]
    late = [
        newcomer.model_copy(update={"id": f"newcomer{k}", "order": args.apps + k})
        for k in range(args.repeat)
    ]
    v1_sessions = [partial(subscribe_v1, app=app) for app in v1]
    v2_sessions = [
        partial(subscribe_v2, app=evolved) if app.order % 2 == 0 else partial(subscribe_v1, app=app)
        for app, evolved in zip(v1, v2, strict=True)
    ]
    typed = sum(len(app.requests) for app in v2[::2])
    v2_late = [partial(subscribe_v2, app=one_request(app)) for app in late]
    for version, sessions, newcomers, extra in (
        ("bridge-v1", v1_sessions, [partial(subscribe_v1, app=app) for app in late], ""),
        ("bridge-v2", v2_sessions, v2_late, f" typed_requests={typed}"),
    ):
        full, append = bridge_passes(text, sessions, newcomers)
        for name, (cpu, wall) in (("full", full), ("append", append)):
            print(
                f"policy_v2 apps={args.apps} clusters={args.clusters} seconds={cpu:.3f} "
                f"wall={wall:.3f} version={version} pass={name}{extra}"
            )


def one_request(app: Application) -> EvolvingApplication:
    """A late evolving application with one non-preemptible request: its v1 one's first
    cluster."""
    assert app.request is not None
    cluster, hosts = next(iter(app.request.nodes.items()))
    request = TypedRequest(id="np", cluster=cluster, hosts=hosts, duration=app.request.duration)
    return EvolvingApplication(
        id=app.id, order=app.order, clusters=app.clusters, requests=[RequestRow(request=request)]
    )


if __name__ == "__main__":
    main()
