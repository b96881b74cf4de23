"""The Gantt chart of a 1,000-host cluster with 10,000 jobs: built by the bridge, drawn by the
browser (issue target: drawn in under a second).

1. The bridge's side: a synthetic snapshot (``--hosts`` hosts, ``--jobs`` local jobs running and
   pending, ``--placeholders`` of the bridge's, some hosts down or drained) turned into the
   ``GET /v1/clusters/{c}/occupancy`` answer (:func:`coorm_bridge.service.occupancy.occupancy`
   then its JSON), timed in this process.
2. The browser's side: that JSON served with the package's pages (the same files the daemon and
   ``coorm-bridge web`` serve) by a small server on loopback, opened in headless Chromium
   (Debian's, driven by Playwright). Timed in the page: from the navigation's start to the
   first drawing (fetch, parse, index, draw), one ``set`` (index and draw) of the data, and
   redraws at the default two hours and at a week (every bar in sight).

Printed: medians (and max) over ``--loads`` page loads and ``--redraws`` redraws.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from fastapi.responses import Response

from coorm_bridge.core.batch import ClusterSnapshot, Job, JobState, Node, NodeState
from coorm_bridge.service.occupancy import occupancy
from coorm_bridge.store.rows import PlaceholderRow, PlaceholderStatus
from coorm_bridge.web import pages

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.web.conftest import ARGS, chromium_path  # the tests' way to start it

NOW = 1_800_000_000


def snapshot(hosts: int, jobs: int, seed: int) -> ClusterSnapshot:
    """A busy cluster: running jobs on consecutive hosts, pending ones at predicted starts over
    two days (a tenth with no hosts chosen yet), 1% of hosts down, 1% drained."""
    rng = random.Random(seed)
    nodes = tuple(
        Node(
            name=f"n{i:04d}",
            state=NodeState.DOWN if i % 100 == 7 else NodeState.DRAINED if i % 100 == 42 else "up",
        )
        for i in range(hosts)
    )
    listed = []
    for j in range(jobs):
        width = min(hosts, int(rng.paretovariate(1.2)))
        first = rng.randrange(hosts - width + 1)
        running = j < jobs // 5
        start = NOW - rng.randrange(1, 6 * 3600) if running else NOW + rng.randrange(48 * 3600)
        listed.append(
            Job(
                id=str(100000 + j),
                user=f"user{j % 50}",
                state=JobState.RUNNING if running else JobState.PENDING,
                hosts=width,
                host_names=()
                if not running and j % 10 == 0
                else tuple(nodes[k].name for k in range(first, first + width)),
                walltime=rng.randrange(600, 12 * 3600),
                start=start,
            )
        )
    return ClusterSnapshot(cluster="big", time=NOW, nodes=nodes, jobs=tuple(listed))


def placeholders(hosts: int, count: int) -> list[PlaceholderRow]:
    return [
        PlaceholderRow(
            session_id=f"s{i:015d}",
            cluster="big",
            name=f"coorm-bench-s{i:015d}-big",
            start=NOW + i * 600,
            end=NOW + i * 600 + 3600,
            hosts=8,
            host_names=tuple(f"n{(i * 8 + k) % hosts:04d}" for k in range(8)),
            status=PlaceholderStatus.GHOST if i % 5 == 0 else PlaceholderStatus.HELD,
        )
        for i in range(count)
    ]


def answer(hosts: int, jobs: int, held: int, seed: int) -> tuple[bytes, float, float]:
    """The occupancy's JSON, the seconds to build it and to serialise it."""
    shot = snapshot(hosts, jobs, seed)
    rows = placeholders(hosts, held)
    started = time.perf_counter()
    built = occupancy(
        cluster="big",
        now=NOW,
        snapshot=shot,
        stale=False,
        horizon=NOW + 300,
        placeholders=rows,
        sessions={},
        sees=lambda owner: True,
        passes=1,
    )
    middle = time.perf_counter()
    body = built.model_dump_json().encode()
    return body, middle - started, time.perf_counter() - middle


def server(body: bytes) -> tuple[str, uvicorn.Server]:
    app = FastAPI()

    @app.get("/v1/clusters/big/occupancy")
    async def big() -> Response:
        return Response(body, media_type="application/json")

    @app.get("/v1/passes")
    async def passes(after: int = 0, wait: float = 0) -> Response:
        if after >= 1:  # nothing changes: the page's long poll waits, as on a quiet bridge
            await asyncio.sleep(wait)
        return Response(f'{{"passes": 1, "time": {NOW}}}', media_type="application/json")

    app.mount("/ui", pages())
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    running = uvicorn.Server(config)
    threading.Thread(target=running.run, kwargs={"sockets": [listener]}, daemon=True).start()
    while not running.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{port}", running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--placeholders", type=int, default=50)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--redraws", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    a = parser.parse_args()
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - the test extras

    body, build, dump = answer(a.hosts, a.jobs, a.placeholders, a.seed)
    print(f"cluster: {a.hosts} hosts, {a.jobs} jobs, {a.placeholders} placeholders")
    print(
        f"bridge: occupancy built in {build * 1000:.0f} ms, JSON in {dump * 1000:.0f} ms, "
        f"{len(body) / 1e6:.2f} MB"
    )
    base, running = server(body)
    first, sets, near, week = [], [], [], []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium_path(), args=ARGS)
        for _ in range(a.loads):
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{base}/ui/cluster.html?c=big#token=bench")
            page.wait_for_function("() => Number(document.body.dataset.drawn ?? 0) >= 1")
            first.append(float(page.evaluate("document.body.dataset.drawnAt")))
            sets.append(
                page.evaluate(
                    "(() => { const t = performance.now(); coormGantt.set(coormGantt.data);"
                    " return performance.now() - t; })()"
                )
            )
            for window, out in ((7200, near), (7 * 86400, week)):
                page.evaluate(f"coormGantt.show({window})")
                for step in range(a.redraws):
                    page.evaluate(f"coormGantt.scroll({0.01 if step % 2 else -0.01})")
                    out.append(float(page.evaluate("document.body.dataset.drawnMs")))
            page.close()
        browser.close()
    running.should_exit = True
    for label, values in (
        ("navigation to first drawing", first),
        ("set (index + draw)", sets),
        ("redraw, 2 hours shown", near),
        ("redraw, a week shown (every bar)", week),
    ):
        middle, most = statistics.median(values), max(values)
        print(f"browser: {label}: median {middle:.0f} ms, max {most:.0f} ms")
    verdict = "met" if max(first) < 1000 else "MISSED"
    print(f"target: drawn within 1 s of opening the page: {verdict} (max {max(first):.0f} ms)")


if __name__ == "__main__":
    main()
