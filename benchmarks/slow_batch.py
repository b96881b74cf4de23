"""The HTTP API while a batch system takes 3 s per reservation call.

The bridge over a mock platform whose reservation calls each sleep 3 s (a loaded controller), its
loop and its real HTTP server on loopback TCP. 60 launchers subscribe and request hosts at once:
their placements queue up in the enactor (60 calls of 3 s). Meanwhile a prober reads
``GET /v1/health`` and a session's ``GET /v1/sessions/{id}`` back to back for ``--seconds``, and a
launcher waits on its long poll for an event the prober's withdrawal produces.

Prints ``slow_batch call_s=3 puts=60 probes=N health_p99_ms=X read_p99_ms=Y put_p99_ms=Z
withdraw_event_ms=W started=S`` (target: the reads' p99 under 50 ms; a PUT answers after the next
pass, about ``policy.interval``, whatever the batch system does).
"""

from __future__ import annotations

import argparse
import secrets
import socket
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import WallClock, parse_platform
from coorm_bridge.core.batch import ReservationHandle, ReservationSpec
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.http.app import create_app
from coorm_bridge.http.server import BackgroundServer
from coorm_bridge.service.config import BridgeSettings, Config, PlacementSettings, TcpListen
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

PLATFORM = '[[cluster]]\nname = "alpha"\nhosts = 512\n'


class SlowAdapter(MockAdapter):
    """A mock platform whose reservation calls take ``delay`` seconds each, as a loaded
    controller's do (reads stay quick, as ``squeue`` usually is)."""

    delay = 3.0

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        made = super().create_reservation(cluster, spec)
        time.sleep(self.delay)  # the answer comes late
        return made

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        made = super().update_reservation(cluster, spec)
        time.sleep(self.delay)
        return made

    def delete_reservation(self, cluster: str, name: str) -> None:
        super().delete_reservation(cluster, name)
        time.sleep(self.delay)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else values[0]


def main() -> None:  # noqa: PLR0915 - one scenario, told in order
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launchers", type=int, default=60)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--call-seconds", type=float, default=3.0)
    args = parser.parse_args()
    SlowAdapter.delay = args.call_seconds
    folder = Path(tempfile.mkdtemp(prefix="cbslow-", dir="/tmp"))
    token, port = secrets.token_hex(16), free_port()
    config = Config(
        bridge=BridgeSettings(
            socket=folder / "bridge.sock",
            state_dir=folder,
            tcp=TcpListen(host="127.0.0.1", port=port),
            tokens={token: "bench"},
        ),
        policy=PolicyConfig(interval=0.5),
        placement=PlacementSettings(poll_interval=2.0),
    )
    adapter = SlowAdapter(parse_platform(PLATFORM), WallClock())
    store = Store(folder / "bridge.sqlite")
    service = assemble(config, adapter, store)
    loop = service.loop
    loop.start()
    server = BackgroundServer(
        create_app(service), unix_path=folder / "bridge.sock", tcp=("127.0.0.1", port)
    )
    server.start()
    base = f"http://127.0.0.1:{port}/v1"
    headers = {"Authorization": f"Bearer {token}"}

    def call(method: str, path: str, body: object = None) -> tuple[float, dict[str, object]]:
        begin = time.perf_counter()
        answer = requests.request(method, base + path, json=body, headers=headers, timeout=120)
        answer.raise_for_status()
        return (time.perf_counter() - begin) * 1000, answer.json()

    try:
        watched = call("POST", "/sessions", {"name": "watched"})[1]["session"]
        sessions = [call("POST", "/sessions", {})[1]["session"] for _ in range(args.launchers)]
        health: list[float] = []
        reads: list[float] = []
        stop = threading.Event()

        def probe() -> None:
            while not stop.is_set():
                health.append(call("GET", "/health")[0])
                reads.append(call("GET", f"/sessions/{sessions[0]}")[0])

        def put(sid: str) -> float:
            return call(
                "PUT", f"/sessions/{sid}/request", {"nodes": {"alpha": 4}, "duration": 600}
            )[0]

        prober = threading.Thread(target=probe)
        prober.start()
        with ThreadPoolExecutor(args.launchers) as pool:
            puts = list(pool.map(put, sessions))
        # A launcher on its long poll: the event a withdrawal produces reaches it at once.
        seen = call("GET", f"/sessions/{watched}")[1]["last_seq"]
        waiter_time: list[float] = []

        def wait() -> None:
            begin = time.perf_counter()
            call("GET", f"/sessions/{watched}/events?after={seen}&wait=30")
            waiter_time.append((time.perf_counter() - begin) * 1000)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(1)
        withdrawn_at = time.perf_counter()
        call("DELETE", f"/sessions/{watched}")
        waiter.join(60)
        withdraw_ms = (time.perf_counter() - withdrawn_at) * 1000 if waiter_time else float("nan")
        time.sleep(max(0.0, args.seconds - 1))
        stop.set()
        prober.join()
        started = sum(
            1 for sid in sessions if call("GET", f"/sessions/{sid}")[1]["state"] == "started"
        )
    finally:
        server.stop()
        loop.stop()
        service.close()
        store.close()
    print(
        f"slow_batch call_s={args.call_seconds:g} puts={len(puts)} probes={len(health)} "
        f"health_p99_ms={p99(health):.1f} read_p99_ms={p99(reads):.1f} "
        f"put_p99_ms={p99(puts):.1f} withdraw_event_ms={withdraw_ms:.1f} started={started}"
    )


if __name__ == "__main__":
    main()
