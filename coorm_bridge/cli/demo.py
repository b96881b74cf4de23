"""``coorm-bridge demo``: two coupled applications co-allocated across two clusters.

It plays two launchers with the client library: subscribe, read the first view, send a request
for hosts on two clusters, wait for the ``start`` event (one start time, a placeholder
reservation on each cluster), run a few seconds, send ``done``, and watch the ghost end. With
``--start-daemon`` it first starts a private daemon on the mock platform and stops it after.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from coorm_bridge.core.messages import StartEvent
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.client import BridgeClient, BridgeError

RUN_SECONDS = 3
#: How long the demo waits for a start before giving up (a loaded site may be busy).
START_TIMEOUT = 300
DEMO_CONFIG = """\
# A private bridge for the demo: the mock platform, short fair-start so the ghost is visible.
[bridge]
socket = "bridge.sock"
state_dir = "state"
[policy]
interval = 0.5
fair_start = 5
[placement]
poll_interval = 2
[adapter]
kind = "mock"
"""


def run_demo(
    url: str | None, token: str | None, *, start_daemon: bool = False, ca: str | None = None
) -> int:
    try:
        if start_daemon:
            with private_daemon() as private:
                return _demo(BridgeClient(private))
        return _demo(BridgeClient(url, token=token, verify=ca))
    except (BridgeError, DemoError) as error:
        print(f"coorm-bridge demo: {error}", file=sys.stderr)
        return 1


class DemoError(Exception):
    pass


def _demo(client: BridgeClient) -> int:
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
    sessions = []
    for name, _ in apps:
        sub = client.subscribe(Filter(clusters=(a.name, b.name)), name=name)
        found = client.events(sub.session, wait=10)
        first = found[0] if found else None
        seen = 0 if first is None else first.seq
        if first is not None and first.type == "change":
            free = ", ".join(
                f"{c.cluster}: {c.profile.steps[0][1]} free"
                for c in first.changes
                if c.profile is not None
            )
            print(f"[{name}] session {sub.session}: first view {free}")
        sessions.append((name, sub.session, seen))
    # Both launchers answer their views at once: the policy places them in the same pass.
    with ThreadPoolExecutor(len(apps)) as pool:
        answers = list(
            pool.map(
                lambda app, s: client.request(s[1], Request(nodes=app[1], duration=120)),
                apps,
                sessions,
            )
        )
    for (name, nodes), answer in zip(apps, answers, strict=True):
        wanted = " + ".join(f"{n} hosts on {c}" for c, n in nodes.items())
        print(
            f"[{name}] requests {wanted} for 120 s -> estimated start "
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
    print(f"running for {RUN_SECONDS} s, then done...")
    time.sleep(RUN_SECONDS)
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


def _hosts(names: list[str]) -> str:
    return f"[{', '.join(names)}]" if len(names) <= 4 else f"[{names[0]} ... {names[-1]}]"


@contextmanager
def private_daemon() -> Iterator[str]:
    """A daemon of our own on the mock platform, in a temporary folder, stopped afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="coorm-demo-", dir="/tmp"))
    (folder / "coorm-bridge.toml").write_text(DEMO_CONFIG)
    log = (folder / "daemon.log").open("w")
    command = [
        sys.executable,
        "-c",
        "import sys; from coorm_bridge.cli.main import main; sys.exit(main())",
        "serve",
        "--config",
        str(folder / "coorm-bridge.toml"),
    ]
    # cwd: the temporary folder, so that a source tree never shadows the installed package.
    daemon = subprocess.Popen(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
    url = f"unix://{folder / 'bridge.sock'}"
    try:
        _wait_ready(url, daemon, folder / "daemon.log")
        print(f"started a private daemon (pid {daemon.pid}) on the mock platform")
        yield url
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        if os.environ.get("COORM_DEMO_KEEP"):
            print(f"daemon files kept in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(url: str, daemon: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    with BridgeClient(url, timeout=2) as client:
        while time.monotonic() < deadline:
            if daemon.poll() is not None:
                raise DemoError(f"the daemon exited ({daemon.returncode}):\n{log.read_text()}")
            try:
                client.health()
                return
            except BridgeError:
                time.sleep(0.2)
    raise DemoError(f"the daemon did not answer within 60 s:\n{log.read_text()}")
