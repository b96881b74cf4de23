"""Write ``store-v3.sqlite``: a store as the previous release (schema version 3) wrote it, for
the migration tests (tests/store/test_migration_v3.py): a waiting session whose view moved many
times, every ``change`` kept (what version 4 coalesces), and a session that ended.

It must be run with that release's code, not today's: it was made from commit ``909ba6b``
(SCHEMA_VERSION 3) installed in a virtual environment of its own, with::

    git archive 909ba6b | tar -x -C /tmp/store-v3
    python3 -m venv /tmp/store-v3/.venv && /tmp/store-v3/.venv/bin/pip install /tmp/store-v3
    cd /tmp && /tmp/store-v3/.venv/bin/python $REPO/tests/data/make_store_v3.py $REPO/tests/data

Every value is fixed (times, names, profiles), so that the tests assert what was written here;
the sessions' ids are read back from it by name.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.store import SCHEMA_VERSION, Store

CLUSTERS = ("c1", "c2")
#: How many times the waiting session's view moved (each a ``change`` event).
MOVES = 200


def availability(cluster: str, t: int, hosts: int) -> dict[str, object]:
    steps = [[t, hosts], [t + 600, hosts // 2]]
    return {
        "cluster": cluster,
        "kind": "availability",
        "profile": {"cluster": cluster, "steps": steps},
    }


def main(folder: Path) -> None:
    assert SCHEMA_VERSION == 3, f"run with the code of schema version 3, not {SCHEMA_VERSION}"
    path = folder / "store-v3.sqlite"
    path.unlink(missing_ok=True)
    with Store(path) as store:
        waiting = store.create_session("alice", "waiting", Filter(), CLUSTERS, now=1000)
        store.update_session(
            waiting.id,
            now=1010,
            state=AppState.REQUEST_SENT,
            request=Request(nodes={"c1": 2}, duration=600),
        )
        store.update_session(waiting.id, now=1020, state=AppState.WAITING, estimated_start=5000)
        first = [availability("c1", 1020, 8), availability("c2", 1020, 4)]
        store.append_event(
            waiting.id, {"type": "change", "time": 1020, "changes": first, "estimated_start": 5000}
        )
        for i in range(1, MOVES):
            t = 1020 + 10 * i
            cluster = CLUSTERS[i % 2]
            changes = [availability(cluster, t, 1 + i % 8)]
            if i == 50:  # c1 upgraded once
                info = {"name": "c1", "hosts": 8, "speed": 2.0}
                changes.append({"cluster": "c1", "kind": "info", "info": info})
            event = {"type": "change", "time": t, "changes": changes, "estimated_start": 5000 - i}
            store.append_event(waiting.id, event)
            if i == 120:
                failed = {"type": "placement_failed", "time": t, "reason": "c1 refused"}
                store.append_event(waiting.id, {**failed, "retry_at": t + 20})

        done = store.create_session("bob", "finished", Filter(), ("c1",), now=1400)
        store.update_session(
            done.id,
            now=1410,
            state=AppState.REQUEST_SENT,
            request=Request(nodes={"c1": 1}, duration=60),
        )
        store.append_event(
            done.id,
            {"type": "change", "time": 1410, "changes": [availability("c1", 1410, 8)]},
        )
        store.update_session(done.id, now=1420, state=AppState.WAITING)
        store.update_session(done.id, now=1430, state=AppState.STARTED, started_at=1430)
        store.append_event(done.id, {"type": "killed", "time": 1490, "reason": "walltime"})
        store.update_session(done.id, now=1500, state=AppState.FINISHED, done_at=1500)
        store.append_event(done.id, {"type": "ended", "time": 1500, "state": "finished"})
    with sqlite3.connect(path) as raw:  # one self-contained file: the WAL folded in
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw.execute("VACUUM")
    raw.close()
    print(path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
