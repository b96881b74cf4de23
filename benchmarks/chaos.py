"""Chaos: applications through a daemon killed with ``kill -9`` and restarted, again and again.

A real ``coorm-bridge serve`` over TCP on the mock platform (two clusters, a speed-up so that
allocations end in seconds, its state kept in the state folder as a real batch system keeps its
own). ``--apps`` launchers, ``--concurrency`` at a time, each subscribe, request hosts on one or
two clusters, wait for ``start``, run a part of their allocation and send ``done``; every call is
retried while the daemon is down. Meanwhile the daemon is killed ``--kills`` times and restarted
on the same state folder at once.

Then it counts:

- ``lost``: an acknowledged subscription, request or event the daemon no longer has (each
  launcher's events, read again at the end, must hold every event it was once given, or for a
  superseded ``change`` or ``placement_failed`` the later one that replaced it);
- ``double_allocations``: two applications given one host at overlapping times (from the
  ``start`` events' hosts, from start to done + fair_start, or the end of the allocation);
- ``host_mismatches``: a ``start`` event naming hosts other than those the platform's reservation
  held (read from the platform's own saved state, not through the bridge);
- ``orphans``: placeholders the platform still holds once every application has ended.

Prints ``chaos apps=N kills=K lost=0 double_allocations=0 host_mismatches=0 orphans=0`` and
``seconds``; exits 1 when any count is not 0.
"""

from __future__ import annotations

import argparse
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from coorm_bridge.adapters.mock.__main__ import show
from coorm_bridge.core.messages import Event, StartEvent
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.client import BridgeClient, BridgeError, BridgeUnreachable
from coorm_bridge.store.compaction import COALESCED

T = TypeVar("T")
PLATFORM = """start = 1700000000
[[cluster]]
name = "c1"
hosts = 16
[[cluster]]
name = "c2"
hosts = 8
"""
FAIR_START = 5
CONFIG = """[bridge]
socket = "bridge.sock"
state_dir = "state"
tcp = {{ host = "127.0.0.1", port = {port} }}
tokens = {{ "{token}" = "chaos" }}
[policy]
interval = 0.3
fair_start = {fair_start}
[placement]
poll_interval = 1
[adapter]
kind = "mock"
platform = "platform.toml"
speedup = {speedup}
"""


class Daemon:
    def __init__(self, folder: Path, speedup: float) -> None:
        self.folder = folder
        self.port = free_port()
        self.token = secrets.token_hex(16)
        (folder / "platform.toml").write_text(PLATFORM)
        config = folder / "bridge.toml"
        text = CONFIG.format(
            port=self.port, token=self.token, fair_start=FAIR_START, speedup=speedup
        )
        config.write_text(text)
        config.chmod(0o600)
        self.config = config
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-c", "from coorm_bridge.cli.main import main; main()"]
        with (self.folder / "daemon.log").open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own command, an argument vector
                [*command, "serve", "--config", str(self.config)],
                cwd=self.folder,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def retried(call: Callable[[], T], deadline: float) -> T:
    """A call, again while the daemon is down (a launcher's patience)."""
    while True:
        try:
            return call()
        except BridgeUnreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Launcher:
    """One application: what it was told, to check against what the daemon keeps."""

    def __init__(self, url: str, token: str, rng: random.Random) -> None:
        self.client = BridgeClient(url, token=token, timeout=10)
        self.rng = rng
        self.sid: str | None = None
        self.seen: list[Event] = []
        self.start: StartEvent | None = None
        self.done_at: int | None = None

    def run(self) -> None:
        deadline = time.monotonic() + 600
        clusters = self.rng.choice([("c1",), ("c2",), ("c1", "c2")])
        nodes = {c: self.rng.randint(1, 4) for c in clusters}
        duration = self.rng.randint(60, 300)
        self.sid = retried(
            lambda: self.client.subscribe(Filter(clusters=clusters)).session, deadline
        )
        request = Request(nodes=nodes, duration=duration)
        try:
            retried(lambda: self.client.request(self.sid, request), deadline)
        except BridgeError as error:
            # The daemon died after storing the request and before answering; by the retry
            # the session had started on it: the request was taken, as a launcher checks.
            info = retried(lambda: self.client.session(self.sid), deadline)
            if error.status != 409 or info.request != request:
                raise
        for event in self.client.follow(self.sid, wait=5, max_retry=1):
            self.seen.append(event)
            if isinstance(event, StartEvent) and self.start is None:
                self.start = event
                time.sleep(self.rng.uniform(0.5, 3.0))
                retried(lambda: self.client.done(self.sid), deadline)
            if event.type == "ended":
                break


