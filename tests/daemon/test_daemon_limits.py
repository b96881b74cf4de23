"""Aggregate ``[limits]`` against a real ``coorm-bridge serve``, as the issue reproduced them: one
user's sessions cannot take the whole platform, and another user still gets hosts.

Each test starts its own daemon and stops only that process, by PID.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.client import BridgeError
from tests import daemons
from tests.daemons import free_port, wait_for

pytestmark = pytest.mark.daemon

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789abc"
#: The issue's [limits] on the 12-host platform (c1: 8, c2: 4), with held_hosts added.
ISSUE = {"sessions": 3, "hosts": 4, "duration": 600, "held_hosts": 8}
FAILSAFE = 60


class Daemon(daemons.Daemon):
    """Two clusters of 8 and 4 hosts, tokens for alice and bob, the given [limits]."""

    def __init__(self, folder: Path, limits: Mapping[str, Any]) -> None:
        port = free_port()
        config = daemons.config(port=port, tokens={ALICE: "alice", BOB: "bob"}, limits=limits)
        super().__init__(folder, config, daemons.PLATFORM, port)


@pytest.fixture
def make_daemon(make_daemon):
    return functools.partial(make_daemon, cls=Daemon)


def test_a_users_third_session_is_refused_past_her_caps_and_another_user_starts(make_daemon):
    daemon = make_daemon(ISSUE).start()
    with daemon.client(token=ALICE) as alice, daemon.client(token=BOB) as bob:
        sids = [alice.subscribe(Filter()).session for _ in range(3)]
        for sid in sids[:2]:
            alice.request(sid, Request(nodes={"c1": 4}, duration=600))
            wait_for(alice, sid, "start")
        with pytest.raises(BridgeError) as refused:
            alice.request(sids[2], Request(nodes={"c2": 4}, duration=600))
        assert refused.value.status == 403
        assert refused.value.detail.startswith(
            "limits.reserved allows 4800 host-seconds ahead (by default limits.held_hosts x "
            "limits.duration); alice has "
        )
        assert refused.value.detail.endswith(" and asks for 2400 more")
        assert alice.session(sids[2]).request is None  # nothing was written
        own = bob.subscribe(Filter()).session
        bob.request(own, Request(nodes={"c2": 1}, duration=600))
        wait_for(bob, own, "start")


def test_without_limits_one_user_cannot_take_every_host_for_years(make_daemon):
    daemon = make_daemon({}).start()  # an empty [limits]: the defaults
    with daemon.client(token=ALICE) as alice:
        sid = alice.subscribe(Filter()).session
        with pytest.raises(BridgeError) as refused:
            alice.request(sid, Request(nodes={"c1": 8, "c2": 4}, duration=10 * 365 * 86400))
        assert refused.value.status == 403
        assert "limits.duration allows 604800 s" in refused.value.detail
        with pytest.raises(BridgeError) as refused:
            alice.request(sid, Request(nodes={"c1": 8, "c2": 4}, duration=3600))
        assert refused.value.detail == (
            "limits.held_share allows 6 hosts held at once (0.5 of the platform's 12); "
            "the request asks for 12 (alice holds 0 now), so it could never start"
        )
        alice.request(sid, Request(nodes={"c1": 6}, duration=3600))
        wait_for(alice, sid, "start")
