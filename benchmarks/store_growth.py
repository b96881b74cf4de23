"""The store's size under waiting sessions whose views move (issue 24, "the database grows
without bound"; target: 1,000 waiting sessions for 24 simulated hours under 100 MB).

The service in this process over the embedded default platform (three busy clusters) on a
virtual clock, as tests/sites.py builds it and as the daemon does (``assemble``, the default
configuration: passes every second at most, polls every 10 s, a user's default limits, the
store on disk with its usual settings). A daemon on a wall clock would need 24 real hours; the
virtual clock runs the same code (poller, passes, recorder, store, the loop's purge) in minutes.

N sessions of 50 users (each within the default limits) subscribe to every cluster, and each asks
for 4 to 11 hosts on alpha and 2 to 5 on beta for a day: a few start, the others wait while the
load moves their views and estimates. Every ``--step`` simulated seconds (the poll interval) the
platform runs, every cluster is polled and a pass runs if due; every simulated hour the loop's
periodic store work runs (``Loop.purge``, when there is one). Prints, every few hours and at the
end:

    store_growth hour=H sessions=N waiting=W events=E db_bytes=B wal_bytes=W per_hour_bytes=G
    peak_bytes=P seconds=S

``db_bytes`` is the database file, ``wal_bytes`` its write-ahead log (both after the hour's
store work); ``per_hour_bytes`` the growth of both over the last simulated hour; ``peak_bytes``
the most both took together after any step so far; ``seconds`` the real time taken so far.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import VirtualClock, load_platform
from coorm_bridge.core.model import Filter
from coorm_bridge.core.states import AppState
from coorm_bridge.service.config import Config
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

START = 1_700_000_000
HOUR = 3600
#: The sessions' owners: each within the default limits (a user's host-seconds ahead).
USERS = 50


def sizes(path: Path) -> tuple[int, int]:
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size, wal.stat().st_size if wal.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--step", type=int, default=10, help="simulated seconds between polls")
    parser.add_argument("--every", type=int, default=4, help="print every this many hours")
    args = parser.parse_args()

    spec = load_platform().model_copy(update={"start": START})
    adapter = MockAdapter(spec, VirtualClock(START))
    clusters = [info.name for info in adapter.clusters()]
    config = Config()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="store-growth-") as folder:
        path = Path(folder) / "bridge.sqlite"
        store = Store(path)
        service = assemble(config, adapter, store)
        bridge, loop = service.bridge, service.loop
        for cluster in clusters:
            loop.poll(cluster)
        loop.tick()
        for i in range(args.sessions):
            user = f"user{i % USERS:02d}"
            sid = bridge.subscribe(user, Filter(), None).session
            bridge.put_request(user, sid, {"alpha": 4 + i % 8, "beta": 2 + i % 4}, 86400)
        loop.tick()
        now = START
        last = peak = sum(sizes(path))
        for hour in range(1, args.hours + 1):
            end = START + hour * HOUR
            while now < end:
                now = min(now + args.step, end)
                adapter.run_until(now)
                for cluster in clusters:
                    loop.poll(cluster)
                loop.tick()
                peak = max(peak, sum(sizes(path)))
            purge = getattr(loop, "purge", None)
            if purge is not None:
                purge()
            db, wal = sizes(path)
            if hour % args.every == 0 or hour == args.hours:
                events = store._read("SELECT COUNT(*) FROM events")[0][0]
                waiting = store.counts()[AppState.WAITING]
                print(
                    f"store_growth hour={hour} sessions={args.sessions} waiting={waiting} "
                    f"events={events} db_bytes={db} wal_bytes={wal} "
                    f"per_hour_bytes={db + wal - last} peak_bytes={peak} "
                    f"seconds={time.perf_counter() - began:.0f}",
                    flush=True,
                )
            last = db + wal
        store.close()


if __name__ == "__main__":
    main()