def keeps(kept: list[Event], seen: list[Event]) -> bool:
    """Whether the daemon still has every event a launcher was given: each as it was given, or,
    for a superseded ``change`` or ``placement_failed`` (coalesced, see store/compaction.py), a
    later event of its type that replaced it; and nothing else before the last one given."""
    stored = {event.seq: event for event in kept}
    for event in seen:
        if stored.get(event.seq) == event:
            continue
        if event.type not in COALESCED or event.seq in stored:
            return False
        after = [e for e in kept if e.seq > event.seq]
        run = after[: next((i for i, e in enumerate(after) if e.type not in COALESCED), None)]
        if not any(e.type == event.type for e in run):  # replaced only within its trailing run
            return False
    last = seen[-1].seq if seen else 0
    given = {event.seq for event in seen}
    return all(e.seq in given or e.type in COALESCED for e in kept if e.seq <= last)


def main() -> int:  # noqa: PLR0912, PLR0915 - one scenario, told in order
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=200)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--speedup", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    began = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="cbchaos-", dir="/tmp"))
    daemon = Daemon(folder, args.speedup)
    url = f"http://127.0.0.1:{daemon.port}"
    rng = random.Random(args.seed)
    launchers = [Launcher(url, daemon.token, random.Random(rng.random())) for _ in range(args.apps)]
    reservations: dict[tuple[str, str], set[str]] = {}
    stop = threading.Event()

    def watch() -> None:
        """What the platform's reservations hold, from its own saved state, every moment."""
        while not stop.wait(0.5):
            try:
                state = show(folder / "state", folder / "platform.toml")
            except Exception:  # noqa: S112 - the journal is busy being written: next time
                continue
            for cluster, shot in state["clusters"].items():  # type: ignore[union-attr]
                for r in shot.get("reservations", ()):
                    reservations.setdefault((cluster, r["name"]), set()).update(r["host_names"])

    def chaos() -> None:
        for _ in range(args.kills):
            if stop.wait(rng.uniform(2.0, 6.0)):
                return
            daemon.kill()
            daemon.start()
        kills_done.set()

    kills_done = threading.Event()
    daemon.start()
    watcher = threading.Thread(target=watch)
    killer = threading.Thread(target=chaos)
    watcher.start()
    killer.start()
    try:
        with ThreadPoolExecutor(args.concurrency) as pool:
            failures = [f.exception() for f in [pool.submit(x.run) for x in launchers]]
        killer.join()
        time.sleep(3)  # a reconciliation (at start) and the last releases
        check = BridgeClient(url, token=daemon.token, timeout=10)
        deadline = time.monotonic() + 120
        lost = sum(1 for f in failures if isinstance(f, BridgeError) and "no session" in str(f))
        for launcher in launchers:
            if launcher.sid is None:
                continue
            kept = retried(lambda x=launcher: check.events(x.sid), deadline)
            if not keeps(kept, launcher.seen):
                lost += 1
        time.sleep(FAIR_START * 2 / args.speedup + 5)
        stop.set()
        watcher.join()
        state = show(folder / "state", folder / "platform.toml")
        orphans = sum(
            1
            for shot in state["clusters"].values()  # type: ignore[union-attr]
            for r in shot.get("reservations", ())
            if r["name"].startswith("coorm-")
        )
        holds: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
        mismatches = 0
        for launcher in launchers:
            start = launcher.start
            if start is None or launcher.sid is None:
                continue
            info = retried(lambda x=launcher: check.session(x.sid), deadline)
            end = start.end if info.done_at is None else min(start.end, info.done_at + FAIR_START)
            for cluster, allocation in start.allocations.items():
                held = reservations.get((cluster, allocation.reservation or ""))
                if held is not None and not set(allocation.hosts) <= held:
                    mismatches += 1
                for host in allocation.hosts:
                    holds.setdefault((cluster, host), []).append((start.time, end, launcher.sid))
        doubles = 0
        overlaps: list[str] = []
        for (cluster, host), spans in holds.items():
            reach, holder = 0, ""
            for begin, end, sid in sorted(spans):
                if begin < reach:
                    doubles += 1
                    overlaps.append(f"{cluster}/{host}: {sid} from {begin}, {holder} until {reach}")
                if end > reach:
                    reach, holder = end, sid
        errors = [f for f in failures if f is not None]
    finally:
        stop.set()
        daemon.kill()
    print(
        f"chaos apps={args.apps} kills={args.kills} lost={lost} double_allocations={doubles} "
        f"host_mismatches={mismatches} orphans={orphans} started="
        f"{sum(1 for x in launchers if x.start)} errors={len(errors)} "
        f"seconds={time.monotonic() - began:.0f}"
    )
    for error in errors[:3]:
        print(f"  {type(error).__name__}: {error}")
    for overlap in overlaps[:5]:
        print(f"  overlap {overlap}")
    if lost or doubles or mismatches or orphans or errors:
        print(f"  kept for inspection: {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if lost or doubles or mismatches or orphans or errors else 0


if __name__ == "__main__":
    sys.exit(main())
