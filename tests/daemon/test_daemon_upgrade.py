"""Upgrades keep state: ``coorm-bridge serve`` over a store the previous release wrote (schema
version 2, tests/data/store-v2.sqlite) starts, keeps a copy of the old file beside it, and serves
the old sessions.

Each test starts its own daemon and stops only that process, by PID.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import daemons
from tests.daemons import free_port

pytestmark = pytest.mark.daemon

V2 = Path(__file__).parent.parent / "data" / "store-v2.sqlite"
OPS = "ops-token-0123456789abcd"


def test_a_daemon_over_the_previous_release_store_migrates_it_and_serves_its_sessions(
    folder, make_daemon
):
    (folder / "state").mkdir(mode=0o700)
    shutil.copyfile(V2, folder / "state" / "bridge.sqlite")  # the daemon's store, see config()
    port = free_port()
    config = daemons.config(port=port, tokens={OPS: "ops"}, admins=["ops"])
    daemon = make_daemon(config, platform=daemons.PLATFORM, port=port).start()
    listed = daemon.client(OPS).all_sessions()
    assert [(s.name, s.owner) for s in listed] == [
        ("waiting", "alice"),
        ("started", "bob"),
        ("finished", "alice"),
    ]
    assert listed[2].done_at == 1500
    (copy,) = (folder / "state").glob("bridge.sqlite.v2-*.bak")
    assert f"the version 2 store kept as {copy}" in daemon.log.read_text()
    assert daemon.stop() == 0
