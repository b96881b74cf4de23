"""``coorm-bridge demo``: two coupled applications co-allocated across two clusters.

It plays two launchers with the client library: subscribe, read the first view (the hosts the
local jobs leave free over time), send a request for hosts on two clusters that fits the view
(up to a size each wants), wait for the ``start`` event (one start time, a placeholder
reservation on each cluster), run a few seconds, send ``done``, and watch the ghost end. With
``--start-daemon`` it first starts a private daemon on the mock platform and stops it after.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor

from coorm_bridge.core.messages import ChangeEvent, StartEvent
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.profile import Profile
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from coorm_bridge.launchers.private import PrivateDaemonError, private_daemon
from coorm_bridge.launchers.web_address import find

RUN_SECONDS = 3
#: How long each application asks for, and the margin its selector keeps free after it.
DURATION = 120
SLACK = 30
#: How long the demo waits for a start before giving up (a loaded site may be busy).
START_TIMEOUT = 300


def run_demo(
    url: str | None,
    token: str | None,
    *,
    start_daemon: bool = False,
    ca: str | None = None,
    run: int = RUN_SECONDS,
) -> int:
    """``run``: how long the applications run before they are done (long enough to watch
    them in ``coorm-bridge web``: less than their allocation, DURATION)."""
    if not 1 <= run <= DURATION - SLACK:
        print(f"coorm-bridge demo: --run must be 1 to {DURATION - SLACK} seconds", file=sys.stderr)
        return 2
    try:
        if start_daemon:
            with private_daemon() as private:
                return _demo(BridgeClient(private), run)
        return _demo(BridgeClient(url, token=token, verify=ca), run)
    except (BridgeError, DemoError, PrivateDaemonError) as error:
        print(f"coorm-bridge demo: {error}", file=sys.stderr)
        return 1


class DemoError(Exception):
    pass


def _demo(client: BridgeClient, run: int) -> int:
    infos = sorted(client.clusters(), key=lambda c: -c.hosts)
    if len(infos) < 2:
        raise DemoError("the platform has fewer than two clusters: nothing to co-allocate")
    a, b = infos[0], infos[1]
    print(f"bridge at {client.url}; clusters: ", end="")
    print(", ".join(f"{c.name} ({c.hosts} hosts, speed {c.speed})" for c in infos))
    apps = [
        ("solver+coupler", {a.name: max(1, a.hosts // 8), b.name: max(1, b.hosts // 8)}),
        ("ocean+atmosphere", {a.name: max(1, a.hosts // 16), b.name: max(1, b.hosts // 4)}),
    ]
    sizes = {c.name: c.hosts for c in infos}
    sessions, requests = [], []
    taken: dict[str, int] = {}
    for name, wanted in apps:
        sub = client.subscribe(Filter(clusters=(a.name, b.name)), name=name)
        found = client.events(sub.session, wait=10)
        first = found[0] if found else None
        seen = 0 if first is None else first.seq
        view: dict[str, Profile] = {}
        if isinstance(first, ChangeEvent):
            view = {c.cluster: c.profile.profile() for c in first.changes if c.profile}
            print(f"[{name}] session {sub.session}: its view, hosts free around the local jobs:")
            for cluster, shown in sorted(view.items()):
                print(f"    {cluster}: {_free(shown, sizes[cluster], first.time)}")
        # A moldable selector: up to the hosts wanted, as many as the view leaves free from
        # now for the whole run (less what the applications before it take), at least one.
        now = first.time if first is not None else int(time.time())
        nodes = {}
        for cluster, count in wanted.items():
            profile = view.get(cluster)
            free = count if profile is None else profile.min_over(now, now + DURATION + SLACK)
            nodes[cluster] = max(1, min(count, free - taken.get(cluster, 0)))
            taken[cluster] = taken.get(cluster, 0) + nodes[cluster]
        sessions.append((name, sub.session, seen))
        requests.append(Request(nodes=nodes, duration=DURATION))
    # Both launchers answer their views at once: the policy places them in the same pass.
    with ThreadPoolExecutor(len(apps)) as pool:
        answers = list(pool.map(lambda s, r: client.request(s[1], r), sessions, requests))
    for (name, _, _), request, answer in zip(sessions, requests, answers, strict=True):
        asked = " + ".join(f"{n} hosts on {c}" for c, n in request.nodes.items())
        print(
            f"[{name}] requests {asked} for {DURATION} s -> estimated start "
            f"{_when(answer.estimated_start)}"
        )
    starts = {}
    for name, sid, seen in sessions:
        start = _wait_start(client, name, sid, seen)
        starts[name] = start
        print(f"\n[{name}] START at {_when(start.time)}, allocation until {_when(start.end)}")
        for cluster, allocation in sorted(start.allocations.items()):
            print(
                f"    {cluster}: reservation {allocation.reservation}, "
                f"{len(allocation.hosts)} hosts {_hosts(allocation.hosts)}"
            )
    both = all(set(s.allocations) == {a.name, b.name} for s in starts.values())
    print(
        f"\nco-allocated: {'yes' if both else 'NO'} -- each application starts on "
        f"{a.name} and {b.name} at one instant, inside placeholder reservations"
    )
    _links(client, (a.name, b.name))
    print(f"running for {run} s, then done...")
    time.sleep(run)
    for name, sid, _ in sessions:
        client.done(sid)
        info = client.session(sid)
        print(
            f"[{name}] done: state {info.state.value}, hosts held (ghost) until {_when(info.end)}"
        )
    for name, sid, _ in sessions:
        for event in client.follow(sid, after=client.session(sid).last_seq - 1, wait=10):
            if event.type == "ended":
                print(f"[{name}] ended ({event.state.value}): placeholders released")
    return 0 if both else 1


def _links(client: BridgeClient, clusters: tuple[str, ...]) -> None:
    """Where to watch the placeholders, when the user's ``coorm-bridge web`` reads this bridge."""
    web = find(client.url)
    if web is None:
        return
    for cluster in clusters:
        print(f"see them among the local jobs: {web.page(f'cluster.html?c={cluster}')}")


def _wait_start(client: BridgeClient, name: str, sid: str, seen: int) -> StartEvent:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        for event in client.events(sid, after=seen, wait=10):
            seen = event.seq
            if event.type == "start":
                return event
            if event.type == "change":
                print(f"[{name}] view changed; estimated start {_when(event.estimated_start)}")
            if event.type in ("ended", "killed"):
                raise DemoError(f"{name} ended before it started ({event.type})")
    client.withdraw(sid)
    raise DemoError(f"{name} did not start within {START_TIMEOUT} s; withdrawn")


def _when(t: int | None) -> str:
    return (
        "never (larger than the platform)"
        if t is None
        else time.strftime("%H:%M:%S", time.localtime(t))
    )


def _free(profile: Profile, hosts: int, now: int, shown: int = 3) -> str:
    """``35 of 64 free now, 1 from 12:25:14, 3 from 13:09:24, ...``: the first few steps."""
    steps = profile.steps(now)
    parts = [f"{steps[0][1]} of {hosts} free now"]
    parts += [f"{free} from {_when(t)}" for t, free in steps[1:shown]]
    return ", ".join(parts) + (", ..." if len(steps) > shown else "")


def _hosts(names: list[str]) -> str:
    return f"[{', '.join(names)}]" if len(names) <= 4 else f"[{names[0]} ... {names[-1]}]"
