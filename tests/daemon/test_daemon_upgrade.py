"""Upgrades keep state: ``coorm-bridge serve`` over a store the previous release wrote (schema
version 2, tests/data/store-v2.sqlite) starts, keeps a copy of the old file beside it, and serves
the old sessions (those that ended past the retention deleted at start).

Each test starts its own daemon and stops only that process, by PID.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests import daemons
from tests.daemons import free_port

pytestmark = pytest.mark.daemon

V2 = Path(__file__).parent.parent / "data" / "store-v2.sqlite"
OPS = "ops-token-0123456789abcd"
#: Only ends a test that would hang: what it waits for comes as soon as the daemon started.
FAILSAFE = 60


def test_a_daemon_over_the_previous_release_store_migrates_it_and_serves_its_sessions(
    folder, make_daemon
):
    (folder / "state").mkdir(mode=0o700)
    shutil.copyfile(V2, folder / "state" / "bridge.sqlite")  # the daemon's store, see config()
    port = free_port()
    config = daemons.config(port=port, tokens={OPS: "ops"}, admins=["ops"])
    daemon = make_daemon(config, platform=daemons.PLATFORM, port=port).start()
    with daemon.client(OPS) as ops:
        listed = ops.all_sessions()
        assert [(s.name, s.owner) for s in listed[:2]] == [("waiting", "alice"), ("started", "bob")]
        # The one that finished at 1500 (in 1970) is past any retention: the purge the daemon
        # runs at start deletes it, and it says so.
        deadline = time.monotonic() + FAILSAFE
        while len(listed) > 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            listed = ops.all_sessions()
        assert [s.name for s in listed] == ["waiting", "started"]
    assert "deleted 1 sessions ended before" in daemon.log.read_text()
    (copy,) = (folder / "state").glob("bridge.sqlite.v2-*.bak")
    assert f"the version 2 store kept as {copy}" in daemon.log.read_text()
    assert daemon.stop() == 0
