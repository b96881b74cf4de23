"""Write ``store-v2.sqlite``: a store as the previous release (schema version 2) wrote it, for
the migration tests (tests/store/test_migration.py, tests/daemon/test_daemon_upgrade.py).

It must be run with that release's code, not today's: it was made from commit ``e7e6fa6``
(SCHEMA_VERSION 2) checked out beside the repository, with::

    git worktree add --detach /tmp/store-v2 e7e6fa6
    cd /tmp && PYTHONPATH=/tmp/store-v2 $REPO/.venv/bin/python \
        $REPO/tests/data/make_store_v2.py $REPO/tests/data
    git worktree remove /tmp/store-v2

(PYTHONPATH comes before the editable install of today's code: ``coorm_bridge.store`` is then
imported from /tmp/store-v2, which the assertion on SCHEMA_VERSION checks.)

Every value is fixed (ids, times, names), so that the tests assert what was written here.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.store import SCHEMA_VERSION, JobCommand, JobRow, PlaceholderRow, Store

#: Three sessions on the test daemons' clusters (c1, c2) in the states a store holds longest.
CLUSTERS = ("c1", "c2")


def main(folder: Path) -> None:
    assert SCHEMA_VERSION == 2, f"run with the code of schema version 2, not {SCHEMA_VERSION}"
    path = folder / "store-v2.sqlite"
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
        store.append_event(waiting.id, {"type": "change", "time": 1020, "changes": []})

        started = store.create_session("bob", "started", Filter(min_hosts=2), CLUSTERS, now=1100)
        store.update_session(
            started.id,
            now=1110,
            state=AppState.REQUEST_SENT,
            request=Request(nodes={"c1": 2, "c2": 1}, duration=3600),
        )
        store.update_session(started.id, now=1120, state=AppState.WAITING)
        for cluster, hosts in (("c1", ("c1-0", "c1-1")), ("c2", ("c2-0",))):
            store.put_placeholder(
                PlaceholderRow(
                    session_id=started.id,
                    cluster=cluster,
                    name=f"coorm-{started.id}-{cluster}",
                    start=1200,
                    end=4800,
                    hosts=len(hosts),
                    host_names=hosts,
                    status="held",
                )
            )
        store.update_session(
            started.id, now=1200, state=AppState.STARTED, started_at=1200, alloc_end=4800
        )
        allocations = {
            "c1": {"hosts": ["c1-0", "c1-1"], "reservation": f"coorm-{started.id}-c1"},
            "c2": {"hosts": ["c2-0"], "reservation": f"coorm-{started.id}-c2"},
        }
        store.append_event(
            started.id, {"type": "start", "time": 1200, "end": 4800, "allocations": allocations}
        )
        command = JobCommand(
            argv=("/bin/sleep", "60"),
            environment={"OMP_NUM_THREADS": "4"},
            workdir="/home/bob/run",
            stdout="/home/bob/run/out",
            stderr="/home/bob/run/err",
        )
        store.add_job(
            JobRow(
                id="solverjob001",
                session_id=started.id,
                cluster="c1",
                name="solver",
                command=command,
                walltime=600,
                reservation=f"coorm-{started.id}-c1",
                host_names=("c1-0", "c1-1"),
                created=1210,
            )
        )
        store.update_job("solverjob001", step="ended", state="completed", exit_code=0, ended=1300)

        done = store.create_session("alice", "finished", Filter(), ("c1",), now=1400)
        store.update_session(
            done.id,
            now=1410,
            state=AppState.REQUEST_SENT,
            request=Request(nodes={"c1": 1}, duration=60),
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
